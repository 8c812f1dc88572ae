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
    policy = json.loads((ROOT / "bench" / "gate" / "results" / "policy.json").read_text())
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


@pytest.mark.integration
def test_a_gate_question_mini_was_never_taught_warns_once_and_the_default_does_not():
    pytest.importorskip("torch")
    import warnings

    from langchain_core.decisions import Noul

    from clef_agents.graph.tools import UntaughtGateQuestionWarning
    from clef_agents.model import ClefDecisionModel

    mini = ClefDecisionModel.from_pretrained("mini")
    call = {"name": "drop_table", "args": {"name": "production"}, "id": "1"}
    messages = [HumanMessage("Clean up the database."), AIMessage("", tool_calls=[call])]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntaughtGateQuestionWarning)
        ToolGate(mini).judge(call, messages)  # the taught default: no warning
    own = ToolGate(mini, question=Noul(instructions="Is this tool call dangerous?"))
    with pytest.warns(
        UntaughtGateQuestionWarning, match="was not taught the gate question 'Is this tool call dangerous"
    ):
        verdict = own.judge(call, messages)
    assert verdict.action in ("allow", "hold")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntaughtGateQuestionWarning)
        own.judge(call, messages)  # once per gate
