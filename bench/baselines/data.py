"""Benchmark requests: the decision records the model sees (``clef_agents.train.datasets.load_records``, the
records training and evaluation use), sampled with a seed.

Example:
    >>> items = sample_items("sms_spam", n=3, seed=0)  # doctest: +SKIP
    >>> items[0].request["questions"]  # doctest: +SKIP
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from clef_agents import wire
from clef_agents.train.datasets import load_records

BENCH_DATASETS = ("banking77", "clinc150", "sms_spam", "sst5", "bfcl_relevance")


@dataclass
class BenchItem:
    """One request of a benchmark with its gold labels (qid → label)."""

    request: dict[str, Any]
    labels: dict[str, Any]
    dataset: str


def sample_items(name: str, n: int, seed: int = 0, split: str = "test") -> list[BenchItem]:
    """A seeded sample of ``n`` records (all of them when ``n`` is larger than the split)."""
    records = load_records(name, split)
    indices = sorted(random.Random(f"{seed}:{name}").sample(range(len(records)), min(n, len(records))))
    return [to_item(records[i], name) for i in indices]


def to_item(record: dict[str, Any], dataset: str) -> BenchItem:
    """Wrap a decision record as a request (state + wire questions) and its labels."""
    questions = wire.validate_questions(record["questions"])
    request = {"state": record["state"], "questions": {qid: wire.question_to_wire(q) for qid, q in questions.items()}}
    return BenchItem(request=request, labels=dict(record["labels"]), dataset=dataset)


# --------------------------------------------------------------------------- option texts


def option_texts(question: wire.TextQuestion) -> list[str]:
    """A short text per option (indexed like ``wire.option_names``) for similarity baselines.

    Example:
        >>> from langchain_core.decisions import Choice
        >>> option_texts(Choice(instructions="Team?", criteria={"card_lost": None, "refund": "money back"}))
        ['card lost', 'refund: money back']
    """
    if isinstance(question, wire.Choice):
        return [_named(name, wire.content_text(desc)) for name, desc in question.criteria.items()]
    if isinstance(question, wire.Score):
        return [wire.content_text(desc) or str(i) for i, desc in enumerate(question.criteria)]
    instructions = wire.content_text(question.instructions)
    criteria = question.criteria
    yes = wire.content_text(criteria.true) if criteria is not None and criteria.true is not None else instructions
    no = (
        wire.content_text(criteria.false)
        if criteria is not None and criteria.false is not None
        else f"No. Not the case: {instructions}"
    )
    return [yes, no]


def _named(name: str, description: str) -> str:
    readable = name.replace("_", " ").strip()
    if not description or description.strip().lower() == readable.lower():
        return readable
    return f"{readable}: {description}"
