"""``ClefDecisionModel``: the local decision model as a LangChain ``BaseDecisionModel``."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from langchain_core.decisions import ClassifierRequest, ClassifierResponse
from pydantic import ConfigDict, PrivateAttr

from clef_agents import wire
from clef_agents.batched import BatchedDecisionModel, prepare_request
from clef_agents.model.config import ClefConfig, HeadSettings, LoraSettings
from clef_agents.model.engine import DecisionEngine
from clef_agents.shipped import RESERVED_NAMES, checkpoint_folder, reader_spec, shipped_checkpoint  # noqa: F401 (still importable from here)
from clef_agents.taught_index import TaughtQuestionInfo


class UntrainedModelWarning(UserWarning):
    """Raised (as a warning) when a model with an untrained head is built or loaded."""


class ClefDecisionModel(BatchedDecisionModel):
    """A frozen backbone + LoRA + routing head that answers every question of a request in one
    prefill pass, with no generation.

    Example:
        >>> from langchain_core.decisions import Choice
        >>> model = ClefDecisionModel.from_pretrained("mini")  # doctest: +SKIP
        >>> q = Choice(instructions="Which team?", criteria={"billing": "Payments", "tech": "Bugs"})
        >>> model.invoke({"state": "I was charged twice", "questions": {"team": q}}).choices["team"].choice  # doctest: +SKIP
        'billing'
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = "clef-agents"
    _engine: DecisionEngine = PrivateAttr()

    def __init__(self, engine: DecisionEngine, **kwargs: Any):
        super().__init__(model=kwargs.pop("model", engine.config.name), **kwargs)
        self._engine = engine
        if not engine.config.trained:
            warnings.warn(
                f"decision model {engine.config.name!r} has an UNTRAINED head: its probabilities mean nothing. "
                "Train it (clef-agents train) or load the shipped default with ClefDecisionModel.from_pretrained('mini').",
                UntrainedModelWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        device: str | None = None,
        head_precision: str | None = None,
        reader: bool = False,
    ) -> ClefDecisionModel:
        """Load a checkpoint folder, or the shipped default by its reserved name ``"mini"``.

        ``head_precision`` ("auto", "float32" or "bfloat16"; default: the ``CLEF_AGENTS_HEAD_PRECISION``
        environment variable, else "auto") sets how the routing head runs on a CPU: "auto" uses
        bfloat16 where the CPU computes it natively, which roughly halves the head's time with
        hundreds of options and moves probabilities by a few thousandths.

        By default every question of a request is answered on one backbone pass over its state: taught
        questions by their taught weights, the others by the routing head. ``reader=True`` (or a name
        ending in ``+reader``, e.g. ``"mini+reader"``) is the precise mode: the checkpoint's question
        reader answers the untaught questions it takes, one pass each over question, options and state,
        up to 9 times slower for untaught answers a little better than the head's (docs/measured.md).

        Example:
            >>> ClefDecisionModel.from_pretrained("mini").model  # doctest: +SKIP
            'mini'
        """
        import torch

        name, with_reader = reader_spec(str(name_or_path)) if isinstance(name_or_path, str) else (name_or_path, False)
        engine = DecisionEngine.load(
            checkpoint_folder(name),
            torch.device(device) if device else None,
            head_precision,
            reader=reader or with_reader,
        )
        return cls(engine)

    @classmethod
    def from_backbone(
        cls,
        backbone: str = "minilm",
        *,
        name: str = "untrained",
        lora: LoraSettings | None = None,
        head: HeadSettings | None = None,
        max_state_tokens: int = 256,
        device: str | None = None,
        backbone_object: Any | None = None,
    ) -> ClefDecisionModel:
        """A new model with an untrained head on a backbone reference (warns: it is untrained).

        ``backbone_object`` may be an already loaded ``Backbone`` (used by tests with tiny models).

        Example:
            >>> ClefDecisionModel.from_backbone("minilm")  # doctest: +SKIP
        """
        import torch

        config = ClefConfig(
            name=name,
            backbone=backbone,
            lora=lora or LoraSettings(),
            head=head or HeadSettings(),
            max_state_tokens=max_state_tokens,
        )
        engine = DecisionEngine.create(config, backbone_object, torch.device(device) if device else None)
        return cls(engine)

    def save_pretrained(self, path: str | Path) -> Path:
        """Write the checkpoint folder (config.json, adapter/, head.safetensors).

        Example:
            >>> model.save_pretrained("out/my-model")  # doctest: +SKIP
        """
        return self._engine.save(path)

    @property
    def engine(self) -> DecisionEngine:
        """The torch engine (for training, calibration and benchmarks)."""
        return self._engine

    @property
    def config(self) -> ClefConfig:
        """The checkpoint config."""
        return self._engine.config

    @property
    def taught_questions(self) -> list[TaughtQuestionInfo]:
        """What this model was taught (``clef-agents teach``): per taught question its type, wording,
        options and held-out figures, as its checkpoint's ``taught.json`` stores them (empty when
        nothing was taught). A request uses the taught weights when it asks the same type and
        wording (case and spacing aside) with taught option names, or rewords a choice question with the
        same options (cosine at least ``model.taught.REWORDED_TOLERANCE``). ``clef-agents taught`` prints them.

        Example:
            >>> [(q.type, q.instructions) for q in ClefDecisionModel.from_pretrained("mini").taught_questions][2]  # doctest: +SKIP
            ('noul', 'Is this SMS message spam?')
        """
        return [
            TaughtQuestionInfo.from_stored(
                {"type": q.kind, "instructions": q.instructions, "names": q.names, "report": q.report}
            )
            for q in self._engine.taught.questions.values()
        ]

    # ------------------------------------------------------------------ BatchedDecisionModel

    def _classify_many(self, requests: list[ClassifierRequest]) -> list[ClassifierResponse | Exception]:
        """Answer many requests with one padded forward; invalid ones come back as exceptions."""
        prepared: list[tuple[str, list[str], list[wire.TextQuestion]] | Exception] = []
        for request in requests:
            try:
                prepared.append(prepare_request(request))
            except wire.InvalidRequestError as exc:
                prepared.append(exc)
        valid = [p for p in prepared if not isinstance(p, Exception)]
        predictions = iter(self._engine.predict([(text, qs) for text, _, qs in valid]) if valid else [])
        return [p if isinstance(p, Exception) else self._respond(p, next(predictions)) for p in prepared]

    def _respond(
        self, prepared: tuple[str, list[str], list[wire.TextQuestion]], prediction: Any
    ) -> wire.DecisionResponse:
        _, ids, questions = prepared
        answers = {qid: wire.to_answer(q, p) for qid, q, p in zip(ids, questions, prediction.probabilities)}
        extensions: dict[str, Any] = {"x_truncation": prediction.truncation.as_dict()}
        taught = [qid for qid, part in zip(ids, prediction.answered_by) if part == "taught"]
        if taught:
            extensions["x_taught"] = taught
        read = [qid for qid, part in zip(ids, prediction.answered_by) if part == "reader"]
        if read:
            extensions["x_reader"] = read
        untaught = [qid for qid, part in zip(ids, prediction.answered_by) if part != "taught"]
        if untaught:
            extensions["x_untaught"] = untaught
        if not self._engine.config.trained:
            extensions["x_untrained"] = True
        return wire.DecisionResponse(
            model=self.model,
            answers=answers,
            usage={"input_tokens": prediction.input_tokens, "output_tokens": 0},
            extensions=extensions,
        )
