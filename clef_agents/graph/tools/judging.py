"""Asking the decision model the gate question, within a time limit, failing closed.

Example:
    >>> from clef_agents.graph.tools.policy import GatePolicy
    >>> from clef_agents.testing import FakeDecisionModel
    >>> judged = ModelJudge(FakeDecisionModel(answers={QUESTION_ID: 0.9})).judge("pay{}", GatePolicy(hold_at=0.2).verdict_for)
    >>> judged.verdict.action
    'hold'
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langchain_core.decisions import BaseDecisionModel, Noul

from clef_agents import wire
from clef_agents.graph.errors import UntaughtQuestionWarning, untaught_question_ids
from clef_agents.graph.tools.policy import (
    DEFAULT_GATE_QUESTION,
    QUESTION_ID,
    GateVerdict,
    failed_verdict,
    gate_probability,
)

DEFAULT_TIMEOUT_S = 30.0
"""Seconds the gate waits for the decision model before it blocks the call."""


class GateTimeoutError(TimeoutError):
    """The decision model did not answer within the gate's ``timeout_s``."""


class UntaughtGateQuestionWarning(UntaughtQuestionWarning):
    """The gate's model answered the gate question without having been taught it (see ``ToolGate.warn_if_untaught``)."""


def call_with_timeout(fn: Callable[[], Any], timeout_s: float | None) -> Any:
    """``fn()`` in a daemon thread (with the caller's context); ``GateTimeoutError`` after ``timeout_s``.
    A hung model keeps its thread, never the gate.

    Example:
        >>> call_with_timeout(lambda: 42, 1.0)
        42
    """
    if timeout_s is None:
        return fn()
    box: dict[str, Any] = {}
    done = threading.Event()
    context = contextvars.copy_context()

    def target() -> None:
        try:
            box["value"] = context.run(fn)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who fails closed
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="clef-tool-gate-judge", daemon=True).start()
    if not done.wait(timeout_s):
        raise GateTimeoutError(f"no answer within {timeout_s:g} s")
    if "error" in box:
        error = box["error"]
        if isinstance(error, Exception):
            raise error
        raise RuntimeError(f"the decision model raised {type(error).__name__}: {error}")
    return box["value"]


@dataclass(frozen=True)
class Judgement:
    """The model's response and the verdict it gives; ``response`` is None when the model failed
    and the verdict blocks (fail closed)."""

    response: Any
    verdict: GateVerdict


class ModelJudge:
    """Asks a ``BaseDecisionModel`` the gate question about a state and turns its answer into a verdict.

    Args:
        model: any ``BaseDecisionModel``; p(yes) = needs approval.
        question: the gate question (``DEFAULT_GATE_QUESTION``: the one the shipped model is taught).
        timeout_s: seconds to wait for the model before blocking (``None``: no limit).
    """

    def __init__(
        self,
        model: BaseDecisionModel,
        question: Noul = DEFAULT_GATE_QUESTION,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ):
        if not isinstance(model, BaseDecisionModel):
            raise TypeError(f"model must be a langchain_core BaseDecisionModel, got {type(model).__name__}")
        if timeout_s is not None and not (
            isinstance(timeout_s, (int, float)) and timeout_s > 0 and math.isfinite(timeout_s)
        ):
            raise ValueError(f"timeout_s must be a positive number of seconds or None, got {timeout_s!r}")
        self.model = model
        self.questions = wire.validate_questions({QUESTION_ID: question})
        self.timeout_s = timeout_s
        self._warned_untaught = False

    def judge(self, state: str, verdict_for: Callable[[float], GateVerdict]) -> Judgement:
        """Ask the model about ``state``; ``verdict_for`` turns p(needs approval) into a verdict. Never raises for a model problem (a model that raises,
        hangs past ``timeout_s``, is cancelled or gives no valid probability blocks)."""
        try:
            response = call_with_timeout(
                lambda: self.model.invoke({"state": state, "questions": self.questions}), self.timeout_s
            )
            return Judgement(response, verdict_for(gate_probability(response)))
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - fail closed: a call that cannot be judged does not run
            return Judgement(None, failed_verdict(exc))

    async def ajudge(self, state: str, verdict_for: Callable[[float], GateVerdict]) -> Judgement:
        """Async ``judge`` (the timeout is ``asyncio.wait_for``; cancelling the caller still cancels)."""
        try:
            response = await asyncio.wait_for(
                self.model.ainvoke({"state": state, "questions": self.questions}), self.timeout_s
            )
            return Judgement(response, verdict_for(gate_probability(response)))
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the run itself is being cancelled: nothing runs
            return Judgement(None, failed_verdict(exc))
        except Exception as exc:  # noqa: BLE001 - fail closed
            return Judgement(None, failed_verdict(exc))

    def warn_if_untaught(self, response: Any, stacklevel: int = 2) -> bool:
        """Warn once (``UntaughtGateQuestionWarning``) when ``response`` says the model answered the gate
        question without taught weights (``x_untaught``); returns whether it says so."""
        untaught = QUESTION_ID in untaught_question_ids(response)
        if untaught and not self._warned_untaught:
            self._warned_untaught = True
            question = self.questions[QUESTION_ID]
            warnings.warn(
                f"ToolGate: model {getattr(response, 'model', '?')!r} was not taught the gate question "
                f"{getattr(question, 'instructions', question)!r:.120}; it answered untaught, "
                "which is close to chance on questions nobody taught (bench/general), and the shipped hold_at was chosen for "
                "the taught DEFAULT_GATE_QUESTION. Keep the default question, or teach yours (clef-agents teach, docs/teaching.md).",
                UntaughtGateQuestionWarning,
                stacklevel=stacklevel,
            )
        return untaught
