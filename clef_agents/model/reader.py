"""The question reader: the question, its options and the state read together in one encoder pass.

The routing head of ``DecisionEngine`` sees a question only as a pooled sentence vector, so it answers
well the questions it was taught and little else. The reader is a cross-encoder: one pass over
``[CLS] question [SEP] option ; option ; ... [SEP] state [SEP]``. A yes/no question is answered from
the ``[CLS]`` vector (read as entailment: does the state make the question's answer "yes"?); a choice
or score option from the mean of its own span in that same pass, compared with ``[CLS]``. A question
with more options than fit in one pass is read in several passes, each carrying the question and the
state, and its option scores are compared across them.

Example:
    >>> reader = QuestionReader.load("clef_agents/checkpoints/mini")  # doctest: +SKIP
    >>> q = wire.Noul(instructions="Is the customer angry?")
    >>> reader.predict([("This is the third time I ask. Fix it NOW.", q)])  # doctest: +SKIP
    [[0.93, 0.07]]
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, field_validator

from clef_agents import wire
from clef_agents.model.backbones import Backbone, load_backbone
from clef_agents.model.config import Calibration
from clef_agents.model.lru import LruCache
from clef_agents.model.storage import dequantise_rows, fingerprint, half, quantise_rows

READER_CONFIG_FILE = "reader.json"
READER_WEIGHTS_FILE = "reader.safetensors"
READER_FORMAT = "clef-agents-reader/1"
OPTION_SEPARATOR = " ; "
READ_CHUNK = 32
"""Passes per padded forward at inference."""
CONTENT_FREE_STATES = ("", "N/A")
"""States that say nothing: a question's mean logits about them are its prior (``QuestionReader.prior_logits``)."""
PRIOR_CACHE_SIZE = 4096
"""Questions whose prior logits are kept."""
DELTA_STORAGE = "int8-delta/1"
"""``reader.safetensors`` metadata ``storage`` of readers saved compactly (``pack_weights``); absent: every
weight stored whole (float16 or float32)."""
DELTA_SUFFIX, SCALE_SUFFIX = ".delta", ".delta_scale"


class ReaderConfig(BaseModel):
    """Token budgets of one pass and the backbone the reader's layers were trained from."""

    model_config = ConfigDict(extra="forbid")

    format: str = READER_FORMAT
    backbone: str = "minilm"
    max_tokens: int = Field(default=320, ge=32)
    max_question_tokens: int = Field(default=64, ge=4)
    max_option_tokens: int = Field(default=24, ge=2)
    """Tokens kept of one option's text (its name first, then its description)."""
    max_options_tokens: int = Field(default=160, ge=8)
    """Option tokens in one pass; more options are read in further passes."""
    tail_fraction: float = Field(default=0.6, ge=0.0, le=1.0)
    max_options: int = Field(default=10, ge=2)
    """Choices and scores with more options are left to the routing head (see ``QuestionReader.accepts``)."""
    calibration: Calibration = Field(default_factory=Calibration)
    """Platt scaling of the yes margin and a temperature each for choice and score (the head's calibration
    type), fitted on validation records of the reader's training sets or on its probe of untaught sets."""
    head_weights: dict[Literal["noul", "choice", "score"], float] = Field(default_factory=dict)
    """Per question type, the weight ``w`` of the routing head's answer mixed into the reader's
    (``log p = (1 - w)·log p_reader + w·log p_head``, renormalised); absent or 0: the reader alone."""
    final_temperature: dict[Literal["noul", "choice", "score"], float] = Field(default_factory=dict)
    """Per question type, a temperature ``T`` applied to the reader's answer after the head is mixed in
    (``p ∝ p_mixed^(1/T)``): it keeps every answer's argmax and only recalibrates its confidence; absent: 1."""
    prior_correction: dict[Literal["noul", "choice", "score"], float] = Field(default_factory=dict)
    """Per question type, how much of the question's answer about a content-free state is subtracted
    from its logits (``z - λ·z_prior``; "calibrate before use"), removing what the wording alone leans
    towards; absent or 0: none."""
    trained_on: dict[str, Any] = Field(default_factory=dict)

    @field_validator("head_weights")
    @classmethod
    def _weights_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {k: w for k, w in value.items() if not 0.0 <= w < 1.0}
        if bad:
            raise ValueError(f"head_weights must lie in [0, 1) (1 would drop the reader), got {bad}")
        return value

    @field_validator("final_temperature")
    @classmethod
    def _temperatures_positive(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {k: t for k, t in value.items() if not (math.isfinite(t) and t > 0.0)}
        if bad:
            raise ValueError(f"final_temperature must be finite and above 0, got {bad}")
        return value

    @field_validator("prior_correction")
    @classmethod
    def _correction_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        return check_prior_correction(value)


def check_prior_correction(weights: dict[str, float]) -> dict[str, float]:
    """``weights`` (question type → prior correction weight) when every weight lies in [0, 1].

    Example:
        >>> check_prior_correction({"choice": 0.5})
        {'choice': 0.5}
    """
    bad = {k: w for k, w in weights.items() if not 0.0 <= w <= 1.0}
    if bad:
        raise ValueError(f"prior_correction must lie in [0, 1], got {bad}")
    return weights


@dataclass(frozen=True)
class ReaderPass:
    """One encoder pass: token ids, segment ids, and the token span of each option it carries."""

    input_ids: list[int]
    token_type_ids: list[int]
    option_spans: list[tuple[int, int]]
    state_tokens: int
    state_kept: int


@dataclass(frozen=True)
class ReaderResult:
    """One read question: calibrated probabilities, tokens read over its passes, and the state's cut."""

    probabilities: list[float]
    input_tokens: int
    state_tokens: int
    state_kept: int


class ReaderNetwork(torch.nn.Module):
    """The encoder plus two small heads: a yes logit on ``[CLS]`` and an option scorer on span means."""

    def __init__(self, encoder: torch.nn.Module, hidden: int):
        super().__init__()
        self.encoder = encoder
        self.yes = torch.nn.Linear(hidden, 1)
        self.option = torch.nn.Sequential(
            torch.nn.Linear(3 * hidden, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 1)
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        span_weights: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Yes logits ``(B,)`` and option scores ``(B, O)`` (``span_weights`` is ``(B, O, T)``, rows sum to 1 or 0)."""
        hidden = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        cls = hidden[:, 0]
        yes = self.yes(cls).squeeze(-1)
        if span_weights.shape[1] == 0:
            return yes, hidden.new_zeros((hidden.shape[0], 0))
        pooled = torch.bmm(span_weights.to(hidden.dtype), hidden)
        context = cls[:, None, :].expand_as(pooled)
        scores = self.option(torch.cat([pooled, context, pooled * context], dim=-1)).squeeze(-1)
        return yes, scores

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """Every parameter but the token embeddings (kept as the backbone ships them)."""
        return [p for name, p in self.named_parameters() if not name.startswith("encoder.embeddings.")]

    def stored_parameter_names(self) -> list[str]:
        """What a saved reader holds: the trainable parameters but the backbone's pooler, which the reader
        never reads (it stays as the backbone ships it, so storing it would store the backbone twice)."""
        return [
            name
            for name, _ in self.named_parameters()
            if not name.startswith(("encoder.embeddings.", "encoder.pooler."))
        ]


def pack_weights(
    state: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor]
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Reader weights as stored compactly, and the file's metadata: each matrix the backbone also has
    (``base``, same name and shape) as int8 codes of its difference from the backbone's (``<name>.delta``,
    one scale per row in ``<name>.delta_scale``), every other weight in half precision. The metadata
    holds the fingerprint of the backbone weights the differences were taken from.

    Fine-tuning moves the backbone's matrices by a few percent, so the differences' rounding error is
    about half precision's on the whole weight, at half its size.

    Example:
        >>> tensors, meta = pack_weights({"w": torch.ones(2, 2), "b": torch.ones(2)}, {"w": torch.zeros(2, 2)})
        >>> sorted(tensors), meta["storage"]
        (['b', 'w.delta', 'w.delta_scale'], 'int8-delta/1')
    """
    tensors: dict[str, torch.Tensor] = {}
    used: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        reference = base.get(name)
        if value.dim() == 2 and reference is not None and reference.shape == value.shape:
            codes, scale = quantise_rows(value.float().cpu() - reference.float().cpu())
            tensors[name + DELTA_SUFFIX], tensors[name + SCALE_SUFFIX] = codes, scale
            used[name] = reference
        else:
            tensors[name] = half(value)
    return tensors, {"storage": DELTA_STORAGE, "base_sha256": fingerprint(used)}


def unpack_weights(
    stored: Mapping[str, torch.Tensor], metadata: Mapping[str, str], base: Mapping[str, torch.Tensor], where: str
) -> dict[str, torch.Tensor]:
    """Float32 reader weights from a weights file's tensors and metadata, either storage: ``pack_weights``'s
    (differences added to ``base``, the backbone's weights, which must be those they were taken from) or
    whole weights.

    Example:
        >>> tensors, meta = pack_weights({"w": torch.ones(2, 2)}, {"w": torch.zeros(2, 2)})
        >>> unpack_weights(tensors, meta, {"w": torch.zeros(2, 2)}, "example")["w"].tolist()
        [[1.0, 1.0], [1.0, 1.0]]
    """
    storage = metadata.get("storage")
    if storage not in (None, DELTA_STORAGE):
        raise ValueError(
            f"{where}: weights stored as {storage!r}; this version reads {DELTA_STORAGE!r} or whole weights"
        )
    names = [name.removesuffix(DELTA_SUFFIX) for name in stored if name.endswith(DELTA_SUFFIX)]
    absent = [name for name in names if name not in base]
    if absent:
        raise ValueError(f"{where}: differences stored for weights the backbone lacks: {absent[:5]}")
    if names and metadata.get("base_sha256") != fingerprint({name: base[name] for name in names}):
        raise ValueError(
            f"{where}: the weights are stored as differences from other backbone weights than those "
            "loaded; load it with the backbone it was saved with"
        )
    state = {name: value.float() for name, value in stored.items() if not name.endswith((DELTA_SUFFIX, SCALE_SUFFIX))}
    for name in names:
        state[name] = base[name].detach().float().cpu() + dequantise_rows(
            stored[name + DELTA_SUFFIX], stored[name + SCALE_SUFFIX]
        )
    return state


def truncate_ids(ids: list[int], budget: int, tail_fraction: float) -> list[int]:
    """Keep the head and the tail of a token list within ``budget`` (``tail_fraction`` of it from the end).

    Example:
        >>> truncate_ids(list(range(10)), 4, 0.5)
        [0, 1, 8, 9]
    """
    if len(ids) <= budget:
        return ids
    tail = round(budget * tail_fraction)
    return ids[: budget - tail] + (ids[-tail:] if tail else [])


def question_text(question: wire.TextQuestion) -> str:
    """The question as the reader reads it: the instructions, and a noul's yes/no criteria when given.

    Example:
        >>> question_text(wire.Noul(instructions="Spam?"))
        'Spam?'
    """
    text = wire.content_text(question.instructions).strip()
    if isinstance(question, wire.Noul) and question.criteria is not None:
        yes, no = wire.content_text(question.criteria.true), wire.content_text(question.criteria.false)
        parts = [f"yes: {yes}" if yes else "", f"no: {no}" if no else ""]
        detail = "; ".join(p for p in parts if p)
        return f"{text} ({detail})" if detail else text
    return text


def reader_option_texts(question: wire.TextQuestion) -> list[str]:
    """What each option of a choice or score question reads as (names humanised, descriptions after).

    Example:
        >>> reader_option_texts(wire.Choice(instructions="?", criteria={"card_arrival": None, "refund": "Money back."}))
        ['card arrival', 'refund: Money back.']
    """
    if isinstance(question, wire.Choice):
        out = []
        for name, description in question.criteria.items():
            readable = name.replace("_", " ").replace("-", " ").strip() or name
            detail = wire.content_text(description)
            out.append(f"{readable}: {detail}" if detail else readable)
        return out
    if isinstance(question, wire.Score):
        return [wire.content_text(level) or f"level {i}" for i, level in enumerate(question.criteria)]
    return []


class QuestionReader:
    """Reads (state, question) pairs and returns calibrated probabilities over each question's options.

    Example:
        >>> reader = QuestionReader.load("runs/reader/final")  # doctest: +SKIP
        >>> reader.predict([("refund my order", wire.Choice(instructions="Which team?", criteria={"billing": None, "tech": None}))])  # doctest: +SKIP
        [[0.91, 0.09]]
    """

    def __init__(self, config: ReaderConfig, backbone: Backbone, device: torch.device | None = None):
        if backbone.kind != "encoder":
            raise ValueError(
                f"the question reader needs an encoder backbone (BERT-like); {backbone.reference!r} is a {backbone.kind}"
            )
        self.config = config
        self.tokenizer = backbone.tokenizer
        self.device = device or torch.device("cpu")
        self.network = ReaderNetwork(backbone.model, backbone.hidden_size).to(self.device)
        self.network.eval()
        self._cls = int(self.tokenizer.cls_token_id)
        self._sep = int(self.tokenizer.sep_token_id)
        self._pad = int(self.tokenizer.pad_token_id)
        self._separator = self.tokenizer(OPTION_SEPARATOR.strip(), add_special_tokens=False)["input_ids"]
        self.max_positions = min(config.max_tokens, backbone.max_positions)
        self._priors = LruCache[torch.Tensor]()

    # ------------------------------------------------------------------ construction and I/O

    @classmethod
    def create(cls, config: ReaderConfig | None = None, device: torch.device | None = None) -> QuestionReader:
        """A reader with the backbone's pretrained layers and fresh heads (before training)."""
        config = config or ReaderConfig()
        backbone = load_backbone(config.backbone)
        return cls(config, backbone, device)

    @staticmethod
    def exists(folder: str | Path) -> bool:
        """Whether a checkpoint folder holds a reader.

        Example:
            >>> QuestionReader.exists("/nonexistent")
            False
        """
        return (Path(folder) / READER_CONFIG_FILE).is_file() and (Path(folder) / READER_WEIGHTS_FILE).is_file()

    @classmethod
    def load(cls, folder: str | Path, device: torch.device | None = None) -> QuestionReader:
        """Load a reader saved by ``save``, in either storage (see ``save``); the backbone's embeddings and
        pooler come from the backbone itself."""
        from safetensors import safe_open

        folder = Path(folder)
        if not cls.exists(folder):
            raise FileNotFoundError(f"{folder} has no question reader ({READER_CONFIG_FILE} and {READER_WEIGHTS_FILE})")
        config = ReaderConfig.model_validate_json((folder / READER_CONFIG_FILE).read_text(encoding="utf-8"))
        if config.format != READER_FORMAT:
            raise ValueError(
                f"{folder / READER_CONFIG_FILE}: format {config.format!r}, this version reads {READER_FORMAT!r}"
            )
        reader = cls.create(config, device)
        path = folder / READER_WEIGHTS_FILE
        with safe_open(str(path), "pt") as handle:
            stored = {name: handle.get_tensor(name) for name in handle.keys()}
            metadata = handle.metadata() or {}
        base = {name: p.detach() for name, p in reader.network.named_parameters()}
        state = unpack_weights(stored, metadata, base, f"{path} (backbone {config.backbone!r})")
        missing, unexpected = reader.network.load_state_dict(state, strict=False)
        stored_names = set(reader.network.stored_parameter_names())
        if unexpected or stored_names & set(missing):
            raise ValueError(
                f"{path} does not fit the reader: missing {sorted(stored_names & set(missing))[:5]}, "
                f"unexpected {sorted(unexpected)[:5]}"
            )
        return reader

    def save(self, folder: str | Path, dtype: torch.dtype = torch.float16) -> Path:
        """Write the trained layers and heads, and the config.

        ``dtype`` float16 (the default) stores them compactly (``pack_weights``): each matrix the backbone
        also has as int8 differences from the backbone's, everything else in half precision; float32
        stores every weight exactly. Either is read back as float32 by ``load``.
        """
        from safetensors.torch import save_file

        if dtype not in (torch.float16, torch.float32):
            raise ValueError(f"a reader is saved compactly (torch.float16) or exactly (torch.float32), not as {dtype}")
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        names = set(self.network.stored_parameter_names())
        state = {name: p.detach() for name, p in self.network.named_parameters() if name in names}
        if dtype == torch.float32:
            tensors, metadata = {name: t.to("cpu", torch.float32).contiguous() for name, t in state.items()}, {}
        else:
            tensors, metadata = pack_weights(state, self.backbone_weights())
        save_file(tensors, str(folder / READER_WEIGHTS_FILE), metadata=metadata)
        (folder / READER_CONFIG_FILE).write_text(self.config.model_dump_json(indent=2), encoding="utf-8")
        return folder

    def backbone_weights(self) -> dict[str, torch.Tensor]:
        """The untrained backbone's weights, named as the reader's network names them (``encoder.``...)."""
        backbone = load_backbone(self.config.backbone)
        return {f"encoder.{name}": p.detach() for name, p in backbone.model.named_parameters()}

    def accepts(self, question: wire.TextQuestion) -> bool:
        """Whether the reader answers this question: any yes/no, and choices and scores with at most
        ``max_options`` options (on its own training sets' validation rows its accuracy falls steeply
        with the number of options read across passes, and the head's cached options are far cheaper).

        Example:
            >>> reader.accepts(wire.Noul(instructions="Urgent?"))  # doctest: +SKIP
            True
        """
        return isinstance(question, wire.Noul) or len(wire.option_names(question)) <= self.config.max_options

    # ------------------------------------------------------------------ layout

    def _ids(self, text: str, limit: int | None = None) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        return ids[:limit] if limit is not None else ids

    def option_groups(self, question: wire.TextQuestion) -> list[list[list[int]]]:
        """The token ids of each option, grouped into passes that fit ``max_options_tokens``."""
        groups: list[list[list[int]]] = []
        current: list[list[int]] = []
        used = 0
        for text in reader_option_texts(question):
            ids = self._ids(text, self.config.max_option_tokens) or [self.tokenizer.unk_token_id]
            cost = len(ids) + len(self._separator)
            if current and used + cost > self.config.max_options_tokens:
                groups.append(current)
                current, used = [], 0
            current.append(ids)
            used += cost
        if current:
            groups.append(current)
        return groups

    def layout(self, state: str, question: wire.TextQuestion, state_ids: list[int] | None = None) -> list[ReaderPass]:
        """The passes that read one question about one state (one pass for a noul)."""
        question_ids = self._ids(question_text(question), self.config.max_question_tokens)
        state_ids = self._ids(state) if state_ids is None else state_ids
        groups = [[]] if isinstance(question, wire.Noul) else self.option_groups(question)
        passes = []
        for group in groups:
            ids = [self._cls, *question_ids, self._sep]
            spans = []
            for k, option in enumerate(group):
                if k:
                    ids.extend(self._separator)
                spans.append((len(ids), len(ids) + len(option)))
                ids.extend(option)
            if group:
                ids.append(self._sep)
            first_state = len(ids)
            budget = max(1, self.max_positions - first_state - 1)
            kept = truncate_ids(state_ids, budget, self.config.tail_fraction)
            ids.extend(kept)
            ids.append(self._sep)
            types = [0] * first_state + [1] * (len(ids) - first_state)
            passes.append(ReaderPass(ids, types, spans, len(state_ids), len(kept)))
        return passes

    def collate(self, passes: Sequence[ReaderPass]) -> dict[str, torch.Tensor]:
        """Pad passes into tensors: ids, attention mask, segment ids and span-mean weights."""
        width = max(len(p.input_ids) for p in passes)
        n_options = max((len(p.option_spans) for p in passes), default=0)
        ids = torch.full((len(passes), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(passes), width), dtype=torch.long)
        types = torch.zeros((len(passes), width), dtype=torch.long)
        weights = torch.zeros((len(passes), n_options, width))
        for i, p in enumerate(passes):
            ids[i, : len(p.input_ids)] = torch.tensor(p.input_ids)
            mask[i, : len(p.input_ids)] = 1
            types[i, : len(p.token_type_ids)] = torch.tensor(p.token_type_ids)
            for k, (start, end) in enumerate(p.option_spans):
                weights[i, k, start:end] = 1.0 / (end - start)
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "span_weights": weights}

    def forward(self, passes: Sequence[ReaderPass]) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw yes logits and option scores for a list of passes (with gradients when training)."""
        batch = {k: v.to(self.device) for k, v in self.collate(passes).items()}
        return self.network(**batch)

    # ------------------------------------------------------------------ scoring

    @staticmethod
    def raw_logits(
        question: wire.TextQuestion, yes: Sequence[torch.Tensor], scores: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        """A question's uncalibrated logits from its passes' outputs: ``[margin]`` for a noul, one per option otherwise."""
        if isinstance(question, wire.Noul):
            return yes[0].reshape(1)
        return torch.cat([s.reshape(-1) for s in scores])

    def calibrated_log_probs(self, question: wire.TextQuestion, logits: torch.Tensor) -> torch.Tensor:
        """Calibrated log-probabilities over the question's options from ``raw_logits``."""
        cal = self.config.calibration
        if isinstance(question, wire.Noul):
            margin = cal.noul_a * logits[0] + cal.noul_b
            return torch.stack([F.logsigmoid(margin), F.logsigmoid(-margin)])
        t = cal.choice_temperature if isinstance(question, wire.Choice) else cal.score_temperature
        return F.log_softmax(logits / t, dim=-1)

    def logits(self, items: Sequence[tuple[str, wire.TextQuestion]], chunk: int = READ_CHUNK) -> list[torch.Tensor]:
        """Uncalibrated logits per (state, question), read in padded chunks sorted by length (no gradients)."""
        return self._logits_and_passes(items, chunk)[0]

    def _logits_and_passes(
        self, items: Sequence[tuple[str, wire.TextQuestion]], chunk: int = READ_CHUNK
    ) -> tuple[list[torch.Tensor], list[list[ReaderPass]]]:
        passes: list[ReaderPass] = []
        owners: list[int] = []
        state_cache: dict[str, list[int]] = {}
        for index, (state, question) in enumerate(items):
            ids = state_cache.get(state)
            if ids is None:
                ids = state_cache[state] = self._ids(state)
            for p in self.layout(state, question, ids):
                passes.append(p)
                owners.append(index)
        yes_out: list[Any] = [None] * len(passes)
        score_out: list[Any] = [None] * len(passes)
        order = sorted(range(len(passes)), key=lambda i: len(passes[i].input_ids))
        with torch.no_grad():
            for start in range(0, len(order), chunk):
                wire.raise_if_cancelled()
                part = order[start : start + chunk]
                yes, scores = self.forward([passes[i] for i in part])
                for j, i in enumerate(part):
                    yes_out[i] = yes[j].float().cpu()
                    score_out[i] = scores[j, : len(passes[i].option_spans)].float().cpu()
        per_item: list[tuple[list[Any], list[Any]]] = [([], []) for _ in items]
        item_passes: list[list[ReaderPass]] = [[] for _ in items]
        for i, owner in enumerate(owners):
            per_item[owner][0].append(yes_out[i])
            per_item[owner][1].append(score_out[i])
            item_passes[owner].append(passes[i])
        return [self.raw_logits(q, *per_item[k]) for k, (_, q) in enumerate(items)], item_passes

    def correction(self, question: wire.TextQuestion) -> float:
        """This question's ``prior_correction`` weight (0: its logits are used as read)."""
        return float(self.config.prior_correction.get(question.type, 0.0))

    def set_prior_correction(self, weights: dict[str, float]) -> None:
        """Set ``ReaderConfig.prior_correction`` (validated), e.g. ``{"choice": 1.0}``."""
        self.config = self.config.model_copy(
            update={"prior_correction": ReaderConfig(prior_correction=weights).prior_correction}
        )

    def prior_logits(self, questions: Sequence[wire.TextQuestion]) -> list[torch.Tensor]:
        """Each question's mean uncalibrated logits about ``CONTENT_FREE_STATES``: what its wording and
        options lean towards before any state is read. Cached per question.

        Example:
            >>> reader.prior_logits([Noul(instructions="Is this urgent?")])  # doctest: +SKIP
            [tensor([0.84])]
        """
        keys = [question.model_dump_json() for question in questions]
        by_key = dict(zip(keys, questions))

        def compute(part: list[str]) -> list[torch.Tensor]:
            rows = [(state, by_key[key]) for key in part for state in CONTENT_FREE_STATES]
            logits = self.logits(rows)
            n = len(CONTENT_FREE_STATES)
            return [torch.stack(logits[k * n : (k + 1) * n]).mean(0) for k in range(len(part))]

        found = self._priors.through(keys, compute, size=PRIOR_CACHE_SIZE, chunk=READ_CHUNK)
        return [found[key] for key in keys]

    def correct(
        self,
        questions: Sequence[wire.TextQuestion],
        logits: Sequence[torch.Tensor],
        correction: Mapping[str, float] | None = None,
    ) -> list[torch.Tensor]:
        """``logits`` less the correction weight of each question's type times its ``prior_logits``
        (unchanged where the weight is 0); ``correction`` replaces the config's ``prior_correction``."""
        weights = [self.correction(q) if correction is None else float(correction.get(q.type, 0.0)) for q in questions]
        index = [i for i, w in enumerate(weights) if w > 0]
        if not index:
            return list(logits)
        priors = dict(zip(index, self.prior_logits([questions[i] for i in index])))
        return [z - weights[i] * priors[i] if i in priors else z for i, z in enumerate(logits)]

    def corrected_logits(self, items: Sequence[tuple[str, wire.TextQuestion]]) -> list[torch.Tensor]:
        """``logits`` after ``correct``: what calibration is fitted on and ``read`` answers from."""
        return self.correct([q for _, q in items], self.logits(items))

    def predict(self, items: Sequence[tuple[str, wire.TextQuestion]]) -> list[list[float]]:
        """Calibrated probabilities over each question's options, in the wire's option order."""
        return [result.probabilities for result in self.read(items)]

    def read(self, items: Sequence[tuple[str, wire.TextQuestion]]) -> list[ReaderResult]:
        """``predict`` with what each answer read: tokens over its passes, and the state's length before and after the cut."""
        logits, passes = self._logits_and_passes(items)
        logits = self.correct([q for _, q in items], logits)
        return [
            ReaderResult(
                self.calibrated_log_probs(q, z).exp().tolist(),
                sum(len(p.input_ids) for p in ps),
                ps[0].state_tokens,
                ps[0].state_kept,
            )
            for (_, q), z, ps in zip(items, logits, passes)
        ]

    def state_tokens(self, state: str) -> int:
        """How many tokens a state has before truncation."""
        return len(self._ids(state))

    def iter_parameters(self) -> Iterator[torch.nn.Parameter]:
        """The parameters training updates."""
        yield from self.network.trainable_parameters()

    def train_mode(self, training: bool) -> None:
        """Dropout on (training) or off (inference)."""
        self.network.train(training)

    def set_calibration(self, calibration: Calibration) -> None:
        """Replace the calibration (fitted by ``clef_agents.train.reader``)."""
        self.config = self.config.model_copy(update={"calibration": calibration})

    def set_head_weights(self, weights: dict[str, float]) -> None:
        """Set how much of the routing head's answer is mixed in per question type (see ``ReaderConfig.head_weights``).

        Example:
            >>> reader.set_head_weights({"choice": 0.5})  # doctest: +SKIP
            >>> reader.head_weight(Choice(instructions="Which?", criteria={"a": None, "b": None}))  # doctest: +SKIP
            0.5
        """
        self.config = self.config.model_copy(update={"head_weights": ReaderConfig(head_weights=weights).head_weights})

    def head_weight(self, question: wire.TextQuestion) -> float:
        """The weight of the routing head's answer mixed into this question's (0: the reader alone)."""
        return float(self.config.head_weights.get(question.type, 0.0))

    def set_final_temperature(self, temperatures: dict[str, float]) -> None:
        """Set the temperature per question type applied after head mixing (see ``ReaderConfig.final_temperature``).

        Example:
            >>> reader.set_final_temperature({"noul": 1.6})  # doctest: +SKIP
        """
        self.config = self.config.model_copy(
            update={"final_temperature": ReaderConfig(final_temperature=temperatures).final_temperature}
        )

    def final_answer(
        self,
        question: wire.TextQuestion,
        reader_probabilities: Sequence[float],
        head_probabilities: Sequence[float] | None = None,
    ) -> list[float]:
        """The answer the model gives with the reader: the head's answer mixed in (``head_weights``), then the
        final temperature. ``head_probabilities`` is needed when the question's type mixes the head in.

        Example:
            >>> reader.final_answer(Noul(instructions="Is it late?"), [0.7, 0.3], [0.9, 0.1])  # doctest: +SKIP
            [0.76, 0.24]
        """
        weight = self.head_weight(question)
        if weight > 0.0:
            if head_probabilities is None:
                raise ValueError(
                    f"the reader mixes the head's answer into {question.type} questions (weight {weight}); "
                    "pass head_probabilities"
                )
            reader_probabilities = self.mix_with_head(reader_probabilities, head_probabilities, weight)
        return self.temper(reader_probabilities, self.config.final_temperature.get(question.type, 1.0))

    @staticmethod
    def mix_with_head(
        reader_probabilities: Sequence[float], head_probabilities: Sequence[float], weight: float
    ) -> list[float]:
        """``(1 - weight)·log p_reader + weight·log p_head``, renormalised.

        Example:
            >>> [round(p, 3) for p in QuestionReader.mix_with_head([0.8, 0.2], [0.2, 0.8], 0.5)]
            [0.5, 0.5]
        """
        if len(reader_probabilities) != len(head_probabilities):
            raise ValueError(
                f"cannot mix {len(reader_probabilities)} reader options with {len(head_probabilities)} head options"
            )
        if weight <= 0.0:
            return list(reader_probabilities)
        logp = [
            (1 - weight) * math.log(max(r, 1e-9)) + weight * math.log(max(h, 1e-9))
            for r, h in zip(reader_probabilities, head_probabilities)
        ]
        return _normalised_exp(logp)

    @staticmethod
    def temper(probabilities: Sequence[float], temperature: float) -> list[float]:
        """``p^(1/temperature)``, renormalised (the argmax never moves).

        Example:
            >>> [round(p, 3) for p in QuestionReader.temper([0.8, 0.2], 2.0)]
            [0.667, 0.333]
        """
        if temperature == 1.0:
            return list(probabilities)
        logp = [math.log(max(p, 1e-9)) / temperature for p in probabilities]
        return _normalised_exp(logp)

    def describe(self) -> dict[str, Any]:
        """The config as a JSON-able dict (for model cards and ``/readyz``-like summaries)."""
        return json.loads(self.config.model_dump_json())


def _normalised_exp(logp: Sequence[float]) -> list[float]:
    top = max(logp)
    exp = [math.exp(v - top) for v in logp]
    total = sum(exp)
    return [v / total for v in exp]
