"""The autopilot in a real LangGraph graph: the LLM lane teaches it, a person teaches it through interrupt and
resume, a bigger decision model can teach it, and a labelled item is never asked of a teacher again."""

from __future__ import annotations

import numpy as np
from langchain_core.decisions import Choice
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command

from clef_agents.autopilot import Autopilot
from clef_agents.graph import DecisionGate, DecisionNode, DecisionState, FakeToolCallingChatModel
from clef_agents.testing import FakeDecisionModel

QUESTIONS = {"dept": Choice(instructions="Which team?", criteria={"billing": None, "tech": None})}
WORDS = {"billing": ["invoice", "refund", "charge"], "tech": ["crash", "error", "login"]}


class S(DecisionState, total=False):
    text: str


def tickets(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        team = ("billing", "tech")[int(rng.integers(2))]
        out.append(
            (" ".join([*rng.choice(WORDS[team], 2), *(f"w{int(x)}" for x in rng.integers(0, 300, 5)), f"#{i}"]), team)
        )
    return out


def team_of(text: str) -> str:
    return "billing" if any(w in text for w in WORDS["billing"]) else "tech"


def llm_teacher() -> FakeToolCallingChatModel:
    return FakeToolCallingChatModel(respond=lambda messages, tool: {"dept": team_of(messages[-1].content)})


def graph_with(autopilot, chat=None, teacher_lane="llm"):
    # the model is sure of the wrong team: without the autopilot its answers would all be automatic
    gate = DecisionGate(
        FakeDecisionModel(answers={"dept": {"billing": 0.02, "tech": 0.98}}),
        QUESTIONS,
        name="triage",
        input="text",
        chat_model=chat,
        autopilot=autopilot,
        teacher_lane=teacher_lane,
    )
    builder = StateGraph(S)
    gate.attach(builder, after=START, then="__end__")
    return builder.compile(checkpointer=InMemorySaver())


def test_the_llm_lane_teaches_the_gate_until_it_answers_alone_and_agrees_with_the_teacher():
    pilot = Autopilot(":memory:", background=False, embeddings=False)
    chat = llm_teacher()
    graph = graph_with(pilot, chat)
    finals = []
    for i, (text, team) in enumerate(tickets(700)):
        out = graph.invoke({"text": text}, {"configurable": {"thread_id": f"t{i}"}})
        finals.append((out["decisions"]["triage"]["final"]["dept"], team))
    sources = [f["source"] for f, _ in finals]
    assert sources[:50] == ["llm"] * 50, "nothing is automatic before the question is certified"
    assert sources.count("auto") > 200
    assert len(chat.calls) == sources.count("llm")
    auto = [(f["label"], team) for f, team in finals if f["source"] == "auto"]
    assert np.mean([label == team for label, team in auto]) >= 0.95
    (row,) = pilot.status()
    assert row["labels"] == {"llm": len(chat.calls)}
    assert row["state"] == "certified" and row["teacher_calls_saved"] == sources.count("auto")


def test_an_item_the_llm_labelled_is_not_asked_again_in_another_thread():
    pilot = Autopilot(":memory:", background=False, embeddings=False)
    chat = llm_teacher()
    graph = graph_with(pilot, chat)
    first = graph.invoke({"text": "refund the charge please"}, {"configurable": {"thread_id": "a"}})
    again = graph.invoke({"text": "refund the charge please"}, {"configurable": {"thread_id": "b"}})
    assert len(chat.calls) == 1
    assert first["decisions"]["triage"]["final"]["dept"]["label"] == "billing"
    assert again["decisions"]["triage"]["final"]["dept"] == {"label": "billing", "source": "llm", "probability": None}
    assert "already labelled" in again["decisions"]["triage"]["route"]["dept"]["reason"]


def test_a_failing_llm_is_recorded_and_never_labels():
    pilot = Autopilot(":memory:", background=False, embeddings=False)
    graph = graph_with(pilot, FakeToolCallingChatModel(responses=[TimeoutError("no answer in 30 s")]))
    paused = graph.invoke({"text": "my login fails"}, {"configurable": {"thread_id": "x"}})
    assert "__interrupt__" in paused, "a failed teacher goes on to a person"
    (row,) = pilot.status()
    assert row["labels"] == {} and row["failed_teacher_answers"] == 1


def test_a_person_teaches_through_interrupt_and_resume():
    pilot = Autopilot(":memory:", background=False, embeddings=False)
    graph = graph_with(pilot, teacher_lane="human")
    config = {"configurable": {"thread_id": "h"}}
    paused = graph.invoke({"text": "invoice is wrong"}, config)
    assert list(paused["__interrupt__"][0].value["questions"]) == ["dept"]
    done = graph.invoke(Command(resume={"answers": {"dept": "billing"}, "reviewer": "ana"}), config)
    assert done["decisions"]["triage"]["final"]["dept"]["source"] == "human"
    (row,) = pilot.status()
    assert row["labels"] == {"human": 1}


def test_a_bigger_decision_model_can_teach_before_any_llm():
    teacher = FakeDecisionModel(answer_fn=lambda state, questions: {"dept": team_of(str(state))}, model="big")
    pilot = Autopilot(":memory:", background=False, embeddings=False, teacher_model=teacher)
    chat = llm_teacher()
    node = DecisionNode(
        FakeDecisionModel(answers={"dept": "tech"}), QUESTIONS, name="triage", input="text", autopilot=pilot
    )
    update = node.invoke({"text": "refund my invoice"})
    final = update["decisions"]["triage"]["final"]["dept"]
    assert final == {"label": "billing", "source": "llm", "probability": None}
    assert update["decisions"]["triage"]["route"]["dept"]["escalations"][-1]["to"] == "model"
    assert pilot.status()[0]["labels"] == {"model": 1}
    assert not chat.calls


def test_the_demo_streams_requests_and_plots_the_teacher_call_share(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    plot = tmp_path / "share.png"
    done = subprocess.run(
        [
            sys.executable,
            str(root / "examples" / "autopilot_demo.py"),
            "--model",
            "fake",
            "--items",
            "300",
            "--plot",
            str(plot),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Teacher calls saved:" in done.stdout and "teacher calls" in done.stdout
    assert plot.stat().st_size > 1000
