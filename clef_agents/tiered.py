"""``TieredDecisionModel``: each question goes to the tier that knows it.

A fast model such as ``mini`` answers the questions it was taught far better and far faster than any
general model, and answers the rest little better than keyword matching. The precise tier (a local
instruct LM, ``clef_agents.model.precise``) reads any question but costs a second or more a request
on a CPU. A tiered model asks the fast model first. The questions it reports as taught (the ``x_taught``
extension) keep its answers; the others are asked of the precise model, about the same state, in one
more request.

No torch here: the tiers are any ``BaseDecisionModel`` (local, remote or fake).

Example:
    >>> from langchain_core.decisions import Noul
    >>> from clef_agents.testing import FakeDecisionModel
    >>> tiered = TieredDecisionModel(FakeDecisionModel(model="fast"), FakeDecisionModel(model="precise", answers={"urgent": 0.8}))
    >>> tiered.invoke({"state": "site down", "questions": {"urgent": Noul(instructions="Urgent?")}}).nouls["urgent"].noul
    0.8
"""

from __future__ import annotations

from typing import Any

from langchain_core.decisions import (
    BaseDecisionModel,
    ClassifierRequest,
    ClassifierResponse,
)
from pydantic import ConfigDict, PrivateAttr

from clef_agents import wire
from clef_agents.batched import BatchedDecisionModel

PRECISE_EXTENSION = "x_precise"
"""Response extension: the ids of the questions the precise tier answered."""


class TieredDecisionModel(BatchedDecisionModel):
    """Taught questions answered by ``fast``, every other question by ``precise`` (see the module docstring).

    Example:
        >>> from clef_agents.loading import load_model
        >>> model = load_model("mini+precise")  # doctest: +SKIP
        >>> model.model  # doctest: +SKIP
        'mini+precise'
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = "tiered"
    _fast: BaseDecisionModel = PrivateAttr()
    _precise: BaseDecisionModel = PrivateAttr()

    def __init__(self, fast: BaseDecisionModel, precise: BaseDecisionModel, **kwargs: Any):
        super().__init__(model=kwargs.pop("model", f"{fast.model}+{precise.model}"), **kwargs)
        self._fast = fast
        self._precise = precise

    @property
    def fast(self) -> BaseDecisionModel:
        """The tier asked first; its taught answers are kept."""
        return self._fast

    @property
    def precise(self) -> BaseDecisionModel:
        """The tier asked about every question the fast tier was not taught."""
        return self._precise

    def _classify_many(self, requests: list[ClassifierRequest]) -> list[ClassifierResponse | Exception]:
        """The fast tier's batch, then one precise batch for the untaught questions; a request that either
        tier refuses comes back as that tier's exception (its other requests are still answered)."""
        first = self._fast.batch(requests, return_exceptions=True)
        follow: list[tuple[int, ClassifierRequest]] = []
        for index, (request, response) in enumerate(zip(requests, first)):
            if isinstance(response, Exception):
                continue
            taught = set(_extensions(response).get("x_taught", []))
            rest = {qid: q for qid, q in request["questions"].items() if qid not in taught}
            if rest:
                follow.append((index, {"state": request["state"], "questions": rest}))
        second = self._precise.batch([r for _, r in follow], return_exceptions=True) if follow else []
        out: list[ClassifierResponse | Exception] = list(first)
        for (index, request), response in zip(follow, second):
            out[index] = (
                response
                if isinstance(response, Exception)
                else self._merge(first[index], response, list(request["questions"]))
            )
        return out

    def _merge(self, fast: ClassifierResponse, precise: ClassifierResponse, asked: list[str]) -> wire.DecisionResponse:
        answers = {**fast.answers, **{qid: precise.answers[qid] for qid in asked}}
        usage = {
            key: int(fast.usage.get(key, 0)) + int(precise.usage.get(key, 0))
            for key in ("input_tokens", "output_tokens")
            if key in fast.usage or key in precise.usage
        }
        extensions = {**_extensions(fast), PRECISE_EXTENSION: asked}
        if "x_truncation" in _extensions(precise):
            extensions["x_precise_truncation"] = _extensions(precise)["x_truncation"]
        return wire.DecisionResponse(model=self.model, answers=answers, usage=usage, extensions=extensions)


def _extensions(response: ClassifierResponse) -> dict[str, Any]:
    return dict(getattr(response, "extensions", None) or {})
