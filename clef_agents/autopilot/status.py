"""What ``clef-agents autopilot status`` shows: one row per question, read from the label store alone, so any
process (a replica, the CLI) sees the same."""

from __future__ import annotations

from typing import Any

from clef_agents.autopilot.store import LabelStore, was_withdrawn


def question_status(store: LabelStore) -> list[dict[str, Any]]:
    """The ``status`` rows of every question in a store: labels by source, teacher calls saved, audits and drift
    checks, the certified version, threshold and certificate, the last retrain and the drift state.

    Example:
        >>> question_status(LabelStore(":memory:"))
        []
    """
    rows = []
    for question in store.questions():
        key = question["question_key"]
        counts = store.counts(key)
        versions = store.versions(key)
        certified = [v for v in versions if v.certified]
        events = store.events(key)
        withdrawn = bool(certified) and was_withdrawn(events, certified[-1].version)
        auto = counts["lanes"].get("auto", 0)
        rows.append(
            {
                "question": key,
                "gate": question["gate"],
                "question_id": question["question_id"],
                "items": counts["items"],
                "automatic": auto,
                "teacher_calls_saved": auto,
                "saved_share": auto / counts["items"] if counts["items"] else 0.0,
                "labels": counts["labels"],
                "failed_teacher_answers": counts["failures"],
                "audits": counts["audits"],
                "drift_checks": counts["drift_checks"],
                "version": certified[-1].version if certified else None,
                "threshold": certified[-1].threshold if certified else None,
                "certificate": certified[-1].report.get("certificate") if certified else None,
                "last_retrain": versions[-1].created_at if versions else None,
                "last_retrain_seconds": versions[-1].report.get("seconds") if versions else None,
                "versions": len(versions),
                "state": "not certified" if not certified else ("withdrawn (drift)" if withdrawn else "certified"),
            }
        )
    return rows
