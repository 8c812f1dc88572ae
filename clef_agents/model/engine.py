"""The torch side of the decision model: the encoder (backbone + LoRA, tokenisation, frozen-embedding
caches), the scorer (routing head, calibration, taught questions) and the optional question reader,
composed into one engine that answers requests. Files on disk are ``checkpoint``'s.

``DecisionEngine`` knows nothing about LangChain; ``ClefDecisionModel`` wraps it.
"""

from __future__ import annotations

import shutil
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from clef_agents import wire
from clef_agents.model import checkpoint
from clef_agents.model.backbones import Backbone, load_backbone, no_progress_bar
from clef_agents.model.config import ClefConfig
from clef_agents.model.encoder import (
    FORWARD_CHUNK,
    Encoder,
    Truncation,
    default_device,
    default_lora_targets,
    num_layers,
)
from clef_agents.model.head import RoutingHead
from clef_agents.model.parts import Asked, HeadPart, Job, Part, ReaderPart
from clef_agents.model.reader import READER_CONFIG_FILE, READER_WEIGHTS_FILE, QuestionReader
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
from clef_agents.model.taught import TaughtQuestion, TaughtQuestions
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

    def __init__(
        self,
        config: ClefConfig,
        backbone: Backbone,
        device: torch.device | None = None,
        head_precision: str | None = None,
    ):
        self.config = config
        self.encoder = Encoder(config, backbone, device)
        self.scorer = Scorer(config, self.encoder, head_precision)
        self.head_part = HeadPart(self.encoder, self.scorer)
        self.reader: QuestionReader | None = None
        self.reader_files: Path | None = None  # the folder of a question reader left unloaded, copied by ``save``

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
    def create(
        cls, config: ClefConfig, backbone: Backbone | None = None, device: torch.device | None = None
    ) -> DecisionEngine:
        """A fresh (untrained) engine for a config; the backbone is loaded from its reference if not given."""
        return cls(config, backbone or load_backbone(config.backbone), device)

    @classmethod
    def load(
        cls,
        folder: str | Path,
        device: torch.device | None = None,
        head_precision: str | None = None,
        reader: bool = False,
    ) -> DecisionEngine:
        """Rebuild an engine from a checkpoint folder (config.json, adapter/, head.safetensors);
        ``head_precision``: one of ``HEAD_PRECISIONS`` (default: ``CLEF_AGENTS_HEAD_PRECISION``, else auto).

        ``reader=True`` is the precise mode: the folder's question reader is loaded and answers the
        untaught questions it takes, one pass per question (``route``); the folder must have one.
        Left out (the default), untaught questions are answered on the routing head's one pass, and
        ``save`` still copies the folder's reader files, so a saved checkpoint keeps its precise mode.

        Example:
            >>> DecisionEngine.load("clef_agents/checkpoints/mini").config.name  # doctest: +SKIP
            'mini'
        """
        folder = Path(folder)
        config = checkpoint.read_config(folder)
        if reader and not checkpoint.has_reader(folder):
            raise FileNotFoundError(
                f"{folder} has no question reader ({READER_CONFIG_FILE}, {READER_WEIGHTS_FILE}) "
                "for the precise mode; load it without reader=True"
            )
        backbone = load_backbone(checkpoint.resolve_backbone(config.backbone, folder))
        engine = cls(config, backbone, device, head_precision)
        engine.load_weights(folder)
        if reader:
            with no_progress_bar():  # the reader reads the backbone again: one "Loading weights" bar per load
                engine.attach_reader(checkpoint.load_reader(folder, engine.device))
        elif checkpoint.has_reader(folder):
            engine.reader_files = folder
        return engine

    def attach_reader(self, reader: QuestionReader | None) -> None:
        """Answer untaught questions with ``reader`` from now on, the precise mode (``None``: with the
        routing head again, the default)."""
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
        elif self.reader_files is not None and self.reader_files.resolve() != folder.resolve():
            for name in (READER_CONFIG_FILE, READER_WEIGHTS_FILE):
                shutil.copyfile(self.reader_files / name, folder / name)
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

    def encode(self, requests: list[tuple[str, list[wire.TextQuestion]]]) -> EncodedBatch:
        """Pack several (state text, questions) requests into padded tensors (``HeadPart.encode``)."""
        return self.head_part.encode(requests)

    def encode_schemas(self, question_rows: list[list[wire.TextQuestion]]) -> EncodedBatch:
        """The option side of a batch (no state tokens: ``input_ids`` and ``attention_mask`` are empty)."""
        return self.scorer.encode_schemas(question_rows)

    def logits(self, batch: EncodedBatch) -> torch.Tensor:
        """Raw option logits [B, O] for an encoded batch (differentiable when training)."""
        return self.logits_and_features(batch)[0]

    def logits_and_features(
        self, batch: EncodedBatch, specs: Collection[str] = ()
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Raw option logits [B, O] and, per taught feature spec asked for, the state features [B, F]
        that taught questions read (``HeadPart.logits_and_features``), from the same backbone pass."""
        return self.head_part.logits_and_features(batch, specs)

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
        """The taught weights that answer this question, or None (not taught, or an option never taught); a
        rewording of a taught choice question uses its weights (``Scorer.taught_entry``)."""
        return self.scorer.taught_entry(question)

    def taught_entries(self, questions: list[list[wire.TextQuestion]]) -> list[list[TaughtQuestion | None]]:
        """``taught_entry`` for every question of every request."""
        return self.scorer.taught_entries(questions)

    def closest_taught(self, question: wire.TextQuestion) -> tuple[TaughtQuestion, float] | None:
        """The nearest taught wording a rewording of this question could use, with its cosine
        (``Scorer.closest_taught``; at least ``taught.REWORDED_TOLERANCE`` for ``taught_entry`` to use it).

        Example:
            >>> engine.closest_taught(Choice(instructions="Which intent?", criteria=banking_intents))[1]  # doctest: +SKIP
            0.78
        """
        return self.scorer.closest_taught(question)

    @staticmethod
    def taught_specs(taught: list[list[TaughtQuestion | None]]) -> set[str]:
        """The feature specs the given taught entries read (empty when none is taught)."""
        return Scorer.taught_specs(taught)

    # ------------------------------------------------------------------ answering

    def route(self, question: wire.TextQuestion, taught: TaughtQuestion | None) -> tuple[str, ...]:
        """The parts of ``parts`` that read a question, in order; the last one answers it (a reader after
        the head mixes the head's answer into its own).

        Example:
            >>> engine.route(Noul(instructions="Is the customer angry?"), None)  # doctest: +SKIP
            ('head',)
        """
        if taught is not None:
            return ("taught",)
        if self.reader is not None and self.reader.accepts(question):
            return ("head", "reader") if self.reader.head_weight(question) > 0 else ("reader",)
        return ("head",)

    @property
    def parts(self) -> dict[str, Part]:
        """The route table: each name ``route`` gives, and the part that answers it. Taught questions and
        the head's share one part, so they share one backbone pass over the state."""
        table: dict[str, Part] = {"taught": self.head_part, "head": self.head_part}
        if self.reader is not None:
            table["reader"] = ReaderPart(self.reader)
        return table

    @torch.no_grad()
    def predict(self, requests: list[tuple[str, list[wire.TextQuestion]]]) -> list[Prediction]:
        """Calibrated probabilities for many (state text, questions) requests, whose questions are
        already valid (``wire.validate_questions``).

        Each question goes where ``route`` sends it: a taught question to its taught weights on the
        routing head's pass, an untaught one to the head (its cached options make long option lists
        cheap) or, when a question reader is attached, to the reader if it takes the question
        (``QuestionReader.accepts``: yes/no, and choices and scores with at most its ``max_options``
        options; one pass per question, reading it with the state; where the reader's ``head_weights``
        say so, the head's answer to the same question is mixed in). Each part answers all its
        questions at once; a request none of whose questions needs the head skips the head's pass.

        Example:
            >>> engine.predict([("I was charged twice", [Noul(instructions="Is the customer angry?")])])  # doctest: +SKIP
            [Prediction(probabilities=[[0.62, 0.38]], ...)]
        """
        taught = self.taught_entries([questions for _, questions in requests])
        routes = [
            [self.route(q, entry) for q, entry in zip(questions, entries)]
            for (_, questions), entries in zip(requests, taught)
        ]
        table = self.parts
        answers: dict[tuple[int, int], tuple[list[float], str]] = {}
        tokens = [0] * len(requests)
        truncations: list[Truncation | None] = [None] * len(requests)
        for part in dict.fromkeys(table.values()):  # each part once, in the table's order
            names = {name for name, p in table.items() if p is part}
            jobs = [
                Job(
                    i,
                    text,
                    [
                        Asked(q, question, taught[i][q])
                        for q, question in enumerate(questions)
                        if names & set(routes[i][q])
                    ],
                )
                for i, (text, questions) in enumerate(requests)
            ]
            jobs = [job for job in jobs if job.asked]
            earlier = {key: probabilities for key, (probabilities, _) in answers.items()}
            for job, reply in zip(jobs, part.answer(jobs, earlier) if jobs else []):
                for asked, probabilities, by in zip(job.asked, reply.probabilities, reply.answered_by):
                    answers[(job.request, asked.index)] = (probabilities, by)
                tokens[job.request] += reply.input_tokens
                truncations[job.request] = truncations[job.request] or reply.truncation
        return [
            Prediction(
                [answers[(i, q)][0] for q in range(len(questions))],
                truncations[i] or self.tokenize_state(text)[1],
                tokens[i],
                [answers[(i, q)][1] for q in range(len(questions))],
            )
            for i, (text, questions) in enumerate(requests)
        ]

    def read_by_reader(
        self, questions: list[wire.TextQuestion], taught: list[TaughtQuestion | None] | None = None
    ) -> list[bool]:
        """Per question: whether ``predict`` answers it with the question reader (attached, not taught,
        and ``QuestionReader.accepts`` it); ``taught`` passes ``taught_entries([questions])[0]`` when known.

        Example:
            >>> engine.read_by_reader([Noul(instructions="Is the customer angry?")])  # doctest: +SKIP
            [True]
        """
        entries = taught if taught is not None else self.taught_entries([questions])[0]
        return [self.route(question, entry)[-1] == "reader" for question, entry in zip(questions, entries)]

    def read_by_head(self, questions: list[wire.TextQuestion], by_reader: list[bool] | None = None) -> list[bool]:
        """Per question: whether ``predict`` runs the routing head's pass for it (the head answers it, or
        its answer is mixed into the reader's); ``by_reader`` is accepted for callers that have
        ``read_by_reader(questions)`` (the route decides either way).

        Example:
            >>> engine.read_by_head([Noul(instructions="Is the customer angry?")])  # doctest: +SKIP
            [False]
        """
        entries = self.taught_entries([questions])[0]
        return [
            any(name in ("taught", "head") for name in self.route(question, entry))
            for question, entry in zip(questions, entries)
        ]

    # ------------------------------------------------------------------ training

    def train_mode(self, training: bool) -> None:
        """Switch dropout on (training) or off (inference)."""
        self.encoder.train(training)
        self.scorer.train(training)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """LoRA and head parameters (the backbone itself stays frozen)."""
        return self.encoder.lora_parameters() + list(self.head.parameters())
