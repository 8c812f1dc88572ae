"""Decision traces: every gate decision, its lanes and its final outcome, in a SQLite file.

Each decision is committed on its own (WAL journal), together with its automatic outcomes in one
transaction, so a run that is killed midway keeps every decision made before the kill, each whole.
The store exports decision records, the training pipeline's format:
``{"state", "questions", "labels", "meta": {"dataset", "split", "source", ...}}``, one record per
decision and source (``auto``, ``llm`` or ``human``), with lanes and probabilities in ``meta``.

Example:
    >>> import tempfile, os
    >>> store = TraceStore(os.path.join(tempfile.mkdtemp(), "traces.sqlite"))
    >>> store.count()
    0
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from clef_agents import wire
from clef_agents.lanes import LANES, Lane

_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    trace_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    gate TEXT NOT NULL,
    thread_id TEXT,
    input_hash TEXT NOT NULL,
    model TEXT,
    state_json TEXT NOT NULL,
    questions_json TEXT NOT NULL,
    response_json TEXT NOT NULL,
    route_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS decisions_lookup ON decisions (gate, input_hash, thread_id);
CREATE TABLE IF NOT EXISTS outcomes (
    trace_id TEXT NOT NULL REFERENCES decisions (trace_id),
    question_id TEXT NOT NULL,
    label_json TEXT NOT NULL,
    source TEXT NOT NULL CHECK (source IN ({sources})),
    detail_json TEXT NOT NULL,
    decided_at REAL NOT NULL,
    PRIMARY KEY (trace_id, question_id)
);
"""

SOURCES: tuple[Lane, ...] = LANES
"""Who may give an outcome: the lanes of ``clef_agents.lanes``."""


class TraceStore:
    """Append-only decision traces in a SQLite file (stdlib ``sqlite3``, WAL, a commit per write).

    Safe to share between the threads of one process; several processes may write to one file.

    Example:
        >>> import tempfile, os
        >>> store = TraceStore(os.path.join(tempfile.mkdtemp(), "t.sqlite"))
        >>> store.path.name
        't.sqlite'
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA.format(sources=", ".join(f"'{lane}'" for lane in LANES)))

    def __repr__(self) -> str:
        return f"TraceStore({str(self.path)!r})"

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = sqlite3.connect(self.path, timeout=30.0)
            try:
                conn.execute("PRAGMA synchronous=FULL")
                yield conn
                conn.commit()
            finally:
                conn.close()

    # ------------------------------------------------------------------ writing

    def record_decision(
        self,
        *,
        trace_id: str,
        gate: str,
        input_hash: str,
        state: Any,
        questions: Mapping[str, wire.TextQuestion],
        response: Mapping[str, Any],
        route: Mapping[str, Any],
        thread_id: str | None = None,
        outcomes: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Store one gate decision (the model's response and the lane of each question), and with it, in the same
        SQLite transaction, the outcomes already known when it was made (the questions decided automatically).

        ``outcomes`` maps a question id to ``{"label": ..., "source": "auto", "detail": {...}}`` (``source`` one of
        ``SOURCES``, ``detail`` optional). Either the decision and all of its outcomes are stored or none of them
        are: a process killed midway never leaves a decided question looking open. Recording the same ``trace_id``
        twice keeps the first record.

        Example:
            >>> import tempfile, os
            >>> from langchain_core.decisions import Noul
            >>> store = TraceStore(os.path.join(tempfile.mkdtemp(), "t.sqlite"))
            >>> store.record_decision(trace_id="t1", gate="mod", input_hash="h", state="WIN A PRIZE",
            ...                       questions={"spam": Noul(instructions="Spam?")},
            ...                       response={"model": "fake", "answers": {}}, route={"spam": {"lane": "auto"}},
            ...                       outcomes={"spam": {"label": True, "source": "auto", "detail": {"lane": "auto"}}})
            >>> store.get("t1")["outcomes"]["spam"]["source"]
            'auto'
        """
        body = wire.request_to_wire(state, questions)
        rows = [_outcome_row(trace_id, qid, **_outcome_fields(qid, item)) for qid, item in (outcomes or {}).items()]
        with self._connect() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO decisions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    trace_id,
                    time.time(),
                    gate,
                    thread_id,
                    input_hash,
                    response.get("model"),
                    _dumps(body["state"]),
                    _dumps(body["questions"]),
                    _dumps(response),
                    _dumps(route),
                ),
            )
            for row in rows:
                conn.execute("INSERT OR REPLACE INTO outcomes VALUES (?, ?, ?, ?, ?, ?)", row)

    def record_outcome(
        self, trace_id: str, question_id: str, label: Any, source: str, detail: Mapping[str, Any] | None = None
    ) -> None:
        """Store the final label of one question and who decided it (``auto``/``llm``/``human``).

        A later outcome for the same question replaces the earlier one (a human overrides). Outcomes known when
        the decision is made belong in ``record_decision(..., outcomes=...)``, which writes both at once.
        """
        row = _outcome_row(trace_id, question_id, label, source, detail)
        with self._connect() as conn:
            conn.execute("INSERT OR REPLACE INTO outcomes VALUES (?, ?, ?, ?, ?, ?)", row)

    # ------------------------------------------------------------------ reading

    def count(self) -> int:
        """How many decisions the store holds."""
        with self._connect() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM decisions").fetchone()[0])

    def find(self, gate: str, input_hash: str, thread_id: str | None = None) -> dict[str, Any] | None:
        """The latest decision of a gate on this input (and thread), with its outcomes, or None."""
        with self._connect() as conn:
            row = conn.execute(
                "SELECT trace_id FROM decisions WHERE gate = ? AND input_hash = ? AND thread_id IS ? "
                "ORDER BY created_at DESC LIMIT 1",
                (gate, input_hash, thread_id),
            ).fetchone()
        if row is None:
            return None
        return self.get(row[0])

    def get(self, trace_id: str) -> dict[str, Any]:
        """One decision with its outcomes; raises ``KeyError`` when the id is unknown."""
        for item in self._decisions("WHERE d.trace_id = ?", (trace_id,)):
            return item
        raise KeyError(f"no decision with trace id {trace_id!r} in {self.path}")

    def decisions(self, gate: str | None = None) -> list[dict[str, Any]]:
        """Every decision (optionally of one gate), oldest first, each with its outcomes."""
        if gate is None:
            return list(self._decisions("", ()))
        return list(self._decisions("WHERE d.gate = ?", (gate,)))

    def _decisions(self, where: str, params: tuple[Any, ...]) -> Iterator[dict[str, Any]]:
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT d.trace_id, d.created_at, d.gate, d.thread_id, d.input_hash, d.model, d.state_json, "
                f"d.questions_json, d.response_json, d.route_json FROM decisions d {where} ORDER BY d.created_at",
                params,
            ).fetchall()
            outcomes = conn.execute(
                "SELECT trace_id, question_id, label_json, source, detail_json FROM outcomes"
            ).fetchall()
        by_trace: dict[str, dict[str, Any]] = {}
        for trace_id, qid, label, source, detail in outcomes:
            by_trace.setdefault(trace_id, {})[qid] = {
                "label": json.loads(label),
                "source": source,
                "detail": json.loads(detail),
            }
        for row in rows:
            yield {
                "trace_id": row[0],
                "created_at": row[1],
                "gate": row[2],
                "thread_id": row[3],
                "input_hash": row[4],
                "model": row[5],
                "state": json.loads(row[6]),
                "questions": json.loads(row[7]),
                "response": json.loads(row[8]),
                "route": json.loads(row[9]),
                "outcomes": by_trace.get(row[0], {}),
            }

    # ------------------------------------------------------------------ export

    def export_records(
        self,
        out: str | Path | None = None,
        *,
        sources: Iterable[str] = SOURCES,
        dataset: str | None = None,
        split: str = "traces",
    ) -> list[dict[str, Any]]:
        """Decision records for training: one per decision and source, labelled questions only.

        ``dataset`` defaults to ``traces/<gate>``. When ``out`` is given the records are also
        written there as JSONL. Example record ``meta``: ``{"dataset": "traces/triage",
        "split": "traces", "source": "human", "trace_id": ..., "lanes": {"dept": "human"},
        "probabilities": {"dept": {"billing": 0.41, ...}}, "model": "mini"}``.
        """
        wanted = set(sources)
        unknown = wanted - set(SOURCES)
        if unknown:
            raise ValueError(f"unknown sources {sorted(unknown)}; allowed: {', '.join(SOURCES)}")
        records = [
            record for decision in self.decisions() for record in _decision_records(decision, wanted, dataset, split)
        ]
        if out is not None:
            path = Path(out)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w") as fh:
                for record in records:
                    fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        return records


def _decision_records(
    decision: Mapping[str, Any], sources: set[str], dataset: str | None, split: str
) -> Iterator[dict[str, Any]]:
    route = decision["route"]
    answers = decision["response"].get("answers", {})
    for source in SOURCES:
        if source not in sources:
            continue
        labelled = {qid: o for qid, o in decision["outcomes"].items() if o["source"] == source}
        if not labelled:
            continue
        yield {
            "state": decision["state"],
            "questions": {qid: decision["questions"][qid] for qid in labelled},
            "labels": {qid: o["label"] for qid, o in labelled.items()},
            "meta": {
                "dataset": dataset or f"traces/{decision['gate']}",
                "split": split,
                "source": source,
                "trace_id": decision["trace_id"],
                "gate": decision["gate"],
                "thread_id": decision["thread_id"],
                "model": decision["model"],
                "route": next((route.get(qid, {}).get("slice") for qid in labelled), None),
                "lanes": {qid: route.get(qid, {}).get("lane") for qid in labelled},
                "probabilities": {qid: _probabilities(answers.get(qid)) for qid in labelled},
                "details": {qid: o["detail"] for qid, o in labelled.items() if o["detail"]},
            },
        }


def _probabilities(answer: Mapping[str, Any] | None) -> dict[str, float] | None:
    if not answer:
        return None
    if answer.get("type") == "noul":
        return {"yes": answer["noul"], "no": 1.0 - answer["noul"]}
    return {str(k): v for k, v in answer.get("probabilities", {}).items()}


def _outcome_fields(question_id: str, item: Mapping[str, Any]) -> dict[str, Any]:
    """The label, source and detail of one ``record_decision(outcomes=...)`` item; says what is missing otherwise."""
    if not isinstance(item, Mapping) or "label" not in item or "source" not in item:
        raise ValueError(
            f"outcome of {question_id!r} must be a mapping with 'label' and 'source' (and optionally 'detail'), "
            f"got {item!r:.120}"
        )
    extra = sorted(set(item) - {"label", "source", "detail"})
    if extra:
        raise ValueError(f"outcome of {question_id!r} has unknown keys {extra}; allowed: label, source, detail")
    return {"label": item["label"], "source": item["source"], "detail": item.get("detail")}


def _outcome_row(
    trace_id: str, question_id: str, label: Any, source: str, detail: Mapping[str, Any] | None
) -> tuple[Any, ...]:
    """One ``outcomes`` row; raises ``ValueError`` for a source that is not one of ``SOURCES``."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    return (trace_id, question_id, _dumps(label), source, _dumps(dict(detail or {})), time.time())


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
