"""Schema augmentation: the same labelled state asked in many shapes.

A decision model must not care about option order, question order, option names or the exact
wording of an instruction, and must answer when only some options or questions are asked. These
functions rewrite a decision record (see ``records``) at random, driven by a seeded
``random.Random``, and keep every label attached to its option, so the output is always a valid
record:

- option shuffle and question shuffle;
- random option subsets that always keep the true option;
- random question subsets (at least one question stays);
- instruction paraphrases (from ``datasets.DATASETS``);
- option renaming (``card_arrival`` → ``Card arrival`` / ``card-arrival`` / ``option_17``) and
  description dropout (description → null);
- derived yes/no questions from a choice label (``expand_with_derived_nouls``).

Example:
    >>> import random
    >>> record = {"state": "where is my card?", "labels": {"intent": "card_arrival"},
    ...           "questions": {"intent": {"type": "choice", "instructions": "Which request?",
    ...               "criteria": {"card_arrival": "Waiting for a card.", "lost_card": "Card lost.",
    ...                            "refund": "Wants money back."}}}}
    >>> out = augment_record(record, random.Random(0))
    >>> out["labels"]["intent"] in out["questions"]["intent"]["criteria"]
    True
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clef_agents.train.datasets import DATASETS, instruction_variants

RENAME_STYLES = ("title", "kebab", "numbered", "upper")


@dataclass
class AugmentConfig:
    """Probabilities of each rewrite; every one is drawn independently per record (or per option).

    Example:
        >>> AugmentConfig(shuffle_options=1.0).shuffle_options
        1.0
    """

    shuffle_options: float = 0.8
    """Shuffle the options of each choice question."""
    shuffle_questions: float = 0.8
    """Shuffle the order of the questions (and labels)."""
    option_subset: float = 0.4
    """Ask a random subset of a choice's options (size uniform in 2..n, the true option always kept)."""
    question_subset: float = 0.2
    """Keep a random non-empty subset of the questions."""
    paraphrase: float = 0.5
    """Replace a known data set's instruction by one of its paraphrases."""
    rename_options: float = 0.2
    """Rename all options of a choice in one style (``RENAME_STYLES``); labels follow."""
    description_dropout: float = 0.1
    """Per option (choice) or per question (noul): replace the description by null."""
    derived_nouls: float = 0.3
    """Add yes/no questions derived from a choice label (see ``expand_with_derived_nouls``)."""
    max_derived_nouls: int = 2
    """At most this many derived nouls per record."""


# --------------------------------------------------------------------------- copying


def copy_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A copy deep enough to rewrite questions, labels and meta without touching the original.

    The state is shared (augmentation never changes it).

    Example:
        >>> r = {"state": "s", "questions": {"q": {"type": "noul", "instructions": "Q?"}}, "labels": {"q": True}}
        >>> copy_record(r)["questions"]["q"] is r["questions"]["q"]
        False
    """
    out: dict[str, Any] = {
        "state": record["state"],
        "questions": {qid: _copy_question(q) for qid, q in record["questions"].items()},
        "labels": dict(record["labels"]),
    }
    if "meta" in record:
        out["meta"] = dict(record["meta"] or {})
    return out


def _copy_question(question: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(question)
    criteria = out.get("criteria")
    if isinstance(criteria, Mapping):
        out["criteria"] = dict(criteria)
    elif isinstance(criteria, list):
        out["criteria"] = list(criteria)
    return out


def _note(record: dict[str, Any], step: str) -> None:
    meta = record.setdefault("meta", {})
    meta["augment"] = [*meta.get("augment", []), step]


# --------------------------------------------------------------------------- the whole pipeline


def augment_record(
    record: Mapping[str, Any], rng: random.Random, config: AugmentConfig | None = None
) -> dict[str, Any]:
    """A randomly reshaped copy of a record; the labels still match the (renamed) options.

    The steps applied are listed in ``meta["augment"]``.

    Example:
        >>> import random
        >>> r = {"state": "free prize!", "questions": {"spam": {"type": "noul", "instructions": "Spam?"}},
        ...      "labels": {"spam": True}}
        >>> augment_record(r, random.Random(1))["labels"]
        {'spam': True}
    """
    config = config or AugmentConfig()
    out = copy_record(record)
    if rng.random() < config.paraphrase:
        _paraphrase(out, rng)
    spec = DATASETS.get((out.get("meta") or {}).get("dataset", ""))
    opaque = bool(spec and spec.opaque_option_names)
    for qid in list(out["questions"]):
        _reshape_question(out, qid, rng, config, opaque)
    if rng.random() < config.derived_nouls and config.max_derived_nouls > 0 and _choice_ids(out):
        out = expand_with_derived_nouls(out, rng, rng.randint(1, config.max_derived_nouls))
    if len(out["questions"]) > 1 and rng.random() < config.question_subset:
        _question_subset(out, rng)
    if len(out["questions"]) > 1 and rng.random() < config.shuffle_questions:
        _shuffle_questions(out, rng)
    return out


def _reshape_question(
    record: dict[str, Any], qid: str, rng: random.Random, config: AugmentConfig, opaque: bool
) -> None:
    question = record["questions"][qid]
    if question.get("type") == "noul":
        if question.get("criteria") is not None and rng.random() < config.description_dropout:
            question.pop("criteria")
            _note(record, f"drop_criteria:{qid}")
        return
    if question.get("type") != "choice" or qid not in record["labels"]:
        return
    if len(question["criteria"]) > 2 and rng.random() < config.option_subset:
        _option_subset(record, qid, rng)
    style = rng.choice(RENAME_STYLES) if not opaque and rng.random() < config.rename_options else None
    renamed = style is not None and _rename_options(record, qid, rng, style)
    # Without a meaningful name, a description is the option's only meaning: keep it.
    if not opaque and not (renamed and style == "numbered") and config.description_dropout > 0:
        _drop_descriptions(record, qid, rng, config.description_dropout)
    if rng.random() < config.shuffle_options:
        _shuffle_options(record, qid, rng)


# --------------------------------------------------------------------------- options


def _option_subset(record: dict[str, Any], qid: str, rng: random.Random) -> None:
    criteria = record["questions"][qid]["criteria"]
    true = record["labels"][qid]
    spec = DATASETS.get((record.get("meta") or {}).get("dataset", ""))
    pinned = {true, *(name for name in (spec.always_keep if spec else ()) if name in criteria)}
    others = [name for name in criteria if name not in pinned]
    size = rng.randint(min(len(criteria), max(2, len(pinned))), len(criteria))
    keep = pinned | set(rng.sample(others, size - len(pinned)))
    record["questions"][qid]["criteria"] = {name: d for name, d in criteria.items() if name in keep}
    _note(record, f"option_subset:{qid}:{size}")


def _shuffle_options(record: dict[str, Any], qid: str, rng: random.Random) -> None:
    items = list(record["questions"][qid]["criteria"].items())
    rng.shuffle(items)
    record["questions"][qid]["criteria"] = dict(items)
    _note(record, f"shuffle_options:{qid}")


def _drop_descriptions(record: dict[str, Any], qid: str, rng: random.Random, probability: float) -> None:
    criteria = record["questions"][qid]["criteria"]
    dropped = 0
    for name in criteria:
        if criteria[name] is not None and rng.random() < probability:
            criteria[name] = None
            dropped += 1
    if dropped:
        _note(record, f"drop_descriptions:{qid}:{dropped}")


def renamed_option(name: str, style: str, number: int = 0) -> str:
    """An option name rewritten in a style: ``title``, ``kebab``, ``upper`` or ``numbered``.

    Example:
        >>> [renamed_option("card_arrival", s, 17) for s in RENAME_STYLES]
        ['Card arrival', 'card-arrival', 'option_17', 'CARD ARRIVAL']
    """
    words = [w for w in re.split(r"[_\-\s]+", name) if w]
    if style == "numbered":
        return f"option_{number}"
    if not words:
        return name
    if style == "title":
        return " ".join(words).capitalize()
    if style == "kebab":
        return "-".join(w.lower() for w in words)
    if style == "upper":
        return " ".join(words).upper()
    raise ValueError(f"unknown rename style {style!r}; allowed: {', '.join(RENAME_STYLES)}")


def _rename_options(record: dict[str, Any], qid: str, rng: random.Random, style: str) -> bool:
    question = record["questions"][qid]
    names = list(question["criteria"])
    numbers = rng.sample(range(1, max(len(names) * 2, 10) + 1), len(names))
    mapping = {name: renamed_option(name, style, n) for name, n in zip(names, numbers)}
    if len(set(mapping.values())) != len(names):
        return False
    question["criteria"] = {mapping[name]: d for name, d in question["criteria"].items()}
    record["labels"][qid] = mapping[record["labels"][qid]]
    question["instructions"] = _rename_in_text(question["instructions"], mapping)
    _note(record, f"rename:{qid}:{style}")
    return True


def _rename_in_text(text: Any, mapping: Mapping[str, str]) -> Any:
    # Instructions sometimes name an option ("choose oos if ..."); keep them pointing at it.
    if not isinstance(text, str):
        return text
    for old, new in mapping.items():
        text = re.sub(rf"(?<![\w-]){re.escape(old)}(?![\w-])", new, text)
    return text


# --------------------------------------------------------------------------- questions


def _shuffle_questions(record: dict[str, Any], rng: random.Random) -> None:
    ids = list(record["questions"])
    rng.shuffle(ids)
    record["questions"] = {qid: record["questions"][qid] for qid in ids}
    record["labels"] = {qid: record["labels"][qid] for qid in ids if qid in record["labels"]}
    _note(record, "shuffle_questions")


def _question_subset(record: dict[str, Any], rng: random.Random) -> None:
    ids = list(record["questions"])
    keep = set(rng.sample(ids, rng.randint(1, len(ids))))
    record["questions"] = {qid: q for qid, q in record["questions"].items() if qid in keep}
    record["labels"] = {qid: label for qid, label in record["labels"].items() if qid in keep}
    _note(record, f"question_subset:{len(keep)}")


def _paraphrase(record: dict[str, Any], rng: random.Random) -> None:
    variants = instruction_variants(record)
    spec = DATASETS.get((record.get("meta") or {}).get("dataset", ""))
    if not variants or spec is None or spec.question_id not in record["questions"]:
        return
    question = record["questions"][spec.question_id]
    if question.get("type") != spec.kind:
        return
    question["instructions"] = rng.choice(variants)
    _note(record, f"paraphrase:{spec.question_id}")


# --------------------------------------------------------------------------- derived nouls

_ABOUT_TEMPLATES = (
    "Is this about: {description}?",
    'Does this description fit the message: "{description}"?',
    "Is the following the case here: {description}?",
)
_ANSWER_TEMPLATES = (
    '{instructions} Is the answer "{name}"{detail}?',
    'Question: {instructions} Would "{name}"{detail} be the right answer?',
)


def _choice_ids(record: Mapping[str, Any]) -> list[str]:
    return [
        qid
        for qid, q in record["questions"].items()
        if q.get("type") == "choice" and qid in record["labels"] and len(q.get("criteria") or {}) >= 2
    ]


def derived_instruction(question: Mapping[str, Any], option: str, rng: random.Random, about: bool = False) -> str:
    """A yes/no instruction asking whether ``option`` is the answer to a choice question.

    With ``about`` (intent-like sets, whose descriptions describe the message) and a
    description, it asks "Is this about: <description>?"; otherwise it repeats the choice's
    instruction and asks whether the option (with its description, if any) is the answer.

    Example:
        >>> import random
        >>> q = {"type": "choice", "instructions": "Which team?", "criteria": {"billing": None, "tech": None}}
        >>> derived_instruction(q, "billing", random.Random(0))
        'Question: Which team? Would "billing" be the right answer?'
    """
    description = (question.get("criteria") or {}).get(option)
    text = description.strip().rstrip(".") if isinstance(description, str) else ""
    if about and text:
        lowered = text[0].lower() + text[1:] if text[1:2].islower() else text
        return rng.choice(_ABOUT_TEMPLATES).format(description=lowered)
    instructions = question.get("instructions")
    instructions = instructions if isinstance(instructions, str) else str(instructions)
    detail = f" ({text})" if text else ""
    return rng.choice(_ANSWER_TEMPLATES).format(instructions=instructions.strip(), name=option, detail=detail)


def expand_with_derived_nouls(record: Mapping[str, Any], rng: random.Random, k: int) -> dict[str, Any]:
    """A copy of a record with up to ``k`` yes/no questions derived from one of its choice labels.

    Each derived noul asks about the true option (label true) or a random other option (label
    false) with even odds; at most one can be true and no option is asked twice. Ids are
    ``check_1``, ``check_2``, … (never clashing with existing ids). Records without a labelled
    choice come back unchanged (as a copy).

    Example:
        >>> import random
        >>> r = {"state": "where is my card?", "labels": {"intent": "card_arrival"},
        ...      "questions": {"intent": {"type": "choice", "instructions": "Which request?",
        ...          "criteria": {"card_arrival": "The customer waits for a new card.", "lost_card": "The card is lost."}}}}
        >>> out = expand_with_derived_nouls(r, random.Random(3), 2)
        >>> sorted(out["labels"].values(), key=str)
        [False, True, 'card_arrival']
    """
    out = copy_record(record)
    choices = _choice_ids(out)
    if not choices or k <= 0:
        return out
    qid = rng.choice(choices)
    question = out["questions"][qid]
    true = out["labels"][qid]
    others = [name for name in question["criteria"] if name != true]
    rng.shuffle(others)
    asked: list[tuple[str, bool]] = []
    true_used = False
    for _ in range(k):
        if not true_used and rng.random() < 0.5:
            asked.append((true, True))
            true_used = True
        elif others:
            asked.append((others.pop(), False))
    spec = DATASETS.get((out.get("meta") or {}).get("dataset", ""))
    about = spec is None or "intent" in spec.tags
    numbers = _free_ids(out["questions"], len(asked))
    for new_id, (option, label) in zip(numbers, asked):
        out["questions"][new_id] = {"type": "noul", "instructions": derived_instruction(question, option, rng, about)}
        out["labels"][new_id] = label
    _note(out, f"derived_nouls:{qid}:{len(asked)}")
    return out


def _free_ids(questions: Mapping[str, Any], count: int) -> list[str]:
    ids: list[str] = []
    n = 1
    while len(ids) < count:
        candidate = f"check_{n}"
        if candidate not in questions:
            ids.append(candidate)
        n += 1
    return ids
