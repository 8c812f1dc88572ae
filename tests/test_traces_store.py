"""Decision traces: SQLite file, export as decision records, nothing lost when a run is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from langchain_core.decisions import Choice, Noul

from clef_agents.cli import main as cli_main
from clef_agents.graph import DecisionNode, TraceStore
from clef_agents.testing import FakeDecisionModel

QUESTIONS = {
    "spam": Noul(instructions="Spam?"),
    "topic": Choice(instructions="Topic?", criteria={"sport": "games", "news": "events", "other": None}),
}


def test_store_is_a_wal_sqlite_file_and_exports_decision_records(tmp_path):
    store = TraceStore(tmp_path / "traces.sqlite")
    node = DecisionNode(
        FakeDecisionModel(answers={"spam": 0.99, "topic": {"sport": 0.5, "news": 0.25, "other": 0.25}}),
        QUESTIONS,
        name="mod",
        input="text",
        traces=store,
    )
    entry = node.invoke({"text": "match report"}, {"configurable": {"thread_id": "th"}})["decisions"]["mod"]
    store.record_outcome(entry["trace_id"], "topic", "news", "human", {"reviewer": "ana"})
    import sqlite3

    with sqlite3.connect(store.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    records = store.export_records(tmp_path / "out.jsonl")
    assert [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()] == records
    auto, human = records
    assert auto["state"] == "match report"
    assert auto["labels"] == {"spam": True}
    assert auto["questions"] == {"spam": {"type": "noul", "instructions": "Spam?"}}
    assert auto["meta"]["source"] == "auto" and auto["meta"]["lanes"] == {"spam": "auto"}
    assert human["labels"] == {"topic": "news"}
    assert list(human["questions"]["topic"]["criteria"]) == ["sport", "news", "other"], "option order is kept"
    assert human["meta"] | {"trace_id": None} == {
        "dataset": "traces/mod",
        "split": "traces",
        "source": "human",
        "trace_id": None,
        "gate": "mod",
        "thread_id": "th",
        "model": "fake",
        "route": None,
        "lanes": {"topic": "llm"},
        "probabilities": {"topic": {"sport": 0.5, "news": 0.25, "other": 0.25}},
        "details": {"topic": {"reviewer": "ana"}},
    }
    assert store.export_records(sources=["human"]) == [human]
    with pytest.raises(ValueError, match="unknown sources"):
        store.export_records(sources=["robot"])
    with pytest.raises(ValueError, match="source must be one of auto, llm, human"):
        store.record_outcome(entry["trace_id"], "spam", True, "robot")


def test_cli_exports_and_shows(tmp_path, capsys):
    store = TraceStore(tmp_path / "t.sqlite")
    DecisionNode(
        FakeDecisionModel(answers={"spam": 0.01}),
        {"spam": Noul(instructions="Spam?")},
        name="m",
        input="t",
        traces=store,
    ).invoke({"t": "hi"})
    assert cli_main(["traces", "export", str(store.path), "--out", str(tmp_path / "r.jsonl"), "--dataset", "mine"]) == 0
    assert "wrote 1 records" in capsys.readouterr().out
    assert json.loads((tmp_path / "r.jsonl").read_text())["meta"]["dataset"] == "mine"
    assert cli_main(["traces", "show", str(store.path)]) == 0
    assert json.loads(capsys.readouterr().out)["decisions"] == 1
    assert cli_main(["traces", "show", str(tmp_path / "missing.sqlite")]) == 2
    assert "trace store not found" in capsys.readouterr().err


RUNNER = textwrap.dedent(
    """
    import sys, time
    from langchain_core.decisions import Noul
    from clef_agents.graph import DecisionNode, TraceStore
    from clef_agents.testing import FakeDecisionModel

    node = DecisionNode(FakeDecisionModel(answers={"spam": 0.99}), {"spam": Noul(instructions="Spam?")}, name="m", input="text",
                        traces=TraceStore(sys.argv[1]))
    for i in range(10_000):
        node.invoke({"text": f"message {i}"})
        print(i, flush=True)
        time.sleep(0.01)
    """
)


def test_a_killed_run_loses_no_recorded_decision(tmp_path):
    db = tmp_path / "traces.sqlite"
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    proc = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE, text=True)
    done = -1
    deadline = time.monotonic() + 60
    try:
        while done < 20 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            done = int(line)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert done >= 20, "the runner never got going"
    assert proc.returncode == -signal.SIGKILL
    store = TraceStore(db)
    texts = {d["state"] for d in store.decisions()}
    assert {f"message {i}" for i in range(done + 1)} <= texts
    assert len(store.export_records()) == store.count() >= done + 1
    assert Path(db).exists()


def _fail_outcome_writes(db: Path) -> None:
    """Inject a fault between a decision's write and its outcomes' write: every insert into outcomes aborts."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TRIGGER fail_outcomes BEFORE INSERT ON outcomes BEGIN SELECT RAISE(ABORT, 'injected fault'); END"
        )


def test_a_decision_and_its_auto_outcomes_are_written_in_one_transaction(tmp_path, capsys):
    import sqlite3

    store = TraceStore(tmp_path / "traces.sqlite")
    node = DecisionNode(
        FakeDecisionModel(answers={"spam": 0.99, "topic": {"sport": 0.5, "news": 0.25, "other": 0.25}}),
        QUESTIONS,
        name="mod",
        input="text",
        traces=store,
    )
    node.invoke({"text": "first"})
    assert cli_main(["traces", "show", str(store.path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["decisions"] == 1 and shown["open"] == 1, "spam was decided automatically, topic waits (llm lane)"

    _fail_outcome_writes(store.path)
    with pytest.raises(sqlite3.DatabaseError, match="injected fault"):
        node.invoke({"text": "second"})
    assert cli_main(["traces", "show", str(store.path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["decisions"] == 1, "the decision whose auto outcome could not be written was not kept either"
    assert shown["open"] == 1, "no automatically decided question shows as open"
    assert [d["state"] for d in store.decisions()] == ["first"]


def test_record_decision_outcomes_say_what_is_wrong(tmp_path):
    store = TraceStore(tmp_path / "traces.sqlite")
    decision = dict(
        trace_id="t",
        gate="g",
        input_hash="h",
        state="hi",
        questions={"spam": Noul(instructions="Spam?")},
        response={"model": "fake", "answers": {}},
        route={},
    )
    with pytest.raises(ValueError, match="source must be one of auto, llm, human, got 'robot'"):
        store.record_decision(**decision, outcomes={"spam": {"label": True, "source": "robot"}})
    with pytest.raises(ValueError, match="outcome of 'spam' must be a mapping with 'label' and 'source'"):
        store.record_decision(**decision, outcomes={"spam": True})
    with pytest.raises(ValueError, match=r"unknown keys \['lane'\]; allowed: label, source, detail"):
        store.record_decision(**decision, outcomes={"spam": {"label": True, "source": "auto", "lane": "auto"}})
    assert store.count() == 0, "nothing is written when an outcome is refused"
    store.record_decision(**decision, outcomes={"spam": {"label": True, "source": "auto"}})
    assert store.get("t")["outcomes"] == {"spam": {"label": True, "source": "auto", "detail": {}}}
