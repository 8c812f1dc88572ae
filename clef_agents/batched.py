"""``BatchedDecisionModel``: the ``BaseDecisionModel`` plumbing the library's models share (no torch).

A subclass answers a list of requests in ``_classify_many`` (a response or an exception per request);
this base turns that into ``invoke`` / ``ainvoke`` / ``batch`` / ``abatch``, so one bad request never takes
the others of its batch down.

Example:
    >>> prepare_request({"state": "site down", "questions": {"q": {"type": "noul", "instructions": "Urgent?"}}})[:2]
    ('site down', ['q'])
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from langchain_core.decisions import (
    BaseDecisionModel,
    ClassifierRequest,
    ClassifierResponse,
    Question,
    State,
)
from langchain_core.runnables import RunnableConfig

from clef_agents import wire

VALIDATED_KEPT = 256
"""Question mappings whose validation ``prepare_request`` remembers (least recently used forgotten first)."""


class ValidatedQuestions:
    """Typed question mappings already checked by ``wire.validate_questions``, remembered by the identity
    of their question objects with a copy of each: a mapping that asks the very same objects again,
    unchanged, is not checked again. A ``DecisionNode`` validates its questions when it is built and
    passes the same objects to its model on every run, so they are validated once.

    Example:
        >>> from langchain_core.decisions import Noul
        >>> memo, asked = ValidatedQuestions(), {"q": Noul(instructions="Urgent?")}
        >>> memo.validate(asked) == memo.validate(asked), memo.hits
        (True, 1)
    """

    def __init__(self, kept: int = VALIDATED_KEPT):
        self.kept = kept
        self.hits = 0
        self._seen: OrderedDict[
            tuple[tuple[str, int], ...], tuple[dict[str, wire.TextQuestion], dict[str, wire.TextQuestion]]
        ] = OrderedDict()

    def validate(self, questions: Any) -> dict[str, wire.TextQuestion]:
        """``wire.validate_questions(questions)``, skipped when the same unchanged objects passed before."""
        key = self._key(questions)
        found = self._seen.get(key) if key is not None else None
        if found is not None and all(questions[qid] is q and q == found[1][qid] for qid, q in found[0].items()):
            self._seen.move_to_end(key)
            self.hits += 1
            return dict(found[0])
        typed = wire.validate_questions(questions)
        if key is not None:
            self._seen[key] = (typed, {qid: q.model_copy(deep=True) for qid, q in typed.items()})
            while len(self._seen) > self.kept:
                self._seen.popitem(last=False)
        return typed

    @staticmethod
    def _key(questions: Any) -> tuple[tuple[str, int], ...] | None:
        if not isinstance(questions, Mapping) or not all(
            isinstance(q, (wire.Noul, wire.Choice, wire.Score)) for q in questions.values()
        ):
            return None
        return tuple((qid, id(q)) for qid, q in questions.items())


_VALIDATED = ValidatedQuestions()


def prepare_request(request: ClassifierRequest) -> tuple[str, list[str], list[wire.TextQuestion]]:
    """The state as text, the question ids and the typed questions of a request, or ``wire.InvalidRequestError``.
    Questions this process validated before, the same objects unchanged, are not checked again (``ValidatedQuestions``)."""
    if not isinstance(request, dict) or "state" not in request or "questions" not in request:
        raise wire.InvalidRequestError(
            [{"loc": ["request"], "msg": "a request needs 'state' and 'questions'", "type": "missing"}]
        )
    wire.check_state(request["state"])
    questions = _VALIDATED.validate(request["questions"])
    return wire.state_text(request["state"]), list(questions), list(questions.values())


class BatchedDecisionModel(BaseDecisionModel):
    """A ``BaseDecisionModel`` whose subclasses implement ``_classify_many`` (see the module docstring).

    Example:
        >>> from clef_agents.tiered import TieredDecisionModel
        >>> issubclass(TieredDecisionModel, BatchedDecisionModel)
        True
    """

    @property
    def _provider(self) -> str:
        return "clef_agents"

    def _classify(self, state: State, questions: dict[str, Question]) -> ClassifierResponse:
        (result,) = self._classify_many([{"state": state, "questions": questions}])
        if isinstance(result, Exception):
            raise result
        return result

    def _classify_many(self, requests: list[ClassifierRequest]) -> list[ClassifierResponse | Exception]:
        raise NotImplementedError

    def batch(
        self,
        inputs: list[ClassifierRequest],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[ClassifierResponse]:
        """Answer many requests through ``_classify_many`` (a refused request raises, or comes back as its
        exception with ``return_exceptions=True``).

        Example:
            >>> model.batch([{"state": "a", "questions": qs}, {"state": "b", "questions": qs}])  # doctest: +SKIP
        """
        if not inputs:
            return []
        return self._batch_with_config(
            self._classify_many, inputs, config, return_exceptions=return_exceptions, run_type="llm"
        )

    async def abatch(
        self,
        inputs: list[ClassifierRequest],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[ClassifierResponse]:
        """Async ``batch``: the work runs in a worker thread."""
        return await asyncio.to_thread(self.batch, inputs, config, return_exceptions=return_exceptions)
