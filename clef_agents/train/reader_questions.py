"""Reading questions written out in full: the question reader's widest source of distinct questions.

The data sets give the reader many rows but few questions (one concept per set, asked through templates).
The files of ``clef_agents/train/reader_questions/`` hold texts of everyday families (support e-mails,
logs, meeting notes, orders, agent tool results, contracts …), each with four yes/no questions (two true,
two false, negated wordings and hard negatives among them) and one choice, written by hand for this
project under a brief that kept them off the concepts the benchmark and the probe measure (harm and
safety, sarcasm, clickbait, spam, sentiment and emotion, news topics, question types, tool decisions,
stance, claims, readability).

A file is ``{"written_by", "family", "items": [{"id", "state", "questions": [...]}]}``; a question is
``{"type": "noul", "question", "answer": bool}`` or ``{"type": "choice", "question", "options": {name:
description | null}, "answer": name}``. One item in ten (by a hash of its id) is kept for validation.

Example:
    >>> records = written_records("train")  # doctest: +SKIP
    >>> records[0]["meta"]["dataset"]  # doctest: +SKIP
    'written_questions'
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOURCE = "written_questions"
FOLDER = Path(__file__).resolve().parent / "reader_questions"
VALID_SHARE = 10
"""One item in this many goes to the validation split."""


@dataclass(frozen=True)
class WrittenQuestion:
    """One question about a written item's state: a yes/no (``options`` empty) or a choice."""

    text: str
    answer: bool | str
    options: dict[str, str | None]

    @property
    def type(self) -> str:
        return "choice" if self.options else "noul"


@dataclass(frozen=True)
class WrittenItem:
    """A state and its questions, from one file."""

    id: str
    state: str
    questions: tuple[WrittenQuestion, ...]
    family: str


def written_files(folder: str | Path = FOLDER) -> list[Path]:
    """The question files of ``folder``, sorted by name.

    Example:
        >>> written_files("/nonexistent")
        []
    """
    return sorted(Path(folder).glob("*.json"))


def _question(raw: Any, where: str) -> WrittenQuestion:
    if not isinstance(raw, dict):
        raise TypeError(f"{where}: a question must be an object, got {type(raw).__name__}")
    text, answer, kind = raw.get("question"), raw.get("answer"), raw.get("type")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}: 'question' must be a non-empty string, got {text!r}")
    if kind == "noul":
        if not isinstance(answer, bool):
            raise ValueError(f"{where}: a noul's 'answer' must be true or false, got {answer!r}")
        return WrittenQuestion(text.strip(), answer, {})
    if kind == "choice":
        options = raw.get("options")
        if not isinstance(options, dict) or len(options) < 2:
            raise ValueError(f"{where}: a choice needs 'options' with at least two names, got {options!r}")
        if any(
            not isinstance(k, str) or not k.strip() or not (v is None or isinstance(v, str)) for k, v in options.items()
        ):
            raise ValueError(f"{where}: option names must be non-empty strings and descriptions strings or null")
        if answer not in options:
            raise ValueError(f"{where}: answer {answer!r} is not one of the options {list(options)}")
        return WrittenQuestion(
            text.strip(),
            answer,
            {k: (v.strip() if isinstance(v, str) and v.strip() else None) for k, v in options.items()},
        )
    raise ValueError(f"{where}: 'type' must be 'noul' or 'choice', got {kind!r}")


def load_written(path: str | Path) -> list[WrittenItem]:
    """The items of one file, checked (``TypeError`` / ``ValueError`` name the file, the item and the field).

    Example:
        >>> import tempfile
        >>> item = {"id": "x1", "state": "Order 7 shipped on Monday.", "questions": [{"type": "noul", "question": "Shipped?", "answer": True}]}
        >>> f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False); _ = f.write(json.dumps({"items": [item]})); f.close()
        >>> load_written(f.name)[0].questions[0].answer
        True
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise TypeError(f"{path}: expected an object with a list 'items'")
    family = str(data.get("family", ""))
    out, seen = [], set()
    for n, raw in enumerate(items):
        where = f"{path.name} item {n}"
        if not isinstance(raw, dict):
            raise TypeError(f"{where}: an item must be an object, got {type(raw).__name__}")
        item_id, state, questions = raw.get("id"), raw.get("state"), raw.get("questions")
        if not isinstance(item_id, str) or not item_id or item_id in seen:
            raise ValueError(f"{where}: 'id' must be a unique non-empty string, got {item_id!r}")
        seen.add(item_id)
        if not isinstance(state, str) or not state.strip():
            raise ValueError(f"{where} ({item_id}): 'state' must be a non-empty string")
        if not isinstance(questions, list) or not questions:
            raise ValueError(f"{where} ({item_id}): 'questions' must be a non-empty list")
        parsed = tuple(_question(q, f"{where} ({item_id}) question {k}") for k, q in enumerate(questions))
        out.append(WrittenItem(item_id, state.strip(), parsed, family))
    return out


def item_split(item_id: str) -> str:
    """``valid`` for one item in ``VALID_SHARE`` (by a hash of its id), else ``train``.

    Example:
        >>> item_split("a001") in ("train", "valid")
        True
    """
    digest = int(hashlib.sha1(item_id.encode("utf-8")).hexdigest(), 16)
    return "valid" if digest % VALID_SHARE == 0 else "train"


def written_records(split: str, folder: str | Path = FOLDER) -> list[dict[str, Any]]:
    """One-question decision records from every written item of ``split`` (``train`` or ``valid``).

    Example:
        >>> all(r["meta"]["dataset"] == SOURCE for r in written_records("valid"))
        True
    """
    if split not in ("train", "valid"):
        raise ValueError(f"split {split!r}; the written questions have 'train' and 'valid'")
    records = []
    for path in written_files(folder):
        for item in load_written(path):
            if item_split(item.id) != split:
                continue
            for question in item.questions:
                if question.type == "noul":
                    raw: dict[str, Any] = {"type": "noul", "instructions": question.text}
                else:
                    raw = {"type": "choice", "instructions": question.text, "criteria": dict(question.options)}
                records.append(
                    {
                        "state": item.state,
                        "questions": {"q": raw},
                        "labels": {"q": question.answer},
                        "meta": {
                            "dataset": SOURCE,
                            "source": path.name,
                            "form": f"written_{question.type}",
                            "item": item.id,
                        },
                    }
                )
    return records
