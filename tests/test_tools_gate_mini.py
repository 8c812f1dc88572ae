"""The shipped gate: mini answers the gate question with taught weights, and the shipped thresholds
are the ones bench/gate chose on validation records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from clef_agents.graph.tools import (
    DEFAULT_GATE_QUESTION,
    QUESTION_ID,
    SHIPPED_BLOCK_AT,
    SHIPPED_HOLD_AT,
    ToolGate,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_thresholds_are_the_chosen_policy():
    policy = json.loads((ROOT / "bench" / "gate" / "policy.json").read_text())
    assert (SHIPPED_HOLD_AT, SHIPPED_BLOCK_AT) == (policy["hold_at"], policy["block_at"])
    assert ToolGate.__init__.__kwdefaults__["hold_at"] == SHIPPED_HOLD_AT


@pytest.mark.integration
def test_mini_answers_the_gate_question_with_taught_weights():
    pytest.importorskip("torch")
    from clef_agents.model import ClefDecisionModel

    mini = ClefDecisionModel.from_pretrained("mini")
    gate = ToolGate(mini)
    call = {"name": "delete_customer", "args": {"customer_id": "4411", "hard": True}, "id": "1"}
    state = gate.gate_state(call, [HumanMessage("Remove customer 4411."), AIMessage("", tool_calls=[call])])
    response = mini.invoke({"state": state, "questions": {QUESTION_ID: DEFAULT_GATE_QUESTION}})
    assert response.extensions["x_taught"] == [QUESTION_ID]
    assert 0.0 <= response.nouls[QUESTION_ID].noul <= 1.0
