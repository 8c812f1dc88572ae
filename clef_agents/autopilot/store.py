"""Where the autopilot keeps what it must never lose: every item it routed, every teacher label, every failed
teacher answer, every learner version it fitted and every certification or withdrawal.

A SQLite file by default (WAL, a commit per write, ``synchronous=FULL``), so a process killed at any point
keeps every label written before the kill; several processes (server replicas) may share one file. Labels
are option indices (``wire.label_index``): for a yes/no question 0 is yes.

Example:
    >>> import tempfile, os
    >>> store = LabelStore(os.path.join(tempfile.mkdtemp(), "autopilot.sqlite"))
    >>> store.add_item(ItemRecord("k1", "triage/urgent/ab12", "site down", [0.4, 0.6], marked=False,
    ...                           eligible=False, lane="teacher", auto_label=None, version=0))
    True
    >>> store.add_label("k1", 0, "llm"), store.label("k1")
    (True, (0, 'llm'))
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LABEL_SOURCES = ("llm", "human", "human_edit", "approval", "rejection", "model", "gold")
"""Who may label an item: an escalation LLM, a person (a review, an edit, a tool approval or rejection), a
bigger decision model, or a replayed gold label. The model's own automatic answers never label."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    seq {serial},
    item_key TEXT NOT NULL UNIQUE,
    question_key TEXT NOT NULL,
    created_at {real} NOT NULL,
    state_text TEXT NOT NULL,
    model_probs TEXT NOT NULL,
    marked INTEGER NOT NULL,
    eligible INTEGER NOT NULL,
    lane TEXT NOT NULL,
    auto_label INTEGER,
    version INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS items_question ON items (question_key, seq);
CREATE TABLE IF NOT EXISTS labels (
    item_key TEXT PRIMARY KEY,
    label INTEGER NOT NULL,
    source TEXT NOT NULL,
    created_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS failures (
    id {serial},
    item_key TEXT NOT NULL,
    source TEXT NOT NULL,
    error TEXT NOT NULL,
    created_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
    question_key TEXT NOT NULL,
    version INTEGER NOT NULL,
    created_at {real} NOT NULL,
    kind TEXT NOT NULL,
    threshold {real},
    certified INTEGER NOT NULL,
    report TEXT NOT NULL,
    params {blob} NOT NULL,
    PRIMARY KEY (question_key, version)
);
CREATE TABLE IF NOT EXISTS events (
    id {serial},
    question_key TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    created_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS questions (
    question_key TEXT PRIMARY KEY,
    gate TEXT NOT NULL,
    question_id TEXT NOT NULL,
    question_json TEXT NOT NULL,
    created_at {real} NOT NULL
);
"""


@dataclass
class ItemRecord:
    """One routed item: which question, the state it was asked about, what the model said, whether it was
    drawn for the certification sample (``marked``), whether the serving learner would have answered it alone
    (``eligible``), the lane it went to, the automatic label (when automatic) and the learner version."""

    item_key: str
    question_key: str
    state_text: str
    model_probs: list[float]
    marked: bool
    eligible: bool
    lane: str
    auto_label: int | None
    version: int


@dataclass
class LabelledItem:
    """An item with its teacher label, as the learner and the certifier read it."""

    seq: int
    item_key: str
    state_text: str
    model_probs: list[float]
    marked: bool
    eligible: bool
    auto_label: int | None
    version: int
    label: int
    source: str


@dataclass
class VersionRecord:
    """A fitted learner version of a question and whether (and at which threshold) it was certified."""

    question_key: str
    version: int
    kind: str
    threshold: float | None
    certified: bool
    report: dict[str, Any]
    params: bytes
    created_at: float


DIALECTS = {
    "sqlite": {"serial": "INTEGER PRIMARY KEY AUTOINCREMENT", "real": "REAL", "blob": "BLOB"},
    "postgresql": {"serial": "BIGSERIAL PRIMARY KEY", "real": "DOUBLE PRECISION", "blob": "BYTEA"},
}
POSTGRES_PREFIXES = ("postgresql://", "postgres://")


class _SQLite:
    """A SQLite file (WAL, ``synchronous=FULL``) or ``":memory:"``; one connection shared under a lock."""

    dialect = "sqlite"

    def __init__(self, path: str):
        memory = path == ":memory:"
        if not memory:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(path, timeout=30.0, check_same_thread=False, isolation_level=None)
        if not memory:
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=FULL")

    @contextmanager
    def tx(self) -> Iterator[Any]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params).fetchall()

    def script(self, sql: str) -> None:
        self.conn.executescript(sql)

    def close(self) -> None:
        self.conn.close()


class _Postgres:
    """A PostgreSQL database every replica writes to (``psycopg``, the ``postgres`` extra)."""

    dialect = "postgresql"

    def __init__(self, dsn: str):
        try:
            import psycopg  # noqa: PLC0415
        except ImportError:
            raise ImportError("a PostgreSQL store needs psycopg: pip install 'clef-agents[postgres]'") from None
        self.conn = psycopg.connect(dsn, autocommit=True)

    @contextmanager
    def tx(self) -> Iterator[Any]:
        with self.conn.transaction():
            yield _PostgresCursor(self.conn)

    def rows(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql.replace("?", "%s"), params).fetchall()

    def script(self, sql: str) -> None:
        with self.conn.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(7242)")  # replicas creating the tables at once
            for statement in sql.split(";"):
                if statement.strip():
                    self.conn.execute(statement)

    def close(self) -> None:
        self.conn.close()


class _PostgresCursor:
    """``execute`` with SQLite's ``?`` placeholders, inside a PostgreSQL transaction."""

    def __init__(self, conn: Any):
        self.conn = conn

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.conn.execute(sql.replace("?", "%s"), params)


class LabelStore:
    """The autopilot's durable store: a SQLite file (``":memory:"`` for a replay that needs no file), or a
    PostgreSQL database (``postgresql://...``) that several replicas write to.

    Safe to share between the threads of one process; several processes may write to one file or database.

    Example:
        >>> LabelStore(":memory:").dialect
        'sqlite'
    """

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._lock = threading.RLock()
        self._db: _SQLite | _Postgres = (
            _Postgres(self.path) if self.path.startswith(POSTGRES_PREFIXES) else _SQLite(self.path)
        )
        with self._lock:
            self._db.script(_SCHEMA.format(**DIALECTS[self._db.dialect]))

    def __repr__(self) -> str:
        where = self.path.split("@")[-1] if self._db.dialect == "postgresql" else self.path  # no password in logs
        return f"LabelStore({where!r})"

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.dialect

    def close(self) -> None:
        """Close the connection (the data stays)."""
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[Any]:
        with self._lock, self._db.tx() as conn:
            yield conn

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.rows(sql, params)

    # ------------------------------------------------------------------ writing

    def add_question(self, question_key: str, gate: str, question_id: str, question: dict[str, Any]) -> None:
        """Remember which gate and question (in wire form) a question key stands for."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO questions VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (question_key, gate, question_id, json.dumps(question, sort_keys=True), time.time()),
            )

    def add_item(self, item: ItemRecord) -> bool:
        """Store a routed item; False when the item was stored before (the first record stands)."""
        with self._tx() as conn:
            cursor = conn.execute(
                "INSERT INTO items (item_key, question_key, created_at, state_text, model_probs, marked, "
                "eligible, lane, auto_label, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (
                    item.item_key,
                    item.question_key,
                    time.time(),
                    item.state_text,
                    json.dumps(item.model_probs),
                    int(item.marked),
                    int(item.eligible),
                    item.lane,
                    item.auto_label,
                    item.version,
                ),
            )
            return cursor.rowcount == 1

    def add_label(self, item_key: str, label: int, source: str) -> bool:
        """Store a teacher's label of an item; False when it already had one (the first label stands)."""
        if source not in LABEL_SOURCES:
            raise ValueError(f"label source must be one of {', '.join(LABEL_SOURCES)}, got {source!r}")
        with self._tx() as conn:
            cursor = conn.execute(
                "INSERT INTO labels VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (item_key, int(label), source, time.time()),
            )
            return cursor.rowcount == 1

    def add_failure(self, item_key: str, source: str, error: str) -> None:
        """Record a teacher answer that failed, timed out or fell outside the question's options (never a label)."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO failures (item_key, source, error, created_at) VALUES (?, ?, ?, ?)",
                (item_key, source, error[:500], time.time()),
            )

    def add_version(self, record: VersionRecord) -> None:
        """Store a fitted learner version (in one transaction: it is there whole or not at all)."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO versions VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.question_key,
                    record.version,
                    record.created_at,
                    record.kind,
                    record.threshold,
                    int(record.certified),
                    json.dumps(record.report),
                    record.params,
                ),
            )

    def add_event(self, question_key: str, kind: str, detail: dict[str, Any]) -> None:
        """Record a certification, a withdrawal, a retrain or a reset."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO events (question_key, kind, detail, created_at) VALUES (?, ?, ?, ?)",
                (question_key, kind, json.dumps(detail), time.time()),
            )

    def reset(self, question_key: str) -> int:
        """Forget a question's versions (its labels stay, so a new learner starts from them); returns how many.

        The reset event keeps the newest item's ``seq`` (the next certificate is earned on a sample drawn after
        it: a reset is no second chance on the same sample) and the last version number (numbers go on).
        """
        with self._tx() as conn:
            seq = conn.execute("SELECT MAX(seq) FROM items WHERE question_key = ?", (question_key,)).fetchone()[0]
            last = conn.execute("SELECT MAX(version) FROM versions WHERE question_key = ?", (question_key,)).fetchone()[
                0
            ]
            removed = conn.execute("DELETE FROM versions WHERE question_key = ?", (question_key,)).rowcount
            detail = {"seq": int(seq or 0), "last_version": int(last or 0)}
            conn.execute(
                "INSERT INTO events (question_key, kind, detail, created_at) VALUES (?, 'reset', ?, ?)",
                (question_key, json.dumps(detail), time.time()),
            )
            return int(removed)

    # ------------------------------------------------------------------ reading

    def label(self, item_key: str) -> tuple[int, str] | None:
        """An item's teacher label and its source, or None."""
        rows = self._rows("SELECT label, source FROM labels WHERE item_key = ?", (item_key,))
        return (int(rows[0][0]), str(rows[0][1])) if rows else None

    def item(self, item_key: str) -> ItemRecord | None:
        """A routed item, or None."""
        rows = self._rows(
            "SELECT item_key, question_key, state_text, model_probs, marked, eligible, lane, auto_label, "
            "version FROM items WHERE item_key = ?",
            (item_key,),
        )
        if not rows:
            return None
        r = rows[0]
        return ItemRecord(r[0], r[1], r[2], json.loads(r[3]), bool(r[4]), bool(r[5]), r[6], r[7], int(r[8]))

    def labelled(self, question_key: str, since_seq: int = 0) -> list[LabelledItem]:
        """A question's labelled items after ``since_seq``, in arrival order."""
        rows = self._rows(
            "SELECT i.seq, i.item_key, i.state_text, i.model_probs, i.marked, i.eligible, i.auto_label, i.version, "
            "l.label, l.source FROM items i JOIN labels l ON l.item_key = i.item_key "
            "WHERE i.question_key = ? AND i.seq > ? ORDER BY i.seq",
            (question_key, since_seq),
        )
        return [
            LabelledItem(
                int(r[0]), r[1], r[2], json.loads(r[3]), bool(r[4]), bool(r[5]), r[6], int(r[7]), int(r[8]), r[9]
            )
            for r in rows
        ]

    def latest_seq(self, question_key: str) -> int:
        """The arrival number of a question's newest item (0 when none)."""
        rows = self._rows("SELECT MAX(seq) FROM items WHERE question_key = ?", (question_key,))
        return int(rows[0][0] or 0)

    def versions(self, question_key: str) -> list[VersionRecord]:
        """A question's learner versions, oldest first."""
        rows = self._rows(
            "SELECT question_key, version, kind, threshold, certified, report, params, created_at "
            "FROM versions WHERE question_key = ? ORDER BY version",
            (question_key,),
        )
        return [
            VersionRecord(r[0], int(r[1]), r[2], r[3], bool(r[4]), json.loads(r[5]), bytes(r[6]), r[7]) for r in rows
        ]

    def latest_version(self, question_key: str, certified: bool = False) -> VersionRecord | None:
        """A question's newest version (the newest certified one with ``certified``), or None."""
        only = " AND certified = 1" if certified else ""
        rows = self._rows(
            "SELECT question_key, version, kind, threshold, certified, report, params, created_at "
            f"FROM versions WHERE question_key = ?{only} ORDER BY version DESC LIMIT 1",
            (question_key,),
        )
        if not rows:
            return None
        r = rows[0]
        return VersionRecord(r[0], int(r[1]), r[2], r[3], bool(r[4]), json.loads(r[5]), bytes(r[6]), r[7])

    def label_count(self, question_key: str) -> int:
        """How many of a question's items have a teacher label."""
        rows = self._rows(
            "SELECT COUNT(*) FROM labels l JOIN items i ON i.item_key = l.item_key WHERE i.question_key = ?",
            (question_key,),
        )
        return int(rows[0][0])

    def events(self, question_key: str | None = None) -> list[dict[str, Any]]:
        """Certifications, withdrawals, retrains and resets, oldest first."""
        where, params = ("WHERE question_key = ?", (question_key,)) if question_key else ("", ())
        rows = self._rows(f"SELECT question_key, kind, detail, created_at FROM events {where} ORDER BY id", params)
        return [{"question_key": r[0], "kind": r[1], "detail": json.loads(r[2]), "created_at": r[3]} for r in rows]

    def questions(self) -> list[dict[str, Any]]:
        """Every question the store has seen: its key, gate, id and wire form."""
        rows = self._rows("SELECT question_key, gate, question_id, question_json FROM questions ORDER BY created_at")
        return [{"question_key": r[0], "gate": r[1], "question_id": r[2], "question": json.loads(r[3])} for r in rows]

    def counts(self, question_key: str) -> dict[str, Any]:
        """Items, lanes, labels by source and failed teacher answers of a question, and how many would-be-automatic
        items went to the teacher as audits (drawn into the sample) or as drift checks on novel items."""
        lanes = dict(
            self._rows("SELECT lane, COUNT(*) FROM items WHERE question_key = ? GROUP BY lane", (question_key,))
        )
        sources = dict(
            self._rows(
                "SELECT l.source, COUNT(*) FROM labels l JOIN items i ON i.item_key = l.item_key "
                "WHERE i.question_key = ? GROUP BY l.source",
                (question_key,),
            )
        )
        failures = self._rows(
            "SELECT COUNT(*) FROM failures f JOIN items i ON i.item_key = f.item_key WHERE i.question_key = ?",
            (question_key,),
        )[0][0]
        checks = dict(
            self._rows(
                "SELECT marked, COUNT(*) FROM items WHERE question_key = ? AND eligible = 1 AND lane = 'teacher' "
                "GROUP BY marked",
                (question_key,),
            )
        )
        return {
            "items": sum(lanes.values()),
            "lanes": lanes,
            "labels": sources,
            "failures": int(failures),
            "audits": int(checks.get(1, 0)),
            "drift_checks": int(checks.get(0, 0)),
        }


def stream_starts(events: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """Where a question's certification sample and its training labels start, from its stored events: a
    withdrawal moves both (the teacher's older answers may no longer hold), a reset only the sample (its labels
    still train, but the versions it forgot were tested on the old sample, so the next one is earned afresh).

    Example:
        >>> stream_starts([{"kind": "withdrawn", "detail": {"seq": 40}}, {"kind": "reset", "detail": {"seq": 90}}])
        (90, 40)
    """
    sample = train = 0
    for event in events:
        seq = event["detail"].get("seq")
        if seq is None:  # a reset stored before resets kept their seq
            continue
        if event["kind"] == "withdrawn":
            sample = train = int(seq)
        elif event["kind"] == "reset":
            sample = int(seq)
    return sample, train


def was_withdrawn(events: Sequence[dict[str, Any]], version: int) -> bool:
    """Whether a question's stored events hold a withdrawal of ``version``.

    Example:
        >>> was_withdrawn([{"kind": "withdrawn", "detail": {"version": 3, "seq": 40}}], 3)
        True
    """
    return any(e["kind"] == "withdrawn" and e["detail"].get("version") == version for e in events)
