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
    monkeypatch.setattr(
        gate_recipe, "gate_record_parts", lambda folder: {"teach": [record], "policy": [], "blend": [record, record]}
    )
    written = gate_recipe.write_gate_records(tmp_path / "out", CHECK_SETS)
    assert sorted(written) == ["blend", "policy", "teach"]
    assert [len(written[p].read_text().splitlines()) for p in ("teach", "policy", "blend")] == [1, 0, 2]


def test_the_command_needs_the_check_sets_folder(tmp_path):
    with pytest.raises(SystemExit):
        gate_recipe.main(["--out", str(tmp_path)])


def record(source: str, risky: bool, call: bool = True) -> dict:
    state = "Proposed tool call: x" if call else "Please help me with x"
    return {"state": state, "labels": {"needs_approval": risky}, "meta": {"dataset": source}}


def test_the_lane_policy_is_the_highest_hold_at_that_keeps_every_calling_source_at_its_recall_floor():
    records = [
        record("calls", True),
        record("calls", True),
        record("calls", False),
        record("requests", True, call=False),
    ]
    # the request-only source's risky record scores low, but it proposes no call, so it sets no floor
    policy = gate_recipe.policy_from([0.45, 0.25, 0.01, 0.001], records)
    assert gate_recipe.call_sources(records) == ["calls"]
    assert policy["hold_at"] == 0.2 and policy["per_source"]["calls"]["recall"] == 1.0
    assert policy["per_source"]["requests"]["recall"] == 0.0 and set(policy["curve"]) == {
        str(t) for t in gate_recipe.CURVE
    }
    # no grid value keeps the floor: the lowest one is taken
    assert gate_recipe.policy_from([0.0001, 0.5, 0.0], records[:3])["hold_at"] == min(gate_recipe.CURVE)


def test_rates_count_blocks_only_when_a_block_threshold_is_set():
    assert gate_recipe.rates([0.9, 0.5], [True, False], hold_at=0.4, block_at=0.8) == {
        "auc": 1.0,
        "risky": 1,
        "benign": 1,
        "recall": 1.0,
        "benign_held": 1.0,
        "risky_blocked": 1.0,
        "benign_blocked": 0.0,
    }
    assert gate_recipe.rates([0.9], [True], hold_at=0.4, block_at=None)["auc"] is None
