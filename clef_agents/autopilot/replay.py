"""Replay a labelled stream through an ``Autopilot``, as if each label were a teacher's answer, and measure
what it saves: teacher calls, final accuracy, agreement of automatic answers with the teacher.

The benchmark (``bench/autopilot``) and ``clef-agents autopilot replay`` both run this.

Example:
    >>> import numpy as np
    >>> from clef_agents.autopilot.pilot import Autopilot
    >>> pilot = Autopilot(":memory:", embeddings=False, background=False)
    >>> stream = Stream(texts=[f"item {i}" for i in range(60)], model_probs=np.full((60, 2), 0.5),
    ...                 gold=np.array([i % 2 for i in range(60)]))
    >>> result = replay(pilot, {"type": "noul", "instructions": "Odd?"}, stream, lambda i: int(stream.gold[i]))
    >>> bool(result.teacher_calls[:20].all()), result.summary()["teacher_share"]
    (True, 1.0)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clef_agents.autopilot.pilot import Autopilot

WINDOW = 500


@dataclass
class Stream:
    """A stream of items for one question: state texts, the decision model's option probabilities, gold
    option indices, and (optionally) precomputed sentence vectors."""

    texts: list[str]
    model_probs: np.ndarray
    gold: np.ndarray
    embeddings: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def ordered(self, order: np.ndarray) -> Stream:
        """The same items in another order."""
        return Stream(
            [self.texts[i] for i in order],
            self.model_probs[order],
            self.gold[order],
            None if self.embeddings is None else self.embeddings[order],
        )


@dataclass
class ReplayResult:
    """Per item: the lane, the final answer, whether the teacher was called, the teacher's answer (also
    for automatic items, where it was not asked: the counterfactual the agreement is measured against), and the
    serving learner's answer and confidence (also where the teacher answered)."""

    lanes: np.ndarray
    answers: np.ndarray
    teacher_calls: np.ndarray
    teacher: np.ndarray
    gold: np.ndarray
    probabilities: np.ndarray
    predictions: np.ndarray
    seconds: float
    retrain_seconds: list[float] = field(default_factory=list)

    def summary(self, last: int = 1000, window: int = WINDOW, target: float = 0.95) -> dict[str, Any]:
        """Teacher-call shares, accuracy, automatic agreement (whole stream and per window), first automatic item."""
        auto = self.lanes == "auto"
        n = len(self.lanes)
        agree = self.answers == self.teacher
        windows = []
        for start in range(0, n - window + 1, window):
            part = auto[start : start + window]
            if part.any():
                windows.append(float(agree[start : start + window][part].mean()))
        first_auto = int(np.argmax(auto)) if auto.any() else None
        return {
            "items": n,
            "teacher_share": float(self.teacher_calls.mean()),
            "teacher_share_last": float(self.teacher_calls[-last:].mean()),
            "automatic_share": float(auto.mean()),
            "accuracy": float((self.answers == self.gold).mean()),
            "teacher_accuracy": float((self.teacher == self.gold).mean()),
            "automatic_agreement": float(agree[auto].mean()) if auto.any() else None,
            "automatic_items": int(auto.sum()),
            "missed_target": bool(auto.any() and agree[auto].mean() < target),
            "window_agreement_min": min(windows) if windows else None,
            "windows_below_92": sum(w < 0.92 for w in windows),
            "windows_below_90": sum(w < 0.90 for w in windows),
            "first_automatic_item": first_auto,
            "retrains": len(self.retrain_seconds),
            "retrain_seconds_max": max(self.retrain_seconds) if self.retrain_seconds else None,
            "seconds": round(self.seconds, 2),
        }


def replay(
    pilot: Autopilot,
    question: dict[str, Any],
    stream: Stream,
    teacher: Callable[[int], int | None],
    *,
    gate: str = "replay",
    question_id: str = "q",
    source: str = "gold",
    progress: Callable[[int], None] | None = None,
    on_teacher_call: Callable[[str], None] | None = None,
) -> ReplayResult:
    """Run a stream through the autopilot: automatic items get the learner's answer, the others the teacher's
    (which becomes a label). ``teacher(i)`` returns an option index, or None for a failed answer; it is also
    read for automatic items, as the answer they are measured against, but only the items sent to the teacher
    count as calls (``on_teacher_call`` hears each one's item key before its label is kept)."""
    if stream.embeddings is not None and pilot.embedder is not None:
        pilot.embedder.remember(stream.texts, stream.embeddings)
    n = len(stream)
    lanes = np.empty(n, dtype=object)
    answers = np.full(n, -1)
    calls = np.zeros(n, dtype=bool)
    teacher_answers = np.full(n, -1)
    probabilities = np.zeros(n)
    predictions = np.full(n, -1)
    started = time.perf_counter()
    for i in range(n):
        decision = pilot.decide(gate, question_id, question, stream.texts[i], stream.model_probs[i])
        said = teacher(i)
        teacher_answers[i] = -1 if said is None else said
        lanes[i], probabilities[i], predictions[i] = decision.lane, decision.probability, decision.label
        if decision.lane == "teacher":
            calls[i] = True
            if on_teacher_call is not None:
                on_teacher_call(decision.item_key)
            if said is None:
                pilot.record_failure(decision.item_key, source, "the teacher gave no valid answer")
            else:
                pilot.record_label(decision.item_key, said, source)
            answers[i] = -1 if said is None else said
        else:
            answers[i] = decision.label
        if progress is not None:
            progress(i)
    pilot.wait_idle()
    seconds = [v.report.get("seconds", 0.0) for v in pilot.store.versions(decision.question_key)] if n else []
    return ReplayResult(
        lanes.astype(str),
        answers,
        calls,
        teacher_answers,
        stream.gold,
        probabilities,
        predictions,
        time.perf_counter() - started,
        seconds,
    )
