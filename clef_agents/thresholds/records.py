"""Labelled decision records → per-question arrays of (decision probability, correct, slice).

Predictions come from one of two places:

- a model: any ``BaseDecisionModel``, run with ``.batch`` in chunks (``predict_probabilities``);
- the records themselves (replayed decision traces): ``meta["probabilities"]`` maps each
  question id to its probability vector in ``wire.option_names`` order, e.g.
  ``{"probabilities": {"intent": [0.01, 0.97, 0.02]}, "route": "refunds"}``, or to a mapping
  option name → probability (``{"yes": .., "no": ..}`` for a noul, level strings for a score),
  which is what ``TraceStore.export_records`` writes.

Records whose ``meta["source"]`` is ``"auto"`` are skipped: their label is the model's own
answer, so they would count every automatic decision as correct.

The route that reached the gate (for per-slice fits) is ``meta[slice_key]``, ``"route"`` by default.

Example:
    >>> rec = {"state": "x", "questions": {"spam": {"type": "noul", "instructions": "Spam?"}},
    ...        "labels": {"spam": True}, "meta": {"probabilities": {"spam": [0.9, 0.1]}, "route": "inbox"}}
    >>> s = decision_samples([rec])["spam"]
    >>> float(s.scores[0]), bool(s.correct[0]), s.slices[0]
    (0.9, True, 'inbox')
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clef_agents import wire
from clef_agents.records import iter_records

PROBABILITIES_KEY = "probabilities"
"""``meta`` key of a record's (or trace's) answer probabilities: ``{qid: [p, ...]}``."""
ROUTE_KEY = "route"
"""``meta`` key of the route that reached the gate (the default slice key)."""


def load_decision_records(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file of decision records; errors name the file and line.

    Example:
        >>> load_decision_records("missing.jsonl")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        FileNotFoundError: decision records not found: missing.jsonl
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"decision records not found: {path}")
    records = list(iter_records(path))
    for number, record in enumerate(records, start=1):
        _check_record(record, f"{path}: record {number}")
    return records


def _check_record(record: Any, where: str) -> None:
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: a decision record must be an object, got {type(record).__name__}")
    missing = [key for key in ("state", "questions", "labels") if key not in record]
    if missing:
        raise ValueError(f"{where}: a decision record needs state, questions and labels; missing {', '.join(missing)}")
    unknown = [qid for qid in record["labels"] if qid not in record["questions"]]
    if unknown:
        raise ValueError(f"{where}: labels for questions the record does not ask: {', '.join(map(str, unknown))}")


class QuestionCache:
    """Validates each distinct question JSON once (records repeat the same schema)."""

    def __init__(self) -> None:
        self._typed: dict[str, wire.TextQuestion] = {}

    def get(self, qid: str, question: Any) -> wire.TextQuestion:
        """The typed question for ``question`` (a wire dict or a typed question)."""
        if not isinstance(question, Mapping):
            return wire.validate_questions({qid: question})[qid]
        key = json.dumps(question, sort_keys=True, default=str)
        if key not in self._typed:
            self._typed[key] = wire.validate_questions({qid: question})[qid]
        return self._typed[key]


def predict_probabilities(
    records: Sequence[Mapping[str, Any]],
    model: Any,
    *,
    batch_size: int = 32,
    progress: bool = True,
) -> list[dict[str, list[float]]]:
    """Run a decision model over the labelled questions of each record, in ``.batch`` chunks.

    Returns one ``{qid: probabilities}`` per record (``wire.option_names`` order), the same shape
    as ``meta["probabilities"]``.

    Example:
        >>> from clef_agents.testing import FakeDecisionModel
        >>> rec = {"state": "x", "questions": {"spam": {"type": "noul", "instructions": "Spam?"}}, "labels": {"spam": True}}
        >>> out = predict_probabilities([rec], FakeDecisionModel(answers={"spam": 0.8}), progress=False)
        >>> [round(p, 6) for p in out[0]["spam"]]
        [0.8, 0.2]
    """
    from tqdm.auto import tqdm

    cache = QuestionCache()
    requests = [
        {"state": r["state"], "questions": {qid: cache.get(qid, r["questions"][qid]) for qid in r["labels"]}}
        for r in records
    ]
    out: list[dict[str, list[float]]] = []
    with tqdm(total=len(requests), desc="predicting", unit="rec", disable=not progress) as bar:
        for start in range(0, len(requests), batch_size):
            chunk = requests[start : start + batch_size]
            for response in model.batch(chunk):
                out.append({qid: wire.answer_probabilities(answer) for qid, answer in response.answers.items()})
            bar.update(len(chunk))
    return out


def with_probabilities(
    records: Sequence[Mapping[str, Any]], probabilities: Sequence[Mapping[str, Sequence[float]]]
) -> list[dict[str, Any]]:
    """Copies of ``records`` with ``meta["probabilities"]`` set (the replayable trace shape).

    Example:
        >>> with_probabilities([{"meta": {}}], [{"q": [0.5, 0.5]}])[0]["meta"]
        {'probabilities': {'q': [0.5, 0.5]}}
    """
    if len(records) != len(probabilities):
        raise ValueError(f"{len(records)} records but {len(probabilities)} predictions")
    return [
        {**r, "meta": {**(r.get("meta") or {}), PROBABILITIES_KEY: {k: list(map(float, v)) for k, v in p.items()}}}
        for r, p in zip(records, probabilities)
    ]


def records_missing_probabilities(records: Iterable[Mapping[str, Any]]) -> int:
    """How many records lack a probability vector for some labelled question."""
    missing = 0
    for r in records:
        if (r.get("meta") or {}).get("source") in SELF_LABELLED_SOURCES:
            continue
        known = (r.get("meta") or {}).get(PROBABILITIES_KEY) or {}
        if any(known.get(qid) is None for qid in r["labels"]):
            missing += 1
    return missing


@dataclass
class DecisionSample:
    """One question's calibration data: decision probability, whether the decided label was
    right, and the slice (route) of each labelled record."""

    question_id: str
    scores: np.ndarray
    correct: np.ndarray
    slices: list[str | None]

    def __len__(self) -> int:
        return len(self.scores)

    def subset(self, mask: np.ndarray) -> DecisionSample:
        """The records where ``mask`` is true."""
        return DecisionSample(
            self.question_id, self.scores[mask], self.correct[mask], [s for s, m in zip(self.slices, mask) if m]
        )


SELF_LABELLED_SOURCES = ("auto",)
"""``meta["source"]`` values whose labels are the model's own answers (never calibration truth)."""


def probability_vector(question: wire.TextQuestion, value: Sequence[float] | Mapping[Any, float]) -> list[float]:
    """A stored prediction as a vector in ``wire.option_names`` order (from a list or a mapping).

    Example:
        >>> probability_vector(wire.Noul(instructions="Spam?"), {"no": 0.2, "yes": 0.8})
        [0.8, 0.2]
    """
    if not isinstance(value, Mapping):
        return [float(p) for p in value]
    by_name = {str(k): v for k, v in value.items()}
    names = wire.option_names(question)
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(f"probabilities lack options {', '.join(missing[:5])}; expected keys: {', '.join(names[:12])}")
    return [float(by_name[n]) for n in names]


def decision_samples(
    records: Sequence[Mapping[str, Any]],
    slice_key: str = ROUTE_KEY,
    exclude_sources: Sequence[str] = SELF_LABELLED_SOURCES,
) -> dict[str, DecisionSample]:
    """Group labelled records by question id (records must carry ``meta["probabilities"]``).

    Each answer goes through ``wire.to_answer``; its signal is ``wire.decision_probability`` and
    it is correct when ``wire.decided_label`` equals the label. Records whose ``meta["source"]``
    is in ``exclude_sources`` are skipped.
    """
    cache = QuestionCache()
    grouped: dict[str, tuple[list[float], list[bool], list[str | None]]] = {}
    for index, record in enumerate(records):
        meta = record.get("meta") or {}
        if meta.get("source") in exclude_sources:
            continue
        probabilities = meta.get(PROBABILITIES_KEY) or {}
        route = meta.get(slice_key)
        for qid, label in record["labels"].items():
            if probabilities.get(qid) is None:
                raise ValueError(
                    f"record {index}: no meta[{PROBABILITIES_KEY!r}][{qid!r}]; give a model to predict it "
                    f"or replay traces that carry it"
                )
            question = cache.get(qid, record["questions"][qid])
            try:
                answer = wire.to_answer(question, probability_vector(question, probabilities[qid]))
                truth = wire.option_names(question)[wire.label_index(question, label)]
            except ValueError as exc:
                raise ValueError(f"record {index}, question {qid!r}: {exc}") from None
            scores, correct, slices = grouped.setdefault(qid, ([], [], []))
            scores.append(wire.decision_probability(answer))
            correct.append(wire.decided_label(answer) == truth)
            slices.append(None if route is None else str(route))
    return {
        qid: DecisionSample(qid, np.asarray(s, dtype=float), np.asarray(c, dtype=bool), sl)
        for qid, (s, c, sl) in grouped.items()
    }
