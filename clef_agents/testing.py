"""A fake ``BaseDecisionModel`` for tests of graphs, tools and servers (no torch needed).

It answers from a script or from a function, validates requests with the same contract module
as the real model, and counts its calls so a test can prove a node did not classify twice.

Example:
    >>> from langchain_core.decisions import Noul
    >>> fake = FakeDecisionModel(answers={"urgent": 0.9})
    >>> fake.invoke({"state": "site down", "questions": {"urgent": Noul(instructions="Urgent?")}}).nouls["urgent"].noul
    0.9
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.decisions import BaseDecisionModel, ClassifierResponse, Question, State
from pydantic import ConfigDict, Field, PrivateAttr

from clef_agents import wire

ScriptedValue = float | str | int | bool | Mapping[str, float] | Sequence[float]
"""What a script may say for one question: a noul probability, a label (gets ``confidence``
of the mass), a mapping option → weight, or a full probability vector."""

AnswerFunction = Callable[[Any, dict[str, wire.TextQuestion]], Mapping[str, ScriptedValue]]


class FakeDecisionModel(BaseDecisionModel):
    """A deterministic decision model driven by a script, a function, or a hash of the input.

    - ``answers``: question id → scripted value (see ``ScriptedValue``); used for every call.
    - ``answer_fn``: ``(state, questions) -> {qid: value}``; wins over ``answers``.
    - questions neither covers get probabilities derived from a hash of (state, question text),
      so answers are stable, id- and order-invariant, and differ between inputs.
    - ``error``: raise this exception on every call (to test fail-closed paths).
    - ``untaught``: question ids the response says were answered without taught weights
      (``x_untaught``, as ``mini`` says it), where the request asks them.

    Example:
        >>> from langchain_core.decisions import Choice
        >>> q = Choice(instructions="Team?", criteria={"billing": None, "tech": None})
        >>> FakeDecisionModel(answers={"team": "tech"}).invoke({"state": "x", "questions": {"team": q}}).choices["team"].choice
        'tech'
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = "fake"
    answers: dict[str, Any] = Field(default_factory=dict)
    answer_fn: AnswerFunction | None = None
    confidence: float = 0.9
    error: Exception | None = None
    untaught: list[str] = Field(default_factory=list)
    _calls: list[tuple[Any, dict[str, Any]]] = PrivateAttr(default_factory=list)

    @property
    def _provider(self) -> str:
        return "clef_agents_fake"

    @property
    def calls(self) -> list[tuple[Any, dict[str, Any]]]:
        """Every (state, questions) this model was asked, in order."""
        return self._calls

    def _classify(self, state: State, questions: dict[str, Question]) -> ClassifierResponse:
        wire.check_state(state)
        typed = wire.validate_questions(questions)
        self._calls.append((state, typed))
        if self.error is not None:
            raise self.error
        scripted = dict(self.answers)
        if self.answer_fn is not None:
            scripted.update(self.answer_fn(state, typed))
        answers: dict[str, Any] = {}
        for qid, q in typed.items():
            wire.raise_if_cancelled()
            answers[qid] = wire.to_answer(
                q, self._probabilities(q, scripted[qid]) if qid in scripted else _hashed(state, q)
            )
        text = wire.state_text(state)
        usage = {"input_tokens": len(text.split()), "output_tokens": 0}
        untaught = [qid for qid in typed if qid in self.untaught]
        if untaught:
            return wire.DecisionResponse(
                model=self.model, answers=answers, usage=usage, extensions={"x_untaught": untaught}
            )
        return ClassifierResponse(model=self.model, answers=answers, usage=usage)

    def _probabilities(self, question: wire.TextQuestion, value: ScriptedValue) -> list[float]:
        names = wire.option_names(question)
        if isinstance(value, Mapping):
            return [float(value.get(name, value.get(int(name) if name.isdigit() else name, 0.0))) for name in names]
        if isinstance(value, Sequence) and not isinstance(value, str):
            return [float(v) for v in value]
        if isinstance(question, wire.Noul) and isinstance(value, float):
            return [value, 1.0 - value]
        index = wire.label_index(question, value)
        rest = (1.0 - self.confidence) / (len(names) - 1)
        return [self.confidence if i == index else rest for i in range(len(names))]


def _hashed(state: Any, question: wire.TextQuestion) -> list[float]:
    text = wire.state_text(state) + "\x00" + wire.content_text(question.instructions)
    weights = []
    for name, description in _option_texts(question):
        digest = hashlib.sha256(f"{text}\x00{name}\x00{description}".encode()).digest()
        weights.append(1.0 + digest[0] / 32.0)
    return weights


def _option_texts(question: wire.TextQuestion) -> list[tuple[str, str]]:
    if isinstance(question, wire.Choice):
        return [(name, wire.content_text(desc)) for name, desc in question.criteria.items()]
    if isinstance(question, wire.Score):
        return [(str(i), wire.content_text(desc)) for i, desc in enumerate(question.criteria)]
    return [(name, "") for name in wire.NOUL_OPTIONS]
