"""The tool gate's autopilot: reviews of held calls become labels, nothing runs unasked before the autopilot is
certified, a certified gate allows alone and still audits, and a call a person approved is not asked again."""

from __future__ import annotations

import json

import numpy as np
import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command

from clef_agents.autopilot import Autopilot
from clef_agents.graph import ToolGate
from clef_agents.graph.state import DecisionState
from clef_agents.graph.tools import QUESTION_ID
from clef_agents.graph.tools.autopilot import TOOL_GATE_TARGET, review_label
from clef_agents.testing import FakeDecisionModel

RAN: list[str] = []


@tool
def pay(to: str, amount: float) -> str:
    """Send money."""
    RAN.append(f"pay {to} {amount}")
    return f"paid {amount} to {to}"


class GateState(MessagesState, DecisionState):
    pass


def amount_of(state: str) -> float:
    return float(json.loads(state.split("\n", 1)[0].split("pay", 1)[1])["amount"])


def risk_by_amount(state, questions):
    return {QUESTION_ID: 0.02 if amount_of(state) < 10 else 0.7}


def pilot(**settings) -> Autopilot:
    return Autopilot(":memory:", embeddings=False, background=False, **settings)


def graph_of(gate: ToolGate):
    builder = StateGraph(GateState)
    builder.add_node("agent", lambda s: {"messages": [AIMessage("", tool_calls=s["messages"][-1].tool_calls)]})
    builder.add_node("gate", gate.node([pay]))
    builder.add_node("tools", ToolNode([pay], wrap_tool_call=gate.wrap_tool_call, awrap_tool_call=gate.awrap_tool_call))
    builder.add_edge(START, "gate")
    builder.add_edge("gate", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=InMemorySaver())


def proposal(amount: float, to: str = "bob", call_id: str = "c1") -> dict:
    call = {"name": "pay", "args": {"to": to, "amount": amount}, "id": call_id}
    return {"messages": [AIMessage("", tool_calls=[call])]}


def cfg(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def test_reviews_become_labels_and_nothing_runs_unasked_before_certification():
    autopilot = pilot(target=0.99)
    gate = ToolGate(FakeDecisionModel(answer_fn=risk_by_amount), autopilot=autopilot)
    graph = graph_of(gate)
    RAN.clear()
    for thread, amount, decision in (
        ("a", 5, {"type": "approve"}),
        ("r", 6, {"type": "reject", "message": "no"}),
        ("e", 7, {"type": "edit", "edited_action": {"name": "pay", "args": {"to": "bob", "amount": 1}}}),
    ):
        held = graph.invoke(proposal(amount), cfg(thread))  # p = 0.02 would run without the autopilot: held here
        request = held["__interrupt__"][0].value
        assert "not certified yet" in request["reason"]
        graph.invoke(Command(resume={"decisions": [decision]}), cfg(thread))
    assert RAN == ["pay bob 5.0", "pay bob 1.0"]
    (status,) = autopilot.status()
    assert status["labels"] == {"approval": 1, "rejection": 1, "human_edit": 1}
    assert status["automatic"] == 0 and status["state"] == "not certified"
    stored = graph.get_state(cfg("a")).values["decisions"]["tool_gate"]["calls"]
    (verdict,) = stored.values()
    assert verdict["judge"] == "autopilot" and verdict["autopilot_item"]


def test_a_call_a_person_approved_is_not_asked_again():
    autopilot = pilot()
    gate = ToolGate(FakeDecisionModel(answer_fn=risk_by_amount), autopilot=autopilot)
    graph = graph_of(gate)
    graph.invoke(proposal(5), cfg("first"))
    graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg("first"))
    again = graph.invoke(proposal(5), cfg("second"))  # the very same call and context, in a new thread
    assert "__interrupt__" not in again
    (verdict,) = again["decisions"]["tool_gate"]["calls"].values()
    assert verdict["action"] == "allow" and "approved this very call before" in verdict["reason"]
    assert autopilot.status()[0]["labels"] == {"approval": 1}


def test_a_certified_gate_allows_alone_audits_and_never_allows_what_people_reject():
    autopilot = pilot(target=0.95, first_retrain=20, retrain_every=100)
    gate = ToolGate(FakeDecisionModel(answer_fn=risk_by_amount), autopilot=autopilot)
    rng = np.random.default_rng(0)
    allowed_alone = audited = 0
    for k in range(900):
        amount = float(rng.choice([5, 500])) + k / 1000  # distinct calls; a person approves the small ones
        call = {"name": "pay", "args": {"to": "bob", "amount": amount}, "id": f"c{k}"}
        verdict = gate.judge(call, [])
        if verdict.action == "allow":
            allowed_alone += 1
            assert amount < 10, "a call people reject was allowed"
            continue
        assert verdict.action == "hold"
        audited += verdict.judge == "autopilot" and "drawn for an audit" in verdict.reason
        gate.record_review(verdict, _review(amount))
    (status,) = autopilot.status()
    assert status["state"] == "certified", status
    assert allowed_alone > 200 and audited > 0
    assert status["labels"]["approval"] > 0 and status["labels"]["rejection"] > 0


def _review(amount: float):
    from clef_agents.graph.tools.review import ReviewDecision

    return ReviewDecision("approve") if amount < 10 else ReviewDecision("reject", message="too much")


def test_block_at_still_refuses_and_settings_are_checked(tmp_path):
    gate = ToolGate(FakeDecisionModel(answers={QUESTION_ID: 0.99}), block_at=0.95, autopilot=pilot())
    assert gate.judge({"name": "pay", "args": {"to": "x", "amount": 1}, "id": "1"}, []).action == "block"
    built = ToolGate(FakeDecisionModel(), autopilot=tmp_path / "gate.sqlite")
    assert built.autopilot.config.target == TOOL_GATE_TARGET == 0.99
    built.autopilot.close()
    with pytest.raises(ValueError, match="autopilot= needs on_hold='interrupt', got on_hold='block'"):
        ToolGate(FakeDecisionModel(), on_hold="block", autopilot=pilot())
    with pytest.raises(
        TypeError, match="autopilot must be a clef_agents.autopilot.Autopilot or a store path, got dict"
    ):
        ToolGate(FakeDecisionModel(), autopilot={})
    with pytest.raises(ValueError, match="review type must be one of approve, edit, reject, got 'maybe'"):
        review_label("maybe")
