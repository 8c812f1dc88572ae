"""The precise tier as a LangChain ``BaseDecisionModel`` (spec ``lm:PATH`` or ``precise``).

Example:
    >>> model = PrefillLMDecisionModel.load("precise")  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.decisions import ClassifierRequest, ClassifierResponse
from pydantic import ConfigDict, PrivateAttr

from clef_agents import wire
from clef_agents.batched import BatchedDecisionModel, prepare_request
from clef_agents.model.precise.model import PrefillLM


class PrefillLMDecisionModel(BatchedDecisionModel):
    """The precise tier as a LangChain ``BaseDecisionModel``: a local instruct LM read in one prefill pass.

    Slower than ``mini`` (about a second a request for a 1.5B model on two CPU cores, far less on a
    GPU) and better at questions nobody taught: use it where a cheap gate escalates.

    Example:
        >>> from langchain_core.decisions import Noul
        >>> model = PrefillLMDecisionModel.load("precise")  # doctest: +SKIP
        >>> model.invoke({"state": "Production is down!", "questions": {"urgent": Noul(instructions="Is this urgent?")}}).nouls["urgent"].noul  # doctest: +SKIP
        0.86
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = "clef-agents-lm"
    _lm: PrefillLM = PrivateAttr()

    def __init__(self, lm: PrefillLM, **kwargs: Any):
        super().__init__(model=kwargs.pop("model", lm.name), **kwargs)
        self._lm = lm

    @classmethod
    def load(cls, reference: str | Path, **settings: Any) -> PrefillLMDecisionModel:
        """The LM ``reference`` names (a folder, a ``.gguf`` file or ``"precise"``; see ``load_causal_lm``).

        Example:
            >>> PrefillLMDecisionModel.load("precise").model  # doctest: +SKIP
            'precise'
        """
        return cls(PrefillLM.load(reference, **settings))

    @property
    def lm(self) -> PrefillLM:
        """The torch side (calibration, logits, prefix cache)."""
        return self._lm

    def _classify_many(self, requests: list[ClassifierRequest]) -> list[ClassifierResponse | Exception]:
        """Answer each request (state read once, its questions together); invalid ones come back as exceptions."""
        out: list[ClassifierResponse | Exception] = []
        for request in requests:
            try:
                out.append(self._answer(request))
            except (wire.InvalidRequestError, ValueError) as exc:
                out.append(exc)
        return out

    def _answer(self, request: ClassifierRequest) -> wire.DecisionResponse:
        text, ids, questions = prepare_request(request)
        probabilities, truncation, tokens = self._lm.predict(text, questions)
        return wire.DecisionResponse(
            model=self.model,
            answers={qid: wire.to_answer(q, p) for qid, q, p in zip(ids, questions, probabilities)},
            usage={"input_tokens": tokens, "output_tokens": 0},
            extensions={"x_truncation": truncation.as_dict()},
        )
