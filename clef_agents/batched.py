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


def prepare_request(request: ClassifierRequest) -> tuple[str, list[str], list[wire.TextQuestion]]:
    """The state as text, the question ids and the typed questions of a request, or ``wire.InvalidRequestError``."""
    if not isinstance(request, dict) or "state" not in request or "questions" not in request:
        raise wire.InvalidRequestError(
            [{"loc": ["request"], "msg": "a request needs 'state' and 'questions'", "type": "missing"}]
        )
    wire.check_state(request["state"])
    questions = wire.validate_questions(request["questions"])
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

    def batch(self, inputs: list[ClassifierRequest], config: RunnableConfig | list[RunnableConfig] | None = None, *,
              return_exceptions: bool = False, **kwargs: Any) -> list[ClassifierResponse]:
        """Answer many requests through ``_classify_many`` (a refused request raises, or comes back as its
        exception with ``return_exceptions=True``).

        Example:
            >>> model.batch([{"state": "a", "questions": qs}, {"state": "b", "questions": qs}])  # doctest: +SKIP
        """
        if not inputs:
            return []
        return self._batch_with_config(self._classify_many, inputs, config, return_exceptions=return_exceptions, run_type="llm")

    async def abatch(self, inputs: list[ClassifierRequest], config: RunnableConfig | list[RunnableConfig] | None = None, *,
                     return_exceptions: bool = False, **kwargs: Any) -> list[ClassifierResponse]:
        """Async ``batch``: the work runs in a worker thread."""
        return await asyncio.to_thread(self.batch, inputs, config, return_exceptions=return_exceptions)
