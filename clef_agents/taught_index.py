"""What a checkpoint was taught: each taught question's type, wording, options and held-out figures.

``clef-agents teach`` stores them in the checkpoint's ``taught.json``; this module reads that file
without torch (``read_taught``), and ``ClefDecisionModel.taught_questions`` gives the same list for
a loaded model. ``clef-agents taught --model M`` prints it as a table (``--json`` for JSON). A
request uses a question's taught weights when it asks the same type and wording (case and spacing
aside) with taught option names, or, for a choice question, when it rewords the question with the same
option set: a rewording whose embedding is close enough to the taught wording's (a cosine of at least
``model.taught.REWORDED_TOLERANCE``, 0.77 for mini's backbone). Yes/no and score questions are recognised
only in their taught wording. The wording shown here is the surest to ask: a terse or loose rewording may
fall short of the tolerance and be answered by the routing head alone (the response's ``x_untaught`` lists it).

Example:
    >>> info = TaughtQuestionInfo.from_stored({"type": "noul", "instructions": "Is this SMS message spam?",
    ...     "names": ["yes", "no"], "report": {"records": 4427, "held_out": 405,
    ...     "held_out_head": {"accuracy": 0.975, "nll": 0.086}, "held_out_taught": {"accuracy": 0.995, "nll": 0.011}}})
    >>> info.options, info.held_out, info.taught_accuracy
    (('yes', 'no'), 405, 0.995)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TAUGHT_INDEX = "taught.json"
"""The file ``clef-agents teach`` writes beside a checkpoint's weights (``model.taught.TAUGHT_INDEX``)."""
SHOWN_OPTIONS = 6
"""The table lists at most this many option names of a question (``--json`` lists all)."""


@dataclass(frozen=True)
class TaughtQuestionInfo:
    """One taught question as its checkpoint stores it.

    - ``type``: ``noul``, ``choice`` or ``score``; ``instructions``: the taught wording.
    - ``options``: the taught option names (``yes``/``no`` for a noul, level indices for a score).
    - ``records`` / ``held_out``: labelled records taught on, and how many of them were held out
      to fit and measure the blend.
    - ``head_accuracy`` / ``head_nll``: the routing head alone on the held-out records;
      ``taught_accuracy`` / ``taught_nll``: the taught blend on them (``None`` where not stored).
    - ``features``: the state features the taught weights read.
    """

    type: str
    instructions: str
    options: tuple[str, ...]
    records: int | None = None
    held_out: int | None = None
    head_accuracy: float | None = None
    head_nll: float | None = None
    taught_accuracy: float | None = None
    taught_nll: float | None = None
    features: str | None = None

    @classmethod
    def from_stored(cls, entry: Mapping[str, Any]) -> TaughtQuestionInfo:
        """From one entry of ``taught.json`` (``type``, ``instructions``, ``names``, ``report``)."""
        report = entry.get("report") or {}
        head, taught = report.get("held_out_head") or {}, report.get("held_out_taught") or {}
        return cls(
            type=str(entry["type"]),
            instructions=str(entry["instructions"]),
            options=tuple(str(n) for n in entry["names"]),
            records=report.get("records"),
            held_out=report.get("held_out"),
            head_accuracy=head.get("accuracy"),
            head_nll=head.get("nll"),
            taught_accuracy=taught.get("accuracy"),
            taught_nll=taught.get("nll"),
            features=report.get("features", entry.get("features")),
        )

    def as_dict(self) -> dict[str, Any]:
        """As JSON-ready data (``options`` a list).

        Example:
            >>> TaughtQuestionInfo("noul", "Spam?", ("yes", "no")).as_dict()["options"]
            ['yes', 'no']
        """
        return {**asdict(self), "options": list(self.options)}


def read_taught(folder: str | Path) -> list[TaughtQuestionInfo]:
    """The taught questions of a checkpoint folder, from its ``taught.json`` (empty when nothing was taught).

    A folder that is not a checkpoint (no ``config.json``) is a ``FileNotFoundError`` naming it.

    Example:
        >>> read_taught("no/such/folder")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        FileNotFoundError: no checkpoint at no/such/folder (the folder does not exist)
    """
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        reason = "the folder does not exist" if not folder.exists() else "it has no config.json"
        raise FileNotFoundError(f"no checkpoint at {folder} ({reason})")
    index = folder / TAUGHT_INDEX
    if not index.is_file():
        return []
    try:
        stored = json.loads(index.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{index}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    if not isinstance(stored, dict):
        raise ValueError(f"{index}: expected an object of key → taught question, got {type(stored).__name__}")
    try:
        return [TaughtQuestionInfo.from_stored(entry) for entry in stored.values()]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{index}: a taught question lacks type, instructions or names ({exc!r})") from None


def taught_table(questions: Sequence[TaughtQuestionInfo]) -> str:
    """The taught questions as a markdown table, the wording in full (the surest wording to ask).

    Example:
        >>> print(taught_table([TaughtQuestionInfo("noul", "Spam?", ("yes", "no"), 100, 10, 0.5, 0.7, 0.8, 0.4)]))
        | type | question | options | records | held out | held-out acc (head → taught) | held-out NLL (head → taught) |
        |---|---|---|---:|---:|---|---|
        | noul | Spam? | yes, no | 100 | 10 | 0.500 → 0.800 | 0.700 → 0.400 |
    """
    lines = [
        "| type | question | options | records | held out | held-out acc (head → taught) | held-out NLL (head → taught) |",
        "|---|---|---|---:|---:|---|---|",
    ]
    for q in questions:
        options = ", ".join(q.options[:SHOWN_OPTIONS])
        if len(q.options) > SHOWN_OPTIONS:
            options += f", … ({len(q.options)} in all)"
        wording = " ".join(q.instructions.split()).replace("|", "\\|")
        lines.append(
            f"| {q.type} | {wording} | {options} | {_number(q.records)} | {_number(q.held_out)} | "
            f"{_pair(q.head_accuracy, q.taught_accuracy)} | {_pair(q.head_nll, q.taught_nll)} |"
        )
    return "\n".join(lines)


def _number(value: int | None) -> str:
    return "" if value is None else str(value)


def _pair(head: float | None, taught: float | None) -> str:
    return " → ".join("?" if v is None else f"{v:.3f}" for v in (head, taught))
