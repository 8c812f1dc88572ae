"""The parts that answer questions, behind one interface.

``DecisionEngine.predict`` routes every question of a request through a table (``DecisionEngine.route``) to
the parts that read it, and asks each part once for all the questions routed to it over many requests:

- ``HeadPart``: one backbone pass over each request's state; the routing head scores every option of
  every question routed to it at once, and a taught question answers with its taught weights on that
  same pass (``clef-agents teach``);
- ``ReaderPart``: the question reader, one pass per question over question, options and state (the
  precise mode); where its ``head_weights`` say so it mixes in the head's answer to the same question,
  which the head part gave before it (``earlier``).

Example:
    >>> part = HeadPart(encoder, scorer)  # doctest: +SKIP
    >>> part.answer([Job(0, "I was charged twice", [Asked(0, question, None)])], {})[0].answered_by  # doctest: +SKIP
    ['head']
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from clef_agents import wire
from clef_agents.model.encoder import FORWARD_CHUNK, Encoder, Truncation, cuda_autocast
from clef_agents.model.reader import QuestionReader
from clef_agents.model.scorer import EncodedBatch, Scorer
from clef_agents.model.taught import TaughtQuestion, pool_features


@dataclass(frozen=True)
class Asked:
    """One question of a request as a part receives it: its place in the request, the question, and its
    taught weights (None: nobody taught it)."""

    index: int
    question: wire.TextQuestion
    taught: TaughtQuestion | None


@dataclass(frozen=True)
class Job:
    """The questions of one request that a part answers, with the request's place and state text."""

    request: int
    text: str
    asked: Sequence[Asked]


@dataclass
class Reply:
    """A part's answers to one job: probabilities per question in the order asked, which part answered
    each (``taught``, ``head`` or ``reader``), tokens read, and how the state was cut (None: not read)."""

    probabilities: list[list[float]]
    answered_by: list[str]
    input_tokens: int
    truncation: Truncation | None


Earlier = Mapping[tuple[int, int], list[float]]
"""Answers given before a part runs, by (request, question index)."""


class Part(Protocol):
    """What answers questions: all the jobs routed to it at once, one reply per job."""

    def answer(self, jobs: Sequence[Job], earlier: Earlier) -> list[Reply]: ...


class HeadPart:
    """The routing head (and the taught weights) on one backbone pass per request, in padded chunks
    sorted by length.

    Example:
        >>> HeadPart(encoder, scorer).answer([Job(0, "refund me", [Asked(0, question, None)])], {})  # doctest: +SKIP
    """

    def __init__(self, encoder: Encoder, scorer: Scorer):
        self.encoder = encoder
        self.scorer = scorer

    def encode(self, requests: Sequence[tuple[str, Sequence[wire.TextQuestion]]]) -> EncodedBatch:
        """Pack several (state text, questions) requests into padded tensors."""
        token_rows, truncations = zip(*(self.encoder.tokenize_state(text) for text, _ in requests))
        input_ids, attention = self.encoder.pad(list(token_rows))
        batch = self.scorer.encode_schemas([list(questions) for _, questions in requests])
        batch.input_ids, batch.attention_mask, batch.truncations = input_ids, attention, list(truncations)
        batch.texts = [text for text, _ in requests]
        return batch

    def logits_and_features(
        self, batch: EncodedBatch, specs: Collection[str] = ()
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Raw option logits [B, O] and, per taught feature spec asked for, the state features [B, F]
        that taught questions read (``taught.pool_features``), from the same backbone pass."""
        device = self.encoder.device
        mask = batch.attention_mask.to(device)
        states = self.encoder.hidden_states(batch.input_ids.to(device), mask, every_layer=bool(specs))
        features = {spec: pool_features(states, mask, spec) for spec in specs}
        return self.scorer.head_logits(states[-1].float(), mask, batch), features

    def answer(self, jobs: Sequence[Job], earlier: Earlier) -> list[Reply]:
        """Every job's questions on one pass over its state (``earlier`` is not read: the head goes first)."""
        order = sorted(range(len(jobs)), key=lambda i: len(jobs[i].text))
        replies: list[Reply | None] = [None] * len(jobs)
        for start in range(0, len(order), FORWARD_CHUNK):
            wire.raise_if_cancelled()
            chunk = [jobs[i] for i in order[start : start + FORWARD_CHUNK]]
            for i, reply in zip(order[start : start + FORWARD_CHUNK], self._answer_chunk(chunk)):
                replies[i] = reply
        return [reply for reply in replies if reply is not None]

    def _answer_chunk(self, chunk: Sequence[Job]) -> list[Reply]:
        questions = [[a.question for a in job.asked] for job in chunk]
        entries = [[a.taught for a in job.asked] for job in chunk]
        batch = self.encode([(job.text, qs) for job, qs in zip(chunk, questions)])
        with cuda_autocast(self.encoder.device):
            logits, features = self.logits_and_features(batch, Scorer.taught_specs(entries))
        features = {spec: value.float().cpu() for spec, value in features.items()}
        log_probs = self.scorer.calibrated_log_probs(logits.float(), batch, questions, features, entries)
        return [
            Reply(
                [lp.exp().cpu().tolist() for lp in log_probs[j]],
                ["taught" if entry is not None else "head" for entry in entries[j]],
                int(batch.attention_mask[j].sum()),
                batch.truncations[j],
            )
            for j in range(len(chunk))
        ]


class ReaderPart:
    """The question reader: one pass per question (several for long option lists), the head's answer
    mixed in where the reader's ``head_weights`` say so (given in ``earlier``).

    Example:
        >>> ReaderPart(reader).answer([Job(0, "refund me", [Asked(0, question, None)])], {})  # doctest: +SKIP
    """

    def __init__(self, reader: QuestionReader):
        self.reader = reader

    def mixes_head(self, question: wire.TextQuestion) -> bool:
        """Whether the head's answer to ``question`` is mixed into the reader's."""
        return self.reader.head_weight(question) > 0

    def answer(self, jobs: Sequence[Job], earlier: Earlier) -> list[Reply]:
        """Every job's questions read with its state, all passes padded together."""
        read = iter(self.reader.read([(job.text, a.question) for job in jobs for a in job.asked]))
        replies = []
        for job in jobs:
            probabilities, tokens, truncation = [], 0, None
            for asked in job.asked:
                result = next(read)
                head = earlier.get((job.request, asked.index)) if self.mixes_head(asked.question) else None
                probabilities.append(self.reader.final_answer(asked.question, result.probabilities, head))
                tokens += result.input_tokens
                truncation = truncation or Truncation("head_tail", result.state_tokens, result.state_kept)
            replies.append(Reply(probabilities, ["reader"] * len(job.asked), tokens, truncation))
        return replies
