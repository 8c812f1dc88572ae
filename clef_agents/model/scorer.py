"""The scorer: the routing head, its calibration and the taught questions, answering from the encoder's
token states. It owns the per-question schema cache (option and instruction embeddings, and the
head's option-only outputs at inference).

Example:
    >>> scorer = Scorer(config, encoder)  # doctest: +SKIP
    >>> batch = scorer.encode_schemas([[question]])  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from clef_agents import wire
from clef_agents.model import checkpoint
from clef_agents.model.config import ClefConfig
from clef_agents.model.encoder import Encoder, Truncation
from clef_agents.model.head import (
    OPTION_TYPES,
    OptionCache,
    RoutingHead,
    level_positions,
)
from clef_agents.model.lru import LruCache
from clef_agents.model.taught import REWORDED_TOLERANCE, TaughtQuestion, TaughtQuestions, mean_pool
from clef_agents.model.tool_match import ToolMatch

SCHEMA_CACHE_SIZE = 8192
HEAD_PRECISIONS = ("auto", "float32", "bfloat16")
"""How the head's attention blocks run at inference on a CPU: ``auto`` picks bfloat16 where the CPU
computes it natively (AVX512-BF16 or AMX; about twice as fast with hundreds of options), else float32."""


@dataclass
class QuestionSchema:
    """What the head needs about one question; depends only on the question, so it is cached."""

    option_vec: torch.Tensor  # [n, H]
    question_vec: torch.Tensor  # [H]
    option_type: list[int]
    option_level: list[float]
    head_cache: OptionCache | None = None  # the head's option-only outputs [n, ...], cached at inference


@dataclass
class EncodedBatch:
    """Tensors for one forward pass over several requests."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    option_vec: torch.Tensor
    question_vec: torch.Tensor
    option_type: torch.Tensor
    option_level: torch.Tensor
    option_question: torch.Tensor
    spans: list[list[tuple[int, int]]]  # per request, per question: [start, end) in the option axis
    truncations: list[Truncation] = field(default_factory=list)
    option_cache: OptionCache | None = None  # the head's cached option-only outputs (inference only)
    texts: list[str] = field(default_factory=list)  # the state texts, uncut (taught lexical parts read them)


class QuestionScorer(Protocol):
    """What answers questions from state token states: option logits, calibrated log-probabilities,
    and its own files in a checkpoint folder. Fitting lives in ``clef_agents.train`` (``trainer`` for
    the head, ``calibration`` for the calibration, ``teach`` for taught questions)."""

    def head_logits(self, hidden: torch.Tensor, mask: torch.Tensor, batch: EncodedBatch) -> torch.Tensor: ...

    def calibrated_log_probs(
        self,
        logits: torch.Tensor,
        batch: EncodedBatch,
        questions: list[list[wire.TextQuestion]],
        features: Mapping[str, torch.Tensor] | None = None,
        taught: list[list[TaughtQuestion | None]] | None = None,
    ) -> list[list[torch.Tensor]]: ...

    def save(self, folder: str | Path) -> None: ...

    def load(self, folder: str | Path, strict: bool = True) -> list[str]: ...


class Scorer:
    """Routing head + calibration + taught questions, with the per-question schema cache.

    Example:
        >>> scorer = Scorer(ClefConfig(name="demo", backbone="minilm"), encoder)  # doctest: +SKIP
        >>> scorer.taught_entry(question) is None  # doctest: +SKIP
        True
    """

    def __init__(self, config: ClefConfig, encoder: Encoder, head_precision: str | None = None):
        self.config = config
        self.encoder = encoder
        self.device = encoder.device
        self.head_dtype = head_dtype(head_precision, self.device)
        self.head = RoutingHead(encoder.hidden_size, config.head)
        self.taught = TaughtQuestions()
        self.head.to(self.device)
        self.head.eval()
        self._schemas: LruCache[QuestionSchema] = LruCache()
        self._wordings: dict[str, torch.Tensor] = {}  # taught wording → its unit question vector

    # ------------------------------------------------------------------ modes and files

    def train(self, training: bool) -> None:
        """Dropout on (training) or off (inference); the head's cached option outputs are dropped."""
        self.head.train(training)
        self.forget_head_caches()

    @property
    def head_frozen(self) -> bool:
        """Inference: the head is in eval mode with gradients off. Only then are its option-only
        outputs cached per question, and only then may it run in bfloat16 (``head_dtype``)."""
        return not self.head.training and not torch.is_grad_enabled()

    def save(self, folder: str | Path) -> None:
        """Write head.safetensors and the taught questions' files into a checkpoint folder.

        Example:
            >>> scorer.save("runs/mini/final")  # doctest: +SKIP
        """
        checkpoint.save_head(self.head, folder)
        checkpoint.save_taught(self.taught, folder)

    def load(self, folder: str | Path, strict: bool = True) -> list[str]:
        """Load the head weights and taught questions of a checkpoint folder.

        With ``strict=False`` head parts the folder lacks (e.g. one added since it was trained)
        keep their initial values; their names (``match_state``, ...) are returned.

        Example:
            >>> scorer.load("runs/mini/final")  # doctest: +SKIP
            []
        """
        weights = checkpoint.read_head(folder, self.device)
        missing = sorted({k.split(".")[0] for k in self.head.state_dict() if k not in weights})
        if strict and missing:
            hint = (
                ' (saved before the match path existed: set "match": false under "head" in its config.json)'
                if all(m.startswith("match_") for m in missing)
                else ""
            )
            raise ValueError(f"head weights in {folder} lack {', '.join(missing)}{hint}")
        result = self.head.load_state_dict(weights, strict=False)
        self.taught = checkpoint.load_taught(folder)
        checkpoint.check_taught(self.taught, self.encoder.hidden_size, self.encoder.num_layers, folder)
        self.forget_head_caches()
        if result.unexpected_keys:
            raise ValueError(f"head weights in {folder} do not fit this head: unexpected {result.unexpected_keys[:3]}")
        return missing

    # ------------------------------------------------------------------ schemas

    def schema(self, question: wire.TextQuestion) -> QuestionSchema:
        """The cached schema tensors of a question (computed once per distinct question).

        Example:
            >>> scorer.schema(question).option_vec.shape  # doctest: +SKIP
            torch.Size([2, 384])
        """
        key = question_key(question)
        cached = self._schemas.get(key)
        if cached is not None:
            return cached
        wire.raise_if_cancelled()  # a server abandoned this request: stop before the next encoder pass
        texts = option_texts(question)
        vectors = self.encoder.embed_frozen([*texts, instruction_text(question.instructions)])
        types, levels = option_types(question)
        built = QuestionSchema(
            option_vec=vectors[:-1], question_vec=vectors[-1], option_type=types, option_level=levels
        )
        self._schemas.put(key, built, SCHEMA_CACHE_SIZE)
        return built

    def clear_schemas(self) -> None:
        """Forget cached schemas and taught wordings' vectors (needed after the backbone changes)."""
        self._schemas.clear()
        self._wordings.clear()

    def forget_head_caches(self) -> None:
        """Drop the head's cached option outputs (needed after the head's weights or mode change)."""
        for schema in self._schemas.values():
            schema.head_cache = None

    def encode_schemas(self, question_rows: list[list[wire.TextQuestion]]) -> EncodedBatch:
        """The option side of a batch (no state tokens: ``input_ids`` and ``attention_mask`` are empty).

        Example:
            >>> scorer.encode_schemas([[question]]).spans  # doctest: +SKIP
            [[(0, 2)]]
        """
        schemas = [[self.schema(q) for q in questions] for questions in question_rows]
        n_rows = len(question_rows)
        n_options = max(sum(len(s.option_type) for s in row) for row in schemas)
        hidden = self.encoder.hidden_size
        option_vec = torch.zeros(n_rows, n_options, hidden)
        question_vec = torch.zeros(n_rows, n_options, hidden)
        option_type = torch.zeros(n_rows, n_options, dtype=torch.long)
        option_level = torch.zeros(n_rows, n_options)
        option_question = torch.full((n_rows, n_options), -1, dtype=torch.long)
        cache = self._empty_option_cache(n_rows, n_options) if self.head_frozen else None
        spans: list[list[tuple[int, int]]] = []
        for i, row in enumerate(schemas):
            cursor, row_spans = 0, []
            for q_index, schema in enumerate(row):
                n = len(schema.option_type)
                if cache is not None:
                    _fill_option_cache(cache, i, cursor, self._head_cache(schema))
                option_vec[i, cursor : cursor + n] = schema.option_vec
                question_vec[i, cursor : cursor + n] = schema.question_vec
                option_type[i, cursor : cursor + n] = torch.tensor(schema.option_type)
                option_level[i, cursor : cursor + n] = torch.tensor(schema.option_level)
                option_question[i, cursor : cursor + n] = q_index
                row_spans.append((cursor, cursor + n))
                cursor += n
            spans.append(row_spans)
        empty = torch.zeros((n_rows, 0), dtype=torch.long)
        return EncodedBatch(
            empty,
            empty,
            option_vec,
            question_vec,
            option_type,
            option_level,
            option_question,
            spans,
            option_cache=cache,
        )

    def _empty_option_cache(self, n_rows: int, n_options: int) -> OptionCache:
        dim, hidden = self.config.head.dim, self.encoder.hidden_size
        match = torch.zeros(n_rows, n_options, hidden) if self.config.head.match else None
        return OptionCache(torch.zeros(n_rows, n_options, dim), torch.zeros(n_rows, n_options, dim), match)

    def _head_cache(self, schema: QuestionSchema) -> OptionCache:
        if schema.head_cache is None:
            dev = self.device
            vectors = schema.option_vec.to(dev)
            cache = self.head.option_cache(
                vectors,
                schema.question_vec.to(dev).expand_as(vectors),
                torch.tensor(schema.option_type, device=dev),
                torch.tensor(schema.option_level, device=dev),
            )
            schema.head_cache = _option_cache_to(cache, torch.device("cpu"))
        return schema.head_cache

    # ------------------------------------------------------------------ answers

    def head_logits(self, hidden: torch.Tensor, mask: torch.Tensor, batch: EncodedBatch) -> torch.Tensor:
        """Option logits from given state token states [B, T, H] (e.g. cached ones) and a batch's options.

        Example:
            >>> scorer.head_logits(hidden, mask, batch).shape  # doctest: +SKIP
            torch.Size([2, 5])
        """
        dev = self.device
        mask = mask.to(dev)
        hidden = hidden.to(dev).float()
        with self._head_autocast():
            return self.head(
                hidden,
                mask.bool(),
                mean_pool(hidden, mask),
                batch.option_vec.to(dev),
                batch.question_vec.to(dev),
                batch.option_type.to(dev),
                batch.option_level.to(dev),
                batch.option_question.to(dev),
                _option_cache_to(batch.option_cache, dev),
            )

    def _head_autocast(self) -> Any:
        """bfloat16 for the head's attention blocks at CPU inference when ``head_dtype`` says so."""
        if self.device.type == "cpu" and self.head_frozen and self.head_dtype == torch.bfloat16:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return nullcontext()

    def calibrated_log_probs(
        self,
        logits: torch.Tensor,
        batch: EncodedBatch,
        questions: list[list[wire.TextQuestion]],
        features: Mapping[str, torch.Tensor] | None = None,
        taught: list[list[TaughtQuestion | None]] | None = None,
    ) -> list[list[torch.Tensor]]:
        """Per request, per question: calibrated log-probabilities over that question's options.

        With ``features`` (state features for the specs of ``taught_specs``), taught questions answer
        with their blend of taught weights and head logits (calibrated when taught); the others with
        the head alone. ``taught`` passes the entries of ``taught_entries(questions)`` when the caller has them.

        Example:
            >>> scorer.calibrated_log_probs(logits, batch, [[question]])[0][0].exp().sum()  # doctest: +SKIP
            tensor(1.)
        """
        cal = self.config.calibration
        if features is not None and taught is None:
            taught = self.taught_entries(questions)
        tools = self.tool_features(batch, taught) if features is not None and taught is not None else {}
        out: list[list[torch.Tensor]] = []
        for i, row in enumerate(batch.spans):
            row_out = []
            for q, ((start, end), question) in enumerate(zip(row, questions[i])):
                z = logits[i, start:end]
                entry = taught[i][q] if features is not None and taught is not None else None
                if entry is not None:
                    state = features[entry.features][i].to(entry.weight.device)
                    text = batch.texts[i] if batch.texts else None
                    part = entry.tool_match
                    blended = entry.logits(
                        state,
                        z.to(entry.weight.device),
                        wire.option_names(question),
                        text,
                        encoder=self.encoder,
                        tools=tools.get((i, id(part))) if part is not None else None,
                    )
                    row_out.append(F.log_softmax(blended, dim=-1))
                elif isinstance(question, wire.Noul):
                    margin = cal.noul_a * (z[0] - z[1]) + cal.noul_b
                    row_out.append(torch.stack([F.logsigmoid(margin), F.logsigmoid(-margin)]))
                else:
                    t = cal.choice_temperature if isinstance(question, wire.Choice) else cal.score_temperature
                    row_out.append(F.log_softmax(z / t, dim=-1))
            out.append(row_out)
        return out

    def tool_features(
        self, batch: EncodedBatch, taught: list[list[TaughtQuestion | None]]
    ) -> dict[tuple[int, int], torch.Tensor]:
        """The tool-match features of every request one of whose taught questions has a tool-match part,
        by (request index, ``id`` of the part): one batched encoder call per part for all of its requests.

        Example:
            >>> scorer.tool_features(batch, scorer.taught_entries(questions))  # doctest: +SKIP
            {(0, 140301...): tensor([...])}
        """
        if not batch.texts:
            return {}
        rows_by_part: dict[int, tuple[ToolMatch, list[int]]] = {}
        for i, entries in enumerate(taught):
            for entry in entries:
                if entry is not None and entry.tool_match is not None:
                    part, rows = rows_by_part.setdefault(id(entry.tool_match), (entry.tool_match, []))
                    if i not in rows:
                        rows.append(i)
        out: dict[tuple[int, int], torch.Tensor] = {}
        for key, (part, rows) in rows_by_part.items():
            out.update(
                {(i, key): row for i, row in zip(rows, part.features([batch.texts[i] for i in rows], self.encoder))}
            )
        return out

    def taught_entry(self, question: wire.TextQuestion) -> TaughtQuestion | None:
        """The taught weights that answer this question, or None (not taught, or an option never taught).

        A question asked in a taught wording (case and spacing aside) uses that question's weights when
        every option name is taught, as before; otherwise a choice rewording with the same option set
        uses the nearest taught wording's when their cosine reaches ``REWORDED_TOLERANCE`` (``closest_taught``).

        Example:
            >>> scorer.taught_entry(Noul(instructions="Is this SMS message spam?")).features  # doctest: +SKIP
            'mean2max'
        """
        entry = self.taught.lookup(question)
        if entry is not None:
            return None if any(name not in entry.names for name in wire.option_names(question)) else entry
        closest = self.closest_taught(question)
        return closest[0] if closest is not None and closest[1] >= REWORDED_TOLERANCE else None

    def closest_taught(self, question: wire.TextQuestion) -> tuple[TaughtQuestion, float] | None:
        """The taught question whose wording is nearest this question's among those a rewording could use
        (``TaughtQuestions.rewording_candidates``), with the cosine of their ``question_vec``; None when
        there is none. ``taught_entry`` uses it when a rewording's cosine reaches ``REWORDED_TOLERANCE``.
        The question's vector is its cached schema's, which answering computes anyway.

        Example:
            >>> entry, cosine = scorer.closest_taught(Choice(instructions="What does the customer want?", criteria=banking_intents))  # doctest: +SKIP
            >>> entry.instructions, round(cosine, 2)  # doctest: +SKIP
            ('Which banking request is the customer making in this message?', 0.8)
        """
        candidates = self.taught.rewording_candidates(question) if self.taught.questions else []
        if not candidates:
            return None
        asked = F.normalize(self.schema(question).question_vec.float(), dim=-1)
        cosines = [float(asked @ self._wording_vec(entry.instructions)) for entry in candidates]
        best = max(range(len(candidates)), key=cosines.__getitem__)
        return candidates[best], cosines[best]

    def _wording_vec(self, instructions: str) -> torch.Tensor:
        """A taught wording's unit question vector, embedded as ``schema`` embeds instructions (once; cached)."""
        vector = self._wordings.get(instructions)
        if vector is None:
            vector = F.normalize(self.encoder.embed_frozen([instruction_text(instructions)])[0].float(), dim=-1)
            self._wordings[instructions] = vector
        return vector

    def taught_entries(self, questions: list[list[wire.TextQuestion]]) -> list[list[TaughtQuestion | None]]:
        """``taught_entry`` for every question of every request."""
        return [[self.taught_entry(question) for question in row] for row in questions]

    @staticmethod
    def taught_specs(taught: list[list[TaughtQuestion | None]]) -> set[str]:
        """The feature specs the given taught entries read (empty when none is taught)."""
        return {entry.features for row in taught for entry in row if entry is not None}


def instruction_text(instructions: Any) -> str:
    """The text a question's instructions are embedded from (``QuestionSchema.question_vec``).

    Example:
        >>> instruction_text("Is this spam?"), instruction_text("")
        ('Is this spam?', 'yes or no')
    """
    return wire.content_text(instructions) or "yes or no"


def option_texts(question: wire.TextQuestion) -> list[str]:
    """The text each option is embedded from (names humanised, descriptions appended).

    Example:
        >>> option_texts(wire.Choice(instructions="?", criteria={"card_arrival": "Card delivery.", "x": None}))
        ['card arrival: Card delivery.', 'x']
    """
    if isinstance(question, wire.Choice):
        return [_named(name, description) for name, description in question.criteria.items()]
    if isinstance(question, wire.Score):
        return [wire.content_text(description) or f"level {i}" for i, description in enumerate(question.criteria)]
    # A noul's two outcomes are told apart by their type embeddings; their texts are the
    # criteria when given (usually shared across many questions, so cached), else the question.
    instructions = wire.content_text(question.instructions) or "yes or no"
    criteria = question.criteria
    yes = wire.content_text(criteria.true) if criteria is not None else ""
    no = wire.content_text(criteria.false) if criteria is not None else ""
    return [yes or instructions, no or instructions]


def _named(name: str, description: Any) -> str:
    readable = name.replace("_", " ").replace("-", " ").strip()
    text = wire.content_text(description)
    return f"{readable}: {text}" if text else readable


def option_types(question: wire.TextQuestion) -> tuple[list[int], list[float]]:
    """Per-option type ids and score-level positions."""
    if isinstance(question, wire.Choice):
        n = len(question.criteria)
        return [OPTION_TYPES["choice"]] * n, [0.0] * n
    if isinstance(question, wire.Score):
        n = len(question.criteria)
        return [OPTION_TYPES["score"]] * n, level_positions(n)
    return [OPTION_TYPES["noul_yes"], OPTION_TYPES["noul_no"]], [0.0, 0.0]


def question_key(question: wire.TextQuestion) -> str:
    """A hash of a question's content in its given option order (ids never enter it)."""
    return hashlib.sha256(json.dumps(wire.question_to_wire(question)).encode()).hexdigest()


def _fill_option_cache(cache: OptionCache, row: int, start: int, part: OptionCache) -> None:
    """Copy one question's cached head outputs into a batch's cache at [row, start:...]."""
    end = start + part.option_input.shape[0]
    cache.option_input[row, start:end] = part.option_input
    cache.gather_query[row, start:end] = part.gather_query
    if cache.match is not None and part.match is not None:
        cache.match[row, start:end] = part.match


def _option_cache_to(cache: OptionCache | None, device: torch.device) -> OptionCache | None:
    """The cache as float32 tensors on ``device`` (None stays None)."""
    if cache is None:
        return None

    def move(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(device=device, dtype=torch.float32)

    return OptionCache(
        move(cache.option_input), move(cache.gather_query), move(cache.match) if cache.match is not None else None
    )


def head_dtype(precision: str | None, device: torch.device) -> torch.dtype:
    """The dtype of the head's attention blocks at CPU inference for a ``HEAD_PRECISIONS`` name
    (None: the ``CLEF_AGENTS_HEAD_PRECISION`` environment variable, else ``auto``).

    Example:
        >>> head_dtype("float32", torch.device("cpu"))
        torch.float32
    """
    import os

    if precision is None:
        precision = os.environ.get("CLEF_AGENTS_HEAD_PRECISION") or "auto"
    if precision not in HEAD_PRECISIONS:
        raise ValueError(f"head precision {precision!r} is not one of {', '.join(HEAD_PRECISIONS)}")
    if precision == "auto":
        return torch.bfloat16 if device.type == "cpu" and cpu_has_native_bf16() else torch.float32
    return torch.bfloat16 if precision == "bfloat16" else torch.float32


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 dot products natively (AVX512-BF16 or AMX-BF16; read from
    /proc/cpuinfo, so False where that file does not exist)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "").split()
    return "avx512_bf16" in flags or "amx_bf16" in flags
