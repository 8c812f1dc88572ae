"""clef_agents.train.gate_recipe: the gate's teaching, blend and policy records (``clef-agents gate-records``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clef_agents.train import gate_recipe
from clef_agents.train.gate_calls import call_signature, load_calls

CHECK_SETS = Path(__file__).resolve().parents[1] / "bench" / "gate"


def test_no_taught_check_call_repeats_a_call_of_a_set_kept_apart():
    if not all((CHECK_SETS / name).is_file() for name in (*gate_recipe.TAUGHT_SETS, *gate_recipe.KEPT_APART)):
        pytest.skip("bench/gate holds no check sets")
    taught = gate_recipe.taught_check_calls(CHECK_SETS)
    apart = {call_signature(c) for name in gate_recipe.KEPT_APART for c in load_calls(CHECK_SETS / name)}
    calls = [c for name in gate_recipe.TAUGHT_SETS for c in load_calls(CHECK_SETS / name)]
    kept = [c for c in calls if call_signature(c) not in apart]
    assert 0 < len(taught) == len(kept) < len(calls)  # a few calls shared with an untaught set are dropped
    assert {r["meta"]["source"] for r in taught} == set(gate_recipe.TAUGHT_SETS)
    assert not set(gate_recipe.TAUGHT_SETS) & set(gate_recipe.KEPT_APART)
    assert set(gate_recipe.BLEND_SETS) <= set(gate_recipe.KEPT_APART)


def test_the_three_parts_are_written_as_jsonl(tmp_path, monkeypatch):
    record = {"state": "Proposed tool call: x", "labels": {"needs_approval": True}, "meta": {"dataset": "d"}}
    monkeypatch.setattr(gate_recipe, "gate_record_parts", lambda folder: {"teach": [record], "policy": [], "blend": [record, record]})
    written = gate_recipe.write_gate_records(tmp_path / "out", CHECK_SETS)
    assert sorted(written) == ["blend", "policy", "teach"]
    assert [len(written[p].read_text().splitlines()) for p in ("teach", "policy", "blend")] == [1, 0, 2]


def test_the_command_needs_the_check_sets_folder(tmp_path):
    with pytest.raises(SystemExit):
        gate_recipe.main(["--out", str(tmp_path)])
