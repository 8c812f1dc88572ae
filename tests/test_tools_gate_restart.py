"""Restart and resume: a held call paused in one process is resumed in another, on a real SQLite
checkpointer, with and without a trace store. The second process's decision model would allow the
call; it must never be asked, and the reviewer's decision must be what happens."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from clef_agents.graph import build_tool_approval
from clef_agents.graph.tools import QUESTION_ID
from clef_agents.testing import FakeDecisionModel

ROOT = Path(__file__).resolve().parents[1]

RESUME = r"""
import json, sqlite3, sys
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from clef_agents.graph import build_tool_approval
from clef_agents.graph.tools import QUESTION_ID
from clef_agents.testing import FakeDecisionModel

db, traces, resume = sys.argv[1], sys.argv[2] or None, json.loads(sys.argv[3])
model = FakeDecisionModel(answers={QUESTION_ID: 0.0})  # would allow every call, if it were asked
saver = SqliteSaver(sqlite3.connect(db, check_same_thread=False))
graph = build_tool_approval(model, traces=traces, checkpointer=saver)
out = graph.invoke(Command(resume=resume), {"configurable": {"thread_id": "t1"}})
tool_messages = [m.content for m in out["messages"] if m.type == "tool"]
print(json.dumps({"model_calls": len(model.calls), "tool_messages": tool_messages, "last": out["messages"][-1].content}))
"""


def pause(db: Path, traces: Path | None) -> dict:
    model = FakeDecisionModel(answers={QUESTION_ID: 0.7})
    saver = SqliteSaver(sqlite3.connect(str(db), check_same_thread=False))
    graph = build_tool_approval(model, traces=traces, checkpointer=saver)
    out = graph.invoke({"messages": [("user", "refund order 77")]}, {"configurable": {"thread_id": "t1"}})
    assert len(model.calls) == 1
    return out["__interrupt__"][0].value


def resume_elsewhere(db: Path, traces: Path | None, resume: object) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", RESUME, str(db), str(traces or ""), json.dumps(resume)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("with_traces", [False, True], ids=["no trace store", "trace store"])
def test_a_reject_resumed_in_a_new_process_never_runs_the_tool_nor_asks_the_model(tmp_path, with_traces):
    traces = tmp_path / "traces.sqlite" if with_traces else None
    held = pause(tmp_path / "graph.sqlite", traces)
    assert held["action_requests"][0]["name"] == "issue_refund" and held["probability"] == 0.7
    result = resume_elsewhere(
        tmp_path / "graph.sqlite", traces, {"decisions": [{"type": "reject", "message": "no refunds today"}]}
    )
    assert result["model_calls"] == 0
    assert (
        len(result["tool_messages"]) == 1 and "a reviewer rejected it: no refunds today" in result["tool_messages"][0]
    )
    assert "refunded" not in result["last"]


def test_an_approval_resumed_in_a_new_process_runs_the_call_once_without_asking_the_model(tmp_path):
    pause(tmp_path / "graph.sqlite", None)
    result = resume_elsewhere(tmp_path / "graph.sqlite", None, {"decisions": [{"type": "approve"}]})
    assert result["model_calls"] == 0
    assert result["tool_messages"] == ["refunded 40.00 for order 77"]
