"""The torch side of the decision model: the encoder (backbone + LoRA, tokenisation, frozen-embedding
caches), the scorer (routing head, calibration, taught questions) and the optional question reader,
composed into one engine that answers requests. Files on disk are ``checkpoint``'s.

``DecisionEngine`` knows nothing about LangChain; ``ClefDecisionModel`` wraps it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from clef_agents import wire
from clef_agents.model import checkpoint
from clef_agents.model.backbones import Backbone, load_backbone, no_progress_bar
from clef_agents.model.config import ClefConfig
from clef_agents.model.encoder import (
    FORWARD_CHUNK,
    Encoder,
    Truncation,
    cuda_autocast,
    default_device,
    default_lora_targets,
    num_layers,
)
from clef_agents.model.head import RoutingHead
from clef_agents.model.reader import QuestionReader
from clef_agents.model.scorer import (
    HEAD_PRECISIONS,
    EncodedBatch,
    QuestionSchema,
    Scorer,
    cpu_has_native_bf16,
    head_dtype,
    option_texts,
    option_types,
    question_key,
)
from clef_agents.model.taught import TaughtQuestion, TaughtQuestions, pool_features
from clef_agents.model.tool_match import TokenStates

__all__ = [
    "FORWARD_CHUNK",
    "HEAD_PRECISIONS",
    "DecisionEngine",
    "EncodedBatch",
    "Prediction",
    "QuestionSchema",
    "Truncation",
    "cpu_has_native_bf16",
    "default_device",
    "default_lora_targets",
    "head_dtype",
    "num_layers",
    "option_texts",
    "option_types",
    "question_key",
]


@dataclass
class Prediction:
    """One request's answer from ``DecisionEngine.predict``.

    ``probabilities`` holds, per question, the calibrated probabilities over its options in the wire's
    order; ``answered_by`` says per question which part answered: ``taught`` (``clef-agents teach``),
    ``reader`` (the question reader, for questions nobody taught) or ``head`` (the routing head alone).
    """

    probabilities: list[list[float]]
    truncation: Truncation
    input_tokens: int
    answered_by: list[str]

    @property
    def taught(self) -> list[bool]:
        """Per question: whether taught weights answered it."""
        return [part == "taught" for part in self.answered_by]


class DecisionEngine:
    """Encoder (backbone + LoRA) + scorer (routing head, calibration, taught questions) + optional
    question reader, batching requests into padded backbone passes.

    Example:
        >>> engine = DecisionEngine.create(ClefConfig(name="demo", backbone="minilm"))  # doctest: +SKIP
    """

    def __init__(self, config: ClefConfig, backbone: Backbone, device: torch.device | None = None, head_precision: str | None = None):
        self.config = config
        self.encoder = Encoder(config, backbone, device)
        self.scorer = Scorer(config, self.encoder, head_precision)
        self.reader: QuestionReader | None = None

    # ------------------------------------------------------------------ parts

    @property
    def backbone(self) -> Backbone:
        """The encoder's backbone (model and tokenizer)."""
        return self.encoder.backbone

    @property
    def network(self) -> torch.nn.Module:
        """The backbone's model with its LoRA adapter (when the config has one)."""
        return self.encoder.network

    @property
    def device(self) -> torch.device:
        """Where the network and the head run."""
        return self.encoder.device

    @property
    def head(self) -> RoutingHead:
        """The scorer's routing head."""
        return self.scorer.head

    @property
    def taught(self) -> TaughtQuestions:
        """The scorer's taught questions."""
        return self.scorer.taught

    @taught.setter
    def taught(self, taught: TaughtQuestions) -> None:
        self.scorer.taught = taught

    @property
    def head_dtype(self) -> torch.dtype:
        """The dtype of the head's attention blocks at CPU inference."""
        return self.scorer.head_dtype

    @head_dtype.setter
    def head_dtype(self, dtype: torch.dtype) -> None:
        self.scorer.head_dtype = dtype

    # ------------------------------------------------------------------ construction and files

    @classmethod
    def create(cls, config: ClefConfig, backbone: Backbone | None = None, device: torch.device | None = None) -> DecisionEngine:
        """A fresh (untrained) engine for a config; the backbone is loaded from its reference if not given."""
        return cls(config, backbone or load_backbone(config.backbone), device)

    @classmethod
    def load(cls, folder: str | Path, device: torch.device | None = None, head_precision: str | None = None,
             reader: bool = True) -> DecisionEngine:
        """Rebuild an engine from a checkpoint folder (config.json, adapter/, head.safetensors, and the
        question reader when the folder has one and ``reader`` is true); ``head_precision``: one of
        ``HEAD_PRECISIONS`` (default: ``CLEF_AGENTS_HEAD_PRECISION``, else auto).

        Example:
            >>> DecisionEngine.load("clef_agents/checkpoints/mini").config.name  # doctest: +SKIP
            'mini'
        """
        folder = Path(folder)
        config = checkpoint.read_config(folder)
        backbone = load_backbone(checkpoint.resolve_backbone(config.backbone, folder))
        engine = cls(config, backbone, device, head_precision)
        engine.load_weights(folder)
        if reader and checkpoint.has_reader(folder):
            with no_progress_bar():  # the reader reads the backbone again: one "Loading weights" bar per load
                engine.attach_reader(checkpoint.load_reader(folder, engine.device))
        return engine

    def attach_reader(self, reader: QuestionReader | None) -> None:
        """Answer untaught questions with ``reader`` from now on (``None``: with the routing head again)."""
        self.reader = reader

    def load_weights(self, folder: str | Path, strict: bool = True) -> list[str]:
        """Load the adapter and head weights of a checkpoint folder into this engine.

        With ``strict=False`` head parts the folder lacks (e.g. one added since it was trained)
        keep their initial values; their names (``match_state``, ...) are returned.
        """
        if self.config.lora is not None:
            checkpoint.load_adapter(self.network, folder, self.device)
        return self.scorer.load(folder, strict)

    def save(self, folder: str | Path) -> Path:
        """Write config.json, the PEFT adapter and head.safetensors (no pickles, no backbone copy).

        Example:
            >>> engine.save("runs/mini/final")  # doctest: +SKIP
            PosixPath('runs/mini/final')
        """
        folder = Path(folder)
        checkpoint.write_config(self.config, folder)
        if self.config.lora is not None:
            checkpoint.save_adapter(self.network, folder)
        self.scorer.save(folder)
        if self.reader is not None:
            checkpoint.save_reader(self.reader, folder)
        return folder

    # ------------------------------------------------------------------ the encoder's side

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        """Mean-pooled frozen-backbone embeddings of texts (adapters off), cached per text."""
        return self.encoder.embed_frozen(texts)

    def embed_frozen(self, texts: list[str], cache: bool = True) -> torch.Tensor:
        """``Encoder.embed_frozen``: pooled frozen embeddings [N, H], cached or computed afresh."""
        return self.encoder.embed_frozen(texts, cache)

    def embed_tokens_frozen(self, texts: list[str], cache: bool = True) -> list[TokenStates]:
        """``Encoder.embed_tokens_frozen``: each text's token ids and unit frozen token vectors."""
        return self.encoder.embed_tokens_frozen(texts, cache)

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """``Encoder.token_ids``: the token ids ``embed_tokens_frozen`` would read for each text."""
        return self.encoder.token_ids(texts)

    def tokenize_state(self, text: str) -> tuple[list[int], Truncation]:
        """Token ids of a state within ``max_state_tokens``, cut by the configured policy."""
        return self.encoder.tokenize_state(text)

    def state_hidden(self, texts: list[str]) -> list[torch.Tensor]:
        """``Encoder.state_hidden``: final-layer token states [T, H] of state texts (float16, CPU)."""
        return self.encoder.state_hidden(texts)

    def state_features(self, texts: list[str], spec: str) -> torch.Tensor:
        """``Encoder.state_features``: differentiable taught features [B, F] of state texts."""
        return self.encoder.state_features(texts, spec)

    def clear_caches(self) -> None:
        """Forget cached schema and text embeddings (needed after the backbone changes)."""
        self.scorer.clear_schemas()
        self.encoder.clear_caches()

    # ------------------------------------------------------------------ the scorer's side

    def schema(self, question: wire.TextQuestion) -> QuestionSchema:
        """The cached schema tensors of a question (computed once per distinct question)."""
        return self.scorer.schema(question)

    def encode(self, requests: list[tuple[str, list[wire.TextQuestion]]]) -> EncodedBatch:
        """Pack several (state text, questions) requests into padded tensors."""
        token_rows, truncations = zip(*(self.tokenize_state(text) for text, _ in requests))
        input_ids, attention = self.encoder.pad(list(token_rows))
        batch = self.encode_schemas([questions for _, questions in requests])
        batch.input_ids, batch.attention_mask, batch.truncations = input_ids, attention, list(truncations)
        batch.texts = [text for text, _ in requests]
        return batch

    def encode_schemas(self, question_rows: list[list[wire.TextQuestion]]) -> EncodedBatch:
        """The option side of a batch (no state tokens: ``input_ids`` and ``attention_mask`` are empty)."""
        return self.scorer.encode_schemas(question_rows)

    def logits(self, batch: EncodedBatch) -> torch.Tensor:
        """Raw option logits [B, O] for an encoded batch (differentiable when training)."""
        return self.logits_and_features(batch)[0]

    def logits_and_features(self, batch: EncodedBatch, specs: Collection[str] = ()) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Raw option logits [B, O] and, per taught feature spec asked for, the state features [B, F]
        that taught questions read (``taught.pool_features``), from the same backbone pass."""
        mask = batch.attention_mask.to(self.device)
        states = self.encoder.hidden_states(batch.input_ids.to(self.device), mask, every_layer=bool(specs))
        features = {spec: pool_features(states, mask, spec) for spec in specs}
        return self.head_logits(states[-1].float(), mask, batch), features

    def head_logits(self, hidden: torch.Tensor, mask: torch.Tensor, batch: EncodedBatch) -> torch.Tensor:
        """Option logits from given state token states [B, T, H] (e.g. cached ones) and a batch's options."""
        return self.scorer.head_logits(hidden, mask, batch)

    def calibrated_log_probs(
        self,
        logits: torch.Tensor,
        batch: EncodedBatch,
        questions: list[list[wire.TextQuestion]],
        features: Mapping[str, torch.Tensor] | None = None,
        taught: list[list[TaughtQuestion | None]] | None = None,
    ) -> list[list[torch.Tensor]]:
        """Per request, per question: calibrated log-probabilities over that question's options
        (``Scorer.calibrated_log_probs``; ``features`` from ``logits_and_features``)."""
        return self.scorer.calibrated_log_probs(logits, batch, questions, features, taught)

    def taught_entry(self, question: wire.TextQuestion) -> TaughtQuestion | None:
        """The taught weights that answer this question, or None (not taught, or an option never taught)."""
        return self.scorer.taught_entry(question)

    def taught_entries(self, questions: list[list[wire.TextQuestion]]) -> list[list[TaughtQuestion | None]]:
        """``taught_entry`` for every question of every request."""
        return self.scorer.taught_entries(questions)

    @staticmethod
    def taught_specs(taught: list[list[TaughtQuestion | None]]) -> set[str]:
        """The feature specs the given taught entries read (empty when none is taught)."""
        return Scorer.taught_specs(taught)

    # ------------------------------------------------------------------ answering

    @torch.no_grad()
    def predict(self, requests: list[tuple[str, list[wire.TextQuestion]]]) -> list[Prediction]:
        """Calibrated probabilities for many (state text, questions) requests.

        Taught questions answer with their taught weights on the routing head's pass; the others with
        the question reader when one is attached and takes the question (``QuestionReader.accepts``:
        yes/no, and choices and scores with at most its ``max_options`` options; one pass per question,
        reading it with the state; where the reader's ``head_weights`` say so, the head's answer to the
        same question is mixed in), else with the head alone (its cached options make long option
        lists cheap). A request whose questions all go to the reader alone skips the head's pass.

        Example:
            >>> engine.predict([("I was charged twice", [Noul(instructions="Is the customer angry?")])])  # doctest: +SKIP
            [Prediction(probabilities=[[0.62, 0.38]], ...)]
        """
        taught = self.taught_entries([questions for _, questions in requests])
        if self.reader is None:
            return self._predict_head(requests, taught)
        by_reader = [self.read_by_reader(questions, entries) for (_, questions), entries in zip(requests, taught)]
        reader = self.reader
        head_index = [[q for q, flag in enumerate(self.read_by_head(questions, flags)) if flag]
                      for flags, (_, questions) in zip(by_reader, requests)]
        head_rows = [i for i, index in enumerate(head_index) if index]
        head_out = self._predict_head([(requests[i][0], [requests[i][1][q] for q in head_index[i]]) for i in head_rows],
                                      [[taught[i][q] for q in head_index[i]] for i in head_rows]) if head_rows else []
        head_by_row = dict(zip(head_rows, head_out))
        items = [(text, question) for (text, questions), flags in zip(requests, by_reader)
                 for question, flag in zip(questions, flags) if flag]
        read = iter(self.reader.read(items)) if items else iter(())
        out = []
        for i, ((text, _), flags) in enumerate(zip(requests, by_reader)):
            head = head_by_row.get(i)
            from_head = iter(zip(head.probabilities, head.answered_by)) if head else iter(())
            probabilities, parts, tokens, truncation = [], [], 0, head.truncation if head else None
            for flag, question in zip(flags, requests[i][1]):
                weight = reader.head_weight(question) if flag else 0.0
                if not flag or weight > 0:
                    probability, part = next(from_head)
                if not flag:
                    probabilities.append(probability)
                    parts.append(part)
                    continue
                result = next(read)
                probabilities.append(reader.final_answer(question, result.probabilities, probability if weight > 0 else None))
                parts.append("reader")
                tokens += result.input_tokens
                truncation = truncation or Truncation("head_tail", result.state_tokens, result.state_kept)
            tokens += head.input_tokens if head else 0
            out.append(Prediction(probabilities, truncation or self.tokenize_state(text)[1], tokens, parts))
        return out

    def read_by_reader(self, questions: list[wire.TextQuestion],
                       taught: list[TaughtQuestion | None] | None = None) -> list[bool]:
        """Per question: whether ``predict`` answers it with the question reader (attached, not taught,
        and ``QuestionReader.accepts`` it); ``taught`` passes ``taught_entries([questions])[0]`` when known.

        Example:
            >>> engine.read_by_reader([Noul(instructions="Is the customer angry?")])  # doctest: +SKIP
            [True]
        """
        if self.reader is None:
            return [False] * len(questions)
        entries = taught if taught is not None else self.taught_entries([questions])[0]
        return [entry is None and self.reader.accepts(question) for question, entry in zip(questions, entries)]

    def read_by_head(self, questions: list[wire.TextQuestion], by_reader: list[bool] | None = None) -> list[bool]:
        """Per question: whether ``predict`` runs the routing head's pass for it (the head answers it, or
        its answer is mixed into the reader's); ``by_reader`` passes ``read_by_reader(questions)`` when known.

        Example:
            >>> engine.read_by_head([Noul(instructions="Is the customer angry?")])  # doctest: +SKIP
            [False]
        """
        flags = by_reader if by_reader is not None else self.read_by_reader(questions)
        return [not flag or (self.reader is not None and self.reader.head_weight(question) > 0)
                for question, flag in zip(questions, flags)]

    def _predict_head(self, requests: list[tuple[str, list[wire.TextQuestion]]],
                      taught: list[list[TaughtQuestion | None]]) -> list[Prediction]:
        """The routing head's pass (taught questions blended with their taught weights), in padded chunks sorted by length."""
        order = sorted(range(len(requests)), key=lambda i: len(requests[i][0]))
        results: list[Any] = [None] * len(requests)
        for start in range(0, len(order), FORWARD_CHUNK):
            wire.raise_if_cancelled()
            chunk = order[start : start + FORWARD_CHUNK]
            batch = self.encode([requests[i] for i in chunk])
            questions = [requests[i][1] for i in chunk]
            entries = [taught[i] for i in chunk]
            with cuda_autocast(self.device):
                logits, features = self.logits_and_features(batch, self.taught_specs(entries))
            features = {spec: value.float().cpu() for spec, value in features.items()}
            log_probs = self.calibrated_log_probs(logits.float(), batch, questions, features, entries)
            for j, i in enumerate(chunk):
                probs = [lp.exp().cpu().tolist() for lp in log_probs[j]]
                parts = ["taught" if entry is not None else "head" for entry in entries[j]]
                results[i] = Prediction(probs, batch.truncations[j], int(batch.attention_mask[j].sum()), parts)
        return results

    # ------------------------------------------------------------------ training

    def train_mode(self, training: bool) -> None:
        """Switch dropout on (training) or off (inference)."""
        self.encoder.train(training)
        self.scorer.train(training)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """LoRA and head parameters (the backbone itself stays frozen)."""
        return self.encoder.lora_parameters() + list(self.head.parameters())
