"""Decision records: the JSONL format for training, evaluation and calibration data.

Training (``clef_agents.train``) and lane calibration (``clef_agents.thresholds``) both read this
format, so it sits below both.

A record is one request with its gold answers::

    {"state": str | object, "questions": {qid: <System One question JSON>},
     "labels": {qid: label}, "meta": {"dataset": str, "split": str, "source": str, ...}}

A label is ``true``/``false`` for a noul, an option name for a choice and an integer level for a
score. Validation goes through ``clef_agents.wire`` so a record is legal exactly when the request
it holds is legal on the wire and every label names one of its question's options.

Example:
    >>> record = {"state": "win a prize!", "questions": {"spam": {"type": "noul", "instructions": "Spam?"}},
    ...           "labels": {"spam": True}, "meta": {"dataset": "demo", "split": "train", "source": "hand"}}
    >>> validate_records([record]).ok
    True
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clef_agents import wire

UNKNOWN_DATASET = "(no dataset)"

Example = tuple[str, list[wire.TextQuestion], list[int]]
"""One record as a model reads it: state text, questions, gold option index per question (``record_to_example``)."""


# --------------------------------------------------------------------------- JSONL I/O


def iter_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL file one by one (blank lines are skipped).

    Raises ``ValueError`` naming the file and line when a line is not a JSON object.

    Example:
        >>> next(iter_records("records.jsonl"))["labels"]  # doctest: +SKIP
        {'intent': 'card_arrival'}
    """
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: a record must be a JSON object, got {type(record).__name__}")
            yield record


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Read every record of a JSONL file.

    Example:
        >>> len(read_records("records.jsonl"))  # doctest: +SKIP
        120
    """
    return list(iter_records(path))


def write_records(path: str | Path, records: Iterable[Mapping[str, Any]]) -> int:
    """Write records as JSONL (UTF-8, one object a line, parent folders created); return the count.

    Example:
        >>> write_records("/tmp/demo.jsonl", [{"state": "hi", "questions": {}, "labels": {}}])
        1
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(target, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False))
            handle.write("\n")
            count += 1
    return count


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class RecordError:
    """One problem in one record: its position, the question id (if any) and a readable message."""

    index: int
    question_id: str | None
    message: str

    def __str__(self) -> str:
        where = f"record {self.index}" + (f", question {self.question_id!r}" if self.question_id is not None else "")
        return f"{where}: {self.message}"


@dataclass
class ValidationReport:
    """What ``validate_records`` found: errors per record and label counts per (dataset, question id).

    ``balance[(dataset, qid)]`` counts labels under their canonical names: ``"true"``/``"false"``
    for a noul, the option name for a choice, the level (as a string) for a score.
    """

    n_records: int = 0
    errors: list[RecordError] = field(default_factory=list)
    balance: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no record has an error."""
        return not self.errors

    @property
    def invalid_records(self) -> list[int]:
        """Sorted indices of the records with at least one error."""
        return sorted({error.index for error in self.errors})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view: ``{"n_records", "n_invalid", "errors": [...], "balance": {dataset: {qid: counts}}}``."""
        balance: dict[str, dict[str, dict[str, int]]] = {}
        for (dataset, qid), counts in sorted(self.balance.items()):
            balance.setdefault(dataset, {})[qid] = dict(sorted(counts.items()))
        return {
            "n_records": self.n_records,
            "n_invalid": len(self.invalid_records),
            "errors": [{"index": e.index, "question_id": e.question_id, "message": e.message} for e in self.errors],
            "balance": balance,
        }

    def format_balance(self, max_labels: int = 12) -> str:
        """Class balance as a plain-text table, one row per (dataset, question id).

        Rows with many labels show the ``max_labels`` most frequent and the smallest count.
        """
        lines = [f"{'dataset':<20} {'question':<16} {'n':>7} {'labels':>6}  counts"]
        for (dataset, qid), counts in sorted(self.balance.items()):
            total = sum(counts.values())
            ranked = counts.most_common()
            shown = ", ".join(f"{label}={n} ({n / total:.1%})" for label, n in ranked[:max_labels])
            if len(ranked) > max_labels:
                label, n = ranked[-1]
                shown += f", … smallest {label}={n}"
            lines.append(f"{dataset:<20} {qid:<16} {total:>7} {len(counts):>6}  {shown}")
        return "\n".join(lines)

    def format_errors(self, limit: int = 50) -> str:
        """The first ``limit`` errors, one a line, and how many more there were."""
        lines = [str(error) for error in self.errors[:limit]]
        if len(self.errors) > limit:
            lines.append(f"… and {len(self.errors) - limit} more errors")
        return "\n".join(lines)


def validate_records(records: Iterable[Mapping[str, Any]], require_all_labels: bool = True) -> ValidationReport:
    """Check every record and count labels per (dataset, question id).

    A record is invalid when it is not an object, its state is not a System One state, its
    questions fail ``wire.validate_questions``, a label is not legal for its question (the
    message lists the allowed labels), a label names no question, or (with
    ``require_all_labels``) a question has no label.

    Example:
        >>> bad = {"state": "hi", "questions": {"q": {"type": "choice", "instructions": "Which?",
        ...        "criteria": {"a": None, "b": None}}}, "labels": {"q": "c"}}
        >>> print(validate_records([bad]).format_errors())
        record 0, question 'q': label 'c' is not legal here; allowed: a, b
    """
    report = ValidationReport()
    for index, record in enumerate(records):
        report.n_records += 1
        errors, labels = _check_record(index, record, require_all_labels)
        report.errors.extend(errors)
        if errors:
            continue
        dataset = _dataset_name(record)
        for qid, label in labels.items():
            report.balance.setdefault((dataset, qid), Counter())[label] += 1
    return report


def validate_record(record: Mapping[str, Any], require_all_labels: bool = True) -> list[RecordError]:
    """The errors of one record (index 0); empty when it is valid.

    Example:
        >>> validate_record({"state": "hi", "questions": {"q": {"type": "noul", "instructions": "Hi?"}}, "labels": {"q": True}})
        []
    """
    errors, _ = _check_record(0, record, require_all_labels)
    return errors


def canonical_label(question: wire.TextQuestion, label: Any) -> str:
    """The name a legal label is counted under: "true"/"false", the option name, or the level.

    Raises ``ValueError`` (from ``wire.label_index``) naming the allowed labels otherwise.

    Example:
        >>> from langchain_core.decisions import Noul
        >>> canonical_label(Noul(instructions="Spam?"), "yes")
        'true'
    """
    position = wire.label_index(question, label)
    if question.type == "noul":
        return "true" if position == 0 else "false"
    return wire.option_names(question)[position]


def record_to_example(record: Mapping[str, Any]) -> Example:
    """Validate a record and turn it into (state text, questions, gold indices).

    Example:
        >>> record_to_example({"state": "hi", "questions": {"q": {"type": "noul", "instructions": "Greeting?"}},
        ...                    "labels": {"q": True}})[2]
        [0]
    """
    questions = wire.validate_questions(record["questions"])
    labels = record.get("labels", {})
    missing = [qid for qid in questions if qid not in labels]
    if missing:
        raise ValueError(f"record has no label for question(s) {missing}; every question needs one")
    gold = [wire.label_index(q, labels[qid]) for qid, q in questions.items()]
    return wire.state_text(record["state"]), list(questions.values()), gold


def _dataset_name(record: Mapping[str, Any]) -> str:
    meta = record.get("meta")
    if isinstance(meta, Mapping) and isinstance(meta.get("dataset"), str):
        return meta["dataset"]
    return UNKNOWN_DATASET


def _check_record(index: int, record: Any, require_all_labels: bool) -> tuple[list[RecordError], dict[str, str]]:
    if not isinstance(record, Mapping):
        return [RecordError(index, None, f"a record must be an object, got {type(record).__name__}")], {}
    errors = _check_shape(index, record)
    if errors:
        return errors, {}
    try:
        questions = wire.validate_questions(record["questions"])
    except wire.InvalidRequestError as exc:
        return [_question_error(index, e) for e in exc.errors], {}
    labels: dict[str, str] = {}
    given = record["labels"]
    for qid, question in questions.items():
        if qid not in given:
            if require_all_labels:
                errors.append(RecordError(index, qid, f"label missing; allowed: {wire.allowed_labels(question)}"))
            continue
        try:
            labels[qid] = canonical_label(question, given[qid])
        except ValueError as exc:
            errors.append(RecordError(index, qid, str(exc)))
    for qid in given:
        if qid not in questions:
            errors.append(
                RecordError(index, qid, f"label for a question that is not asked; questions: {', '.join(questions)}")
            )
    return errors, labels


def _check_shape(index: int, record: Mapping[str, Any]) -> list[RecordError]:
    errors = []
    for key in ("state", "questions", "labels"):
        if key not in record:
            errors.append(RecordError(index, None, f"field {key!r} missing; a record needs state, questions, labels"))
    if "state" in record:
        try:
            wire.check_state(record["state"])
        except wire.InvalidRequestError as exc:
            errors.append(RecordError(index, None, exc.errors[0]["msg"]))
    if "labels" in record and not isinstance(record["labels"], Mapping):
        errors.append(
            RecordError(
                index, None, f"labels must be an object of question id → label, got {type(record['labels']).__name__}"
            )
        )
    meta = record.get("meta")
    if meta is not None and not isinstance(meta, Mapping):
        errors.append(RecordError(index, None, f"meta must be an object, got {type(meta).__name__}"))
    return errors


def _question_error(index: int, error: Mapping[str, Any]) -> RecordError:
    loc = list(error["loc"])
    qid = str(loc[1]) if len(loc) > 1 and loc[0] == "questions" else None
    detail = ".".join(str(part) for part in loc[2:])
    return RecordError(index, qid, f"{detail}: {error['msg']}" if detail else error["msg"])
