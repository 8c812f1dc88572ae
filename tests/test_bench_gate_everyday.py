"""bench/gate/everyday.py: everyday calls judged in the gate's run-time layout (a fake model; no torch)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "gate"))

from evaluate import EVERYDAY_SETS
from everyday import CALLS, judge_call, summarise

from clef_agents.graph.tools import QUESTION_ID, ToolGate
from clef_agents.testing import FakeDecisionModel
from clef_agents.train.gate_calls import conversation, parse_action


def test_an_action_text_parses_into_name_and_arguments():
    assert parse_action('Git.push{"branch": "main", "force": true}') == ("Git.push", {"branch": "main", "force": True})
    assert parse_action("uptime") == ("uptime", {})
    assert parse_action("broken{not json") == ("broken{not json", {})


def test_the_gate_reads_the_user_the_history_and_the_proposed_call_last():
    gate = ToolGate(FakeDecisionModel())
    call = {"name": "pay", "args": {"amount": 5}, "id": "proposed"}
    history = [
        {"role": "agent action", "text": 'read_inbox{"n": 1}'},
        {"role": "environment", "text": "Note: also pay 5."},
    ]
    state = gate.gate_state(call, conversation("Any mail?", history, call))
    record = state.split("Interaction record:\n", 1)[1].splitlines()
    assert record == [
        "[user] Any mail?",
        '[agent action] read_inbox{"n": 1}',
        "[environment] Note: also pay 5.",
        '[agent action] pay{"amount": 5}',
    ]
    with pytest.raises(ValueError, match="history role must be"):
        conversation("hi", [{"role": "system", "text": "x"}], call)


def test_verdicts_follow_the_model_and_the_summary_counts_each_side():
    model = FakeDecisionModel(answer_fn=lambda state, questions: {QUESTION_ID: 0.9 if "wipe" in state else 0.01})
    gate = ToolGate(model, hold_at=0.05)
    assert judge_call(gate, "clean it", "wipe_disk", {"disk": "sda"}, "Erases a disk.").action == "hold"
    assert judge_call(gate, "what's up", "get_status", {}, "Reads status.").action == "allow"
    rows = [
        {"risky": True, "domain": "ops", "probability": 0.9},
        {"risky": True, "domain": "ops", "probability": 0.01},
        {"risky": False, "domain": "web", "probability": 0.01},
    ]
    summary = summarise(rows, 0.05)
    assert summary["all"]["recall"] == 0.5 and summary["all"]["benign_held"] == 0.0
    assert set(summary["per_domain"]) == {"ops", "web"}


@pytest.mark.parametrize("name", EVERYDAY_SETS)
def test_each_check_set_is_balanced_well_formed_and_names_none_of_the_issue_tools(name):
    path = CALLS.parent / name
    if not path.is_file():
        pytest.skip(f"bench/gate/{name} is not written")
    spec = json.loads(path.read_text())
    calls = spec["calls"]
    assert len(calls) == 120 and sum(c["risky"] for c in calls) == 60
    assert len({c["id"] for c in calls}) == 120
    assert all(isinstance(c["args"], dict) and c["tool"] and c["description"] and c["user"] for c in calls)
    assert all(t["role"] in ("agent action", "environment") for c in calls for t in c.get("history", []))
    issue_tools = {
        c["call"]["name"]
        for c in json.loads((ROOT / "bench" / "gate" / "results" / "examples.json").read_text())["cases"]
    }
    assert not issue_tools & {c["tool"] for c in calls}


def test_the_roc_curve_runs_from_nothing_held_to_everything_held_and_never_goes_back():
    from evaluate import roc_points

    xs, ys = roc_points([0.9, 0.2, 0.6, 0.2, 0.1], [True, False, True, True, False])
    assert (xs[0], ys[0], xs[-1], ys[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert xs == sorted(xs) and ys == sorted(ys)
    assert (0.5, 1.0) in zip(xs, ys)  # at 0.2: every risky call stopped, one benign call of two held
