"""Ready graphs, the demo script, and the graph layer's import boundary."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from clef_agents.graph import (
    DEMO_MESSAGES,
    TraceStore,
    build_moderation,
    build_support_triage,
    build_tool_approval,
    demo_escalation_llm,
    demo_fake_model,
)

ROOT = Path(__file__).resolve().parents[1]


def test_graph_layer_never_imports_torch():
    code = (
        "import sys, clef_agents.graph as g\n"
        "for name in g.__all__: getattr(g, name)\n"
        "import clef_agents.graph_cli\n"
        "bad = [m for m in ('torch', 'transformers', 'peft', 'clef_agents.model') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_support_triage_routes_every_demo_message(tmp_path):
    traces = TraceStore(tmp_path / "t.sqlite")
    graph = build_support_triage(
        demo_fake_model(), chat_model=demo_escalation_llm(), traces=traces, checkpointer=InMemorySaver()
    )
    destinations = []
    for i, message in enumerate(DEMO_MESSAGES):
        config = {"configurable": {"thread_id": str(i)}}
        out = graph.invoke({"messages": [("user", message)]}, config)
        if "__interrupt__" in out:
            out = graph.invoke(Command(resume={"department": "other"}), config)
        destinations.append(out["destination"])
    assert destinations == ["billing_desk", "technical_desk", "sales_desk", "billing_desk", "human_desk"]
    sources = sorted({r["meta"]["source"] for r in traces.export_records()})
    assert sources == ["auto", "human", "llm"]


def test_support_triage_without_a_user_message_says_so():
    from clef_agents.graph import GraphInputError

    with pytest.raises(GraphInputError, match="expected at least one user message"):
        build_support_triage(demo_fake_model()).invoke({"messages": [("ai", "hello")]})


def test_moderation_publishes_rejects_and_asks_when_unsure():
    graph = build_moderation(demo_fake_model(), checkpointer=InMemorySaver())
    assert graph.invoke({"post": "nice photo!"}, {"configurable": {"thread_id": "a"}})["verdict"] == "published"
    assert graph.invoke({"post": "buy now at http://x"}, {"configurable": {"thread_id": "b"}})["verdict"] == "rejected"
    config = {"configurable": {"thread_id": "c"}}
    paused = graph.invoke({"post": "click here you idiot"}, config)
    assert sorted(paused["__interrupt__"][0].value["questions"]) == ["category", "violates"]
    done = graph.invoke(Command(resume={"violates": True, "category": "harassment"}), config)
    assert done["verdict"] == "rejected"


async def test_tool_approval_holds_refunds_and_deletes_async():
    graph = build_tool_approval(demo_fake_model(), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "r"}}
    paused = await graph.ainvoke({"messages": [("user", "refund order 77")]}, config)
    assert paused["__interrupt__"][0].value["action_requests"][0]["name"] == "issue_refund"
    done = await graph.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert done["messages"][-1].content == "Result: refunded 40.00 for order 77"
    config = {"configurable": {"thread_id": "d"}}
    held = await graph.ainvoke({"messages": [("user", "delete account 5")]}, config)
    assert held["__interrupt__"][0].value["judge"] == "metadata"  # delete_account's author: always ask
    refused = await graph.ainvoke(Command(resume={"decisions": [{"type": "reject", "message": "keep it"}]}), config)
    assert "a reviewer rejected it: keep it" in refused["messages"][-2].content


def test_served_graph_modules_build_on_the_fake_model(tmp_path, monkeypatch):
    monkeypatch.setenv("CLEF_AGENTS_MODEL", "fake")
    monkeypatch.setenv("CLEF_AGENTS_TRACES", str(tmp_path / "t.sqlite"))
    for name in ("support_triage", "moderation", "tool_approval"):
        graph = runpy.run_path(str(ROOT / "graphs" / f"{name}.py"))["graph"]
        assert graph.name == name


def test_demo_script_prints_answers_lanes_and_destinations(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "examples/support_triage.py",
            "--model",
            "fake-keywords",
            "--traces",
            str(tmp_path / "t.sqlite"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert out.count("-> destination:") == len(DEMO_MESSAGES)
    assert (
        "question    model answer  p(answer)  lane   final      decided by" in out
    )  # p of the answer shown, as in decide
    assert "department  billing            0.55  llm    billing    llm" in out
    assert "(a scripted reviewer answered the interrupt)" in out
    assert "escalation LLM: fake-scripted-escalation-llm (a scripted fake, not a real LLM)" in out


def test_demo_script_explains_a_missing_model(tmp_path):
    result = subprocess.run(
        [sys.executable, "examples/support_triage.py", "--model", str(tmp_path / "no-such-checkpoint")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert "could not load decision model" in result.stderr and "--model fake" in result.stderr


@pytest.mark.integration
def test_support_triage_on_the_shipped_mini_model():
    from clef_agents.graph import load_decision_model

    try:
        model = load_decision_model("mini")
    except FileNotFoundError as exc:
        pytest.skip(f"shipped model not present: {exc}")
    from clef_agents.graph import UntaughtQuestionWarning

    graph = build_support_triage(model, chat_model=demo_escalation_llm(), checkpointer=InMemorySaver())
    with pytest.warns(UntaughtQuestionWarning, match="'urgent': 'Does this support message need a response"):
        out = graph.invoke({"messages": [("user", DEMO_MESSAGES[0])]}, {"configurable": {"thread_id": "m"}})
    entry = out["decisions"]["triage"]
    assert set(entry["route"]) == {"urgent", "department", "severity"}
    assert sorted(entry["response"]["x_untaught"]) == ["department", "severity", "urgent"]  # mini says so itself
    assert all(0.0 <= item["probability"] <= 1.0 for item in entry["route"].values())
