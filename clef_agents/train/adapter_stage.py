"""The ``adapter`` training stage: LoRA alone, taught by linear probes on pooled states.

The ``full`` stage trains LoRA through the routing head, which reads every option's text and costs
most of a step. This stage trains the adapter on what the taught parts read instead: for every
question that recurs in the records with the same instructions and options (an intent set, a spam
or sentiment question; not an inference pair whose hypothesis is in the question), a linear layer
on the state's ``pool_features`` predicts the label, and the adapter learns to make those pooled
states separate the labels. The probes are thrown away afterwards; the head is not trained here and
no longer fits the new states, so the ``match`` and ``head`` stages follow (``--init`` this run), and
teaching after them. Several times more records per minute than ``full`` on a CPU, so a wider
adapter (``--lora-layers all``) can see every intent and sentiment record more than once.

Example:
    >>> from clef_agents.train.adapter_stage import probe_questions
    >>> q = {"spam": {"type": "noul", "instructions": "Is this SMS spam?"}}
    >>> records = [{"state": f"text {i}", "questions": q, "labels": {"spam": i % 2 == 0}} for i in range(4)]
    >>> [n for n in probe_questions(records, min_records=3).values()]
    [2]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from clef_agents import wire
from clef_agents.model.engine import DecisionEngine
from clef_agents.model.scorer import question_key
from clef_agents.model.taught import FEATURES, SCALE, feature_size
from clef_agents.records import Example, record_to_example

MIN_PROBE_RECORDS = 20
"""A question needs this many training records (same instructions and options) to get a probe."""
MICRO_BATCH = 8
"""Examples per length-sorted micro-batch: the mixture's states run from a few words to a 128-token tool
list, so small micro-batches pad less (30-step runs on the ``mini`` mixture, 2 cores, batch 32: 31
examples/s in two micro-batches of 16, 46 in four of 8, 48 in eight of 4)."""


def probe_questions(records: Sequence[dict[str, Any]], min_records: int = MIN_PROBE_RECORDS) -> dict[str, int]:
    """``question_key`` → number of options, for every question asked in at least ``min_records`` records."""
    counts: Counter[str] = Counter()
    sizes: dict[str, int] = {}
    for record in records:
        for question in wire.validate_questions(record["questions"]).values():
            key = question_key(question)
            counts[key] += 1
            sizes[key] = len(wire.option_names(question))
    return {key: sizes[key] for key, count in counts.items() if count >= min_records}


class Probes(torch.nn.Module):
    """One linear layer per probed question, over ``pool_features`` (``FEATURES``) of the state."""

    def __init__(self, questions: dict[str, int], engine: DecisionEngine, features: str = FEATURES):
        super().__init__()
        if not questions:
            raise ValueError(
                "no question recurs often enough to probe: the adapter stage needs records whose questions "
                f"repeat (same instructions and options) at least {MIN_PROBE_RECORDS} times"
            )
        self.features = features
        size = feature_size(features, engine.backbone.hidden_size, engine.encoder.num_layers)
        self.index = {key: i for i, key in enumerate(sorted(questions))}
        self.layers = torch.nn.ModuleList(torch.nn.Linear(size, questions[key]) for key in sorted(questions))

    def logits(self, features: torch.Tensor, key: str) -> torch.Tensor:
        """Unit features [B, F], scaled as taught questions scale them → logits [B, n] of the question with that key."""
        return self.layers[self.index[key]](features * SCALE)

    def keeps(self, question: wire.TextQuestion) -> str | None:
        """The question's key when it has a probe, else None."""
        key = question_key(question)
        return key if key in self.index else None


def probed_records(records: Sequence[dict[str, Any]], probes: Probes) -> list[dict[str, Any]]:
    """The records that ask at least one probed question."""
    return [r for r in records if any(probes.keeps(q) for q in wire.validate_questions(r["questions"]).values())]


def probe_loss(
    engine: DecisionEngine, probes: Probes, examples: Sequence[Example], label_smoothing: float
) -> torch.Tensor:
    """Mean label-smoothed cross-entropy of every probed question of the examples (differentiable)."""
    features = engine.state_features([text for text, _, _ in examples], probes.features)
    terms = []
    for row, (_, questions, gold) in enumerate(examples):
        for question, target in zip(questions, gold):
            key = probes.keeps(question)
            if key is not None:
                logits = probes.logits(features[row : row + 1], key)
                terms.append(
                    F.cross_entropy(
                        logits, torch.tensor([target], device=logits.device), label_smoothing=label_smoothing
                    )
                )
    if not terms:
        return features.sum() * 0.0
    return torch.stack(terms).mean()


def accumulate(
    engine: DecisionEngine,
    probes: Probes,
    examples: list[Example],
    label_smoothing: float,
    micro_batch: int = MICRO_BATCH,
) -> torch.Tensor:
    """Forward/backward in length-sorted micro-batches of at most ``micro_batch`` examples, gradients
    summed so the step equals one pass over the whole batch; returns the batch loss (detached)."""
    ordered = sorted(examples, key=lambda ex: len(ex[0]))
    size = max(1, min(micro_batch, len(ordered)))
    total = torch.zeros(())
    for start in range(0, len(ordered), size):
        part = ordered[start : start + size]
        loss = probe_loss(engine, probes, part, label_smoothing) * (len(part) / len(ordered))
        loss.backward()
        total = total + loss.detach()
    return total


@torch.no_grad()
def probe_accuracy(
    engine: DecisionEngine, probes: Probes, records: Sequence[dict[str, Any]], chunk: int = 64
) -> dict[str, Any]:
    """Held-out accuracy of the probes, per question (by its instructions) and over all probed answers."""
    examples = [record_to_example(r) for r in probed_records(records, probes)]
    hits: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    engine.network.eval()
    for start in range(0, len(examples), chunk):
        part = examples[start : start + chunk]
        features = engine.state_features([text for text, _, _ in part], probes.features)
        for row, (_, questions, gold) in enumerate(part):
            for question, target in zip(questions, gold):
                key = probes.keeps(question)
                if key is not None:
                    seen[question.instructions] += 1
                    hits[question.instructions] += int(probes.logits(features[row : row + 1], key).argmax() == target)
    per_question = {text: hits[text] / seen[text] for text in seen}
    total = sum(seen.values())
    return {"accuracy": sum(hits.values()) / total if total else None, "answers": total, "per_question": per_question}
