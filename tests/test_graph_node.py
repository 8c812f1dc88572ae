"""Decision node: input, questions, lanes, memoisation, serialisable state, and bad input."""

from __future__ import annotations

import json
import sqlite3
import warnings

import pytest
from langchain_core.decisions import Choice, Noul, Score
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from clef_agents.graph import (
    DecisionModelError,
    DecisionNode,
    DecisionState,
    GraphInputError,
    UntaughtQuestionWarning,
    response_from_state,
)
from clef_agents.policy import LanePolicy
from clef_agents.testing import FakeDecisionModel
from clef_agents.wire import InvalidRequestError

QUESTIONS = {
    "urgent": Noul(instructions="Is it urgent?"),
    "dept": Choice(instructions="Which team?", criteria={"billing": "money", "tech": "bugs", "sales": "deals"}),
    "sev": Score(instructions="How bad?", criteria=["low", "mid", "high"]),
}
SCRIPT = {"urgent": 0.97, "dept": {"billing": 0.7, "tech": 0.2, "sales": 0.1}, "sev": [0.25, 0.35, 0.4]}


class TicketState(DecisionState, total=False):
    ticket: str
    route_from: str


def test_lanes_follow_the_policy_and_auto_answers_become_final_labels():
    node = DecisionNode(FakeDecisionModel(answers=SCRIPT), QUESTIONS, name="triage", input="ticket")
    entry = node.invoke({"ticket": "refund please"})["decisions"]["triage"]
    lanes = {qid: item["lane"] for qid, item in entry["route"].items()}
    assert lanes == {"urgent": "auto", "dept": "llm", "sev": "human"}
    assert entry["final"] == {"urgent": {"label": True, "source": "auto", "probability": 0.97}}
    assert entry["route"]["dept"]["label"] == "billing"
    assert entry["route"]["sev"]["label"] == 2
    assert "between human_below 0.500 and auto_at 0.900" in entry["route"]["dept"]["reason"]


def test_policy_file_and_slices_change_the_lanes(tmp_path):
    policy = LanePolicy.model_validate(
        {
            "questions": {
                "dept": {"auto_at": 0.6, "human_below": 0.3, "slices": {"vip": {"auto_at": 0.99, "human_below": 0.8}}}
            }
        }
    )
    path = policy.save(tmp_path / "lanes.json")
    node = DecisionNode(
        FakeDecisionModel(answers=SCRIPT), QUESTIONS, name="t", input="ticket", policy=path, slice_key="route_from"
    )
    plain = node.invoke({"ticket": "x"})["decisions"]["t"]["route"]["dept"]
    vip = node.invoke({"ticket": "x", "route_from": "vip"})["decisions"]["t"]["route"]["dept"]
    assert (plain["lane"], plain["slice"]) == ("auto", None)
    assert (vip["lane"], vip["slice"], vip["band"]) == ("human", "vip", {"auto_at": 0.99, "human_below": 0.8})


def test_state_entry_is_plain_json_and_rehydrates():
    node = DecisionNode(FakeDecisionModel(answers=SCRIPT), QUESTIONS, name="triage", input="ticket")
    entry = node.invoke({"ticket": "refund please"})["decisions"]["triage"]
    again = json.loads(json.dumps(entry))
    response = response_from_state(again["response"])
    assert response.scores["sev"].probabilities == {0: 0.25, 1: 0.35, 2: 0.4}
    assert response.choices["dept"].choice == "billing"


def test_input_from_messages_callable_and_questions_from_state():
    model = FakeDecisionModel(answers={"spam": 0.99})
    from_messages = DecisionNode(model, {"spam": Noul(instructions="Spam?")}, name="m")
    from_messages.invoke({"messages": [HumanMessage("win a prize")]})
    assert model.calls[-1][0][0].content == "win a prize"
    by_callable = DecisionNode(model, {"spam": Noul(instructions="Spam?")}, name="c", input=lambda s: s["a"]["b"])
    by_callable.invoke({"a": {"b": "nested text"}})
    assert model.calls[-1][0] == "nested text"
    from_state = DecisionNode(model, name="q", input="text", questions_key="asked")
    update = from_state.invoke({"text": "hi", "asked": {"spam": {"type": "noul", "instructions": "Spam?"}}})
    assert update["decisions"]["q"]["questions"] == {"spam": {"type": "noul", "instructions": "Spam?"}}


def test_memoised_by_node_and_input_hash():
    model = FakeDecisionModel(answers=SCRIPT)
    node = DecisionNode(model, QUESTIONS, name="triage", input="ticket")
    state = {"ticket": "refund please"}
    state.update(node.invoke(state))
    assert len(model.calls) == 1
    assert node.invoke(state) == {}
    assert len(model.calls) == 1
    changed = {**state, "ticket": "something else"}
    assert node.invoke(changed)["decisions"]["triage"]["input_hash"] != state["decisions"]["triage"]["input_hash"]
    assert len(model.calls) == 2


async def test_async_node_classifies_with_ainvoke():
    model = FakeDecisionModel(answers=SCRIPT)
    node = DecisionNode(model, QUESTIONS, name="triage", input="ticket")
    update = await node.ainvoke({"ticket": "refund please"})
    assert update["decisions"]["triage"]["final"]["urgent"]["label"] is True
    assert len(model.calls) == 1


def test_node_in_a_graph_with_a_real_sqlite_checkpointer(tmp_path):
    node = DecisionNode(FakeDecisionModel(answers=SCRIPT), QUESTIONS, name="triage", input="ticket")
    builder = StateGraph(TicketState)
    builder.add_node("triage", node)
    builder.add_edge(START, "triage")
    builder.add_edge("triage", END)
    with sqlite3.connect(tmp_path / "cp.sqlite", check_same_thread=False) as conn:
        graph = builder.compile(checkpointer=SqliteSaver(conn))
        config = {"configurable": {"thread_id": "1"}}
        graph.invoke({"ticket": "refund please"}, config)
        stored = graph.get_state(config).values["decisions"]["triage"]
    assert stored["route"]["dept"]["lane"] == "llm"


# ------------------------------------------------------------------ bad input


def test_missing_state_key_names_the_key_and_the_keys_present():
    node = DecisionNode(FakeDecisionModel(), QUESTIONS, name="triage", input="ticket")
    with pytest.raises(GraphInputError, match=r"expected the state key 'ticket'.*keys present: body, decisions"):
        node.invoke({"body": "x", "decisions": {}})


def test_empty_and_illegal_inputs_are_rejected():
    node = DecisionNode(FakeDecisionModel(), QUESTIONS, name="triage", input="ticket")
    with pytest.raises(GraphInputError, match="empty input"):
        node.invoke({"ticket": ""})
    with pytest.raises(GraphInputError, match="state must be a string, object, array"):
        node.invoke({"ticket": 42})


def test_invalid_fixed_questions_fail_at_construction():
    bad = {"dept": Choice(instructions="Team?", criteria={"only": None})}
    with pytest.raises(
        InvalidRequestError, match=r"questions\.dept: gate 'triage': a choice needs 2 to 255 options, got 1"
    ):
        DecisionNode(FakeDecisionModel(), bad, name="triage", input="ticket")


def test_invalid_questions_from_state_fail_at_run_time():
    node = DecisionNode(FakeDecisionModel(), name="q", input="text", questions_key="asked")
    with pytest.raises(InvalidRequestError, match="unknown question type 'yesno'"):
        node.invoke({"text": "hi", "asked": {"x": {"type": "yesno", "instructions": "?"}}})
    with pytest.raises(GraphInputError, match="expected its questions in state key 'asked'"):
        node.invoke({"text": "hi"})


def test_model_that_raises_gets_a_clear_error_and_no_update():
    node = DecisionNode(FakeDecisionModel(error=TimeoutError("server gone")), QUESTIONS, name="triage", input="ticket")
    with pytest.raises(
        DecisionModelError,
        match=r"gate 'triage'.*raised TimeoutError: server gone; expected a ClassifierResponse answering urgent, dept, sev",
    ) as info:
        node.invoke({"ticket": "x"})
    assert isinstance(info.value.__cause__, TimeoutError)


def test_response_missing_an_answer_is_an_error():
    class Partial(FakeDecisionModel):
        def _classify(self, state, questions):
            response = super()._classify(state, questions)
            return response.model_copy(update={"answers": {"urgent": response.answers["urgent"]}})

    node = DecisionNode(Partial(), QUESTIONS, name="triage", input="ticket")
    with pytest.raises(DecisionModelError, match="missing answers: dept, sev"):
        node.invoke({"ticket": "x"})


def test_constructor_checks():
    with pytest.raises(TypeError, match="BaseDecisionModel"):
        DecisionNode(object(), QUESTIONS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exactly one of questions="):
        DecisionNode(FakeDecisionModel())


def test_an_untaught_question_warns_once_per_node_and_a_taught_one_never():
    """The model says (x_untaught) it answered 'urgent' without taught weights: one warning naming the
    gate and the question, none again on the next input, none for the taught 'dept'; routing is unchanged."""
    questions = {
        "urgent": Noul(instructions="Is this urgent?"),
        "dept": Choice(instructions="Team?", criteria={"billing": None, "tech": None}),
    }
    model = FakeDecisionModel(answers={"urgent": 0.55, "dept": "tech"}, untaught=["urgent"])
    node = DecisionNode(model, questions, name="triage", input="text")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        first = node.invoke({"text": "the app crashes"})
        node.invoke({"text": "refund please"})
    assert [w.category for w in seen] == [UntaughtQuestionWarning]
    message = str(seen[0].message)
    assert "gate 'triage'" in message and "'urgent': 'Is this urgent?'" in message and "dept" not in message
    route = first["decisions"]["triage"]["route"]
    assert route["urgent"]["lane"] == "llm" and route["dept"]["lane"] == "auto"

    taught_only = DecisionNode(FakeDecisionModel(answers={"dept": "tech"}), {"dept": questions["dept"]}, input="text")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UntaughtQuestionWarning)
        taught_only.invoke({"text": "the app crashes"})


def test_an_untaught_answer_does_not_act_alone_unless_its_band_or_the_node_says_so():
    """'dept' is untaught and sure (p = 0.95 >= auto_at): it goes to the llm lane, with the reason; the same answer
    acts alone with untaught_auto=True or with a band of its own in the lane policy; a taught one is not held."""
    questions = {"dept": Choice(instructions="Team?", criteria={"billing": None, "tech": None})}
    untaught = FakeDecisionModel(answers={"dept": {"billing": 0.05, "tech": 0.95}}, untaught=["dept"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntaughtQuestionWarning)
        held = DecisionNode(untaught, questions, name="t", input="text").invoke({"text": "app crashes"})
        trusted = DecisionNode(untaught, questions, name="t", input="text", untaught_auto=True).invoke({"text": "x"})
        banded = DecisionNode(
            untaught, questions, name="t", input="text", policy={"questions": {"dept": {"auto_at": 0.9}}}
        ).invoke({"text": "x"})
    item = held["decisions"]["t"]["route"]["dept"]
    assert item["lane"] == "llm" and "not taught this question" in item["reason"]
    assert held["decisions"]["t"]["final"] == {}
    assert trusted["decisions"]["t"]["route"]["dept"]["lane"] == "auto"
    assert banded["decisions"]["t"]["route"]["dept"]["lane"] == "auto"
    taught = FakeDecisionModel(answers={"dept": {"billing": 0.05, "tech": 0.95}})
    route = DecisionNode(taught, questions, name="t", input="text").invoke({"text": "x"})["decisions"]["t"]["route"]
    assert route["dept"]["lane"] == "auto"
