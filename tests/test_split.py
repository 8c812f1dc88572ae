"""The held-out / trainable split of the staged data sets is complete, disjoint and enforced."""

from __future__ import annotations

import pytest

from clef_agents.train import split
from clef_agents.train.recipes import MINI_MIXTURE, mixture_records


def test_held_out_and_trainable_are_disjoint() -> None:
    assert not set(split.HELD_OUT) & set(split.TRAINABLE)


def test_every_question_type_is_held_out() -> None:
    kinds = {kind for entry in split.HELD_OUT.values() for kind in entry.kinds}
    assert {"noul", "choice", "score", "tool"} <= kinds


def test_shipped_mixture_trains_on_no_held_out_or_barred_set() -> None:
    split.check_trainable(MINI_MIXTURE, shipped=True)


def test_leave_one_out_targets_are_trainable() -> None:
    assert set(split.LEAVE_ONE_OUT) <= set(split.TRAINABLE)


def test_reader_probe_sets_are_trainable_and_shippable_and_never_held_out() -> None:
    assert set(split.READER_PROBE) <= set(split.TRAINABLE)
    assert not split.held_out_in(split.READER_PROBE)
    assert set(split.READER_PROBE.values()) <= {"noul", "choice", "score"}
    split.check_trainable(split.READER_PROBE, shipped=True)


def test_every_staged_set_is_classified() -> None:
    from clef_agents.train.datasets import data_root

    try:
        root = data_root()
    except FileNotFoundError as err:
        pytest.skip(f"shared data not present: {err}")
    staged = {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))} - {"nli"}
    staged |= {p.name for p in (root / "nli").iterdir() if p.is_dir()} if (root / "nli").is_dir() else set()
    if not staged:
        pytest.skip(f"no data sets under {root}")
    unclassified = staged - set(split.HELD_OUT) - set(split.TRAINABLE)
    assert not unclassified, f"staged sets missing from clef_agents.train.split: {sorted(unclassified)}"


def test_a_mixture_with_a_held_out_set_is_refused() -> None:
    with pytest.raises(ValueError, match=r"held-out data set\(s\) \['trec'\]"):
        mixture_records({"trec": 1.0, "banking77": 1.0}, "train")


def test_excluding_the_held_out_set_lets_the_check_pass() -> None:
    split.check_trainable(name for name in {"trec": 1.0, "sst5": 1.0} if name not in ("trec",))
