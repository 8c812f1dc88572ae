"""The written tool calls the gate question is taught on (clef_agents.train.gate_synth)."""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path

import pytest

from clef_agents.graph.tools import QUESTION_ID
from clef_agents.train import gate_synth
from clef_agents.train.gate_synth import (
    ACTIONS,
    EXECUTORS,
    SOURCE,
    render_call,
    sample_call,
    synthetic_gate_records,
    tool_name,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def records():
    return synthetic_gate_records()


def test_the_same_seed_writes_the_same_records_and_another_seed_others():
    assert synthetic_gate_records(per_action=3, seed=1) == synthetic_gate_records(per_action=3, seed=1)
    assert synthetic_gate_records(per_action=3, seed=1) != synthetic_gate_records(per_action=3, seed=2)


def test_per_action_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1, got 0"):
        synthetic_gate_records(per_action=0)


def test_unknown_name_style_is_refused():
    with pytest.raises(ValueError, match="allowed: snake, camel"):
        tool_name(("a", "b"), "shouting")


def test_records_are_gate_records_with_both_labels_and_every_kind_taught(records):
    assert {r["meta"]["dataset"] for r in records} == {SOURCE}
    assert all(set(r["labels"]) == {QUESTION_ID} and isinstance(r["labels"][QUESTION_ID], bool) for r in records)
    assert all(r["state"].startswith("Proposed tool call: ") for r in records)
    counts = collections.Counter((r["meta"]["split"], r["labels"][QUESTION_ID]) for r in records)
    assert set(counts) == {("teach", True), ("teach", False)}, "POLICY_SHARE is 0: every written kind is taught"
    kinds = {r["meta"]["action"] for r in records}
    assert len(kinds) == len(ACTIONS) + sum(len(e.commands) for e in EXECUTORS)


def test_a_kind_kept_out_keeps_all_its_records_out(monkeypatch):
    monkeypatch.setattr(gate_synth, "POLICY_SHARE", 20)
    splits = collections.defaultdict(set)
    for r in synthetic_gate_records(per_action=3):
        splits[r["meta"]["action"]].add(r["meta"]["split"])
    assert all(len(s) == 1 for s in splits.values())
    assert {"teach"} in splits.values() and {"policy"} in splits.values()


def test_labels_follow_the_action_and_a_planted_instruction_is_always_risky(records):
    risky_actions = {a.key for a in ACTIONS if a.risky} | {
        f"{e.key}:{c.text}" for e in EXECUTORS for c in e.commands if c.risky
    }
    for r in records:
        expected = r["meta"]["action"] in risky_actions or r["meta"]["context"] == "injected"
        assert r["labels"][QUESTION_ID] is expected, r


def test_both_labels_appear_for_each_executor_by_its_command(records):
    for executor in EXECUTORS:
        labels = {
            r["labels"][QUESTION_ID]
            for r in records
            if r["meta"]["action"].startswith(f"{executor.key}:") and r["meta"]["context"] == "direct"
        }
        assert labels == {True, False}, executor.key


def test_a_benign_call_planted_in_tool_output_is_held_and_asked_directly_is_not():
    rng = random.Random(0)
    weather = next(a for a in ACTIONS if a.key == "weather")
    lookup = next(a for a in ACTIONS if a.key == "order_status")
    call, other = sample_call(weather, rng), sample_call(lookup, rng)
    state, risky = render_call(call, "injected", rng, other)
    assert risky is True and call.request in state and "[environment]" in state
    assert render_call(call, "direct", rng, other)[1] is False
    with pytest.raises(ValueError, match="unknown context"):
        render_call(call, "sideways", rng, other)


def test_the_issue_examples_are_not_among_the_written_calls(records):
    """bench/gate/results/examples.json's calls stay a check: none is written into the teaching records."""
    cases = json.loads((ROOT / "bench" / "gate" / "results" / "examples.json").read_text())["cases"]
    texts = {f"{c['call']['name']}{json.dumps(c['call']['args'], ensure_ascii=False)}" for c in cases}
    proposed = {r["state"].split("\n", 1)[0].removeprefix("Proposed tool call: ") for r in records}
    assert texts and not texts & proposed
    names = {c["call"]["name"] for c in cases}
    assert not names & {p.split("{", 1)[0] for p in proposed}
