"""clef_agents.train.precise_calibration: the prior correction chosen per question type on a probe, and its options."""

from __future__ import annotations

import argparse
import json

import pytest

torch = pytest.importorskip("torch")

from clef_agents import wire  # noqa: E402
from clef_agents.train.precise_calibration import _weights, choose_correction, corrected  # noqa: E402


def leaning_probe(n: int = 40):
    """Two yes/no wordings; the second leans towards "yes" by +5 whatever the state, so pooled AUROC
    needs the lean removed. One choice question whose prior is irrelevant to its gold."""
    plain, leaning = wire.Noul(instructions="Spam?"), wire.Noul(instructions="Could this be spam?")
    items, raw, priors = [], [], []
    for i in range(n):
        question = plain if i % 2 else leaning
        is_yes = (i // 2) % 2 == 0
        signal = 1.0 if is_yes else -1.0
        lean = 5.0 if question is leaning else 0.0
        items.append((f"s{i}", question, 0 if is_yes else 1, {"dataset": "d", "form": "own"}))
        raw.append(torch.tensor([signal + lean]))
        priors.append(torch.tensor([lean]))
    choice = wire.Choice(instructions="Which?", criteria={"a": None, "b": None})
    for i in range(n):
        gold = i % 2
        items.append((f"c{i}", choice, gold, {"dataset": "e", "form": "choice"}))
        raw.append(torch.tensor([1.0, 0.0]) if gold == 0 else torch.tensor([0.0, 1.0]))
        priors.append(torch.tensor([2.0, 0.0]))  # subtracting this would push every answer to "b"
    return items, raw, priors


def test_the_correction_is_kept_per_type_where_it_raises_the_criterion():
    items, raw, priors = leaning_probe()
    kept, summaries = choose_correction(items, raw, priors, [0.0, 0.5, 1.0], min_group=10)
    assert kept == {"noul": 1.0}
    assert summaries["noul 1.0"]["noul_auroc"] == 1.0 and summaries["noul 0.0"]["noul_auroc"] < 1.0
    assert summaries["choice 1.0"]["choice_accuracy"] < summaries["choice 0.0"]["choice_accuracy"] == 1.0
    fixed = corrected(items, raw, priors, kept)
    assert fixed[0].item() == pytest.approx(1.0) and fixed[-1].tolist() == [0.0, 1.0]


def test_ties_keep_the_smaller_weight_and_none_is_left_out():
    items, raw, priors = leaning_probe()
    flat = [torch.zeros_like(p) for p in priors]
    kept, _ = choose_correction(items, raw, flat, [0.0, 1.0], min_group=10)
    assert kept == {}


def test_the_weight_grid_is_checked():
    assert _weights("0,0.5, 1") == [0.0, 0.5, 1.0]
    for bad in ("", "a,b", "0,1.5", "-0.1"):
        with pytest.raises(argparse.ArgumentTypeError):
            _weights(bad)


def test_settings_that_read_both_forms_are_refused_unless_the_single_form_is_asked_for(tmp_path, monkeypatch):
    from clef_agents.model.precise import PrefillLM, load_causal_lm
    from clef_agents.train import precise_calibration as calibrate
    from tests.tiny_models import tiny_causal_lm

    folder = tiny_causal_lm(tmp_path / "lm")
    PrefillLM(*load_causal_lm(folder), noul_both_forms=True).save_settings(folder)
    with pytest.raises(
        SystemExit, match="read yes/no questions in both forms .*both_forms_calibration.py, or pass --single-form"
    ):
        calibrate.main(["--lm", str(folder), "--out", str(tmp_path)])
    monkeypatch.setattr("clef_agents.train.reader_probe.wide_probe_items", lambda rows_per_set: [])
    assert (
        calibrate.main(["--lm", str(folder), "--single-form", "--out", str(tmp_path)]) == 0
    )  # on to the (empty) probe
    assert json.loads((tmp_path / "calibration_letter_wide.json").read_text())["items"] == 0
