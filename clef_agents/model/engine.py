"""The torch side of the decision model: tokenisation with an explicit truncation policy, the
schema cache, one padded backbone pass per batch, the routing head, and calibration.

``DecisionEngine`` knows nothing about LangChain; ``ClefDecisionModel`` wraps it.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from clef_agents import wire
from clef_agents.model.backbones import Backbone, load_backbone
from clef_agents.model.config import ADAPTER_DIR, CONFIG_FILE, HEAD_FILE, ClefConfig
from clef_agents.model.head import (
    OPTION_TYPES,
    OptionCache,
    RoutingHead,
    level_positions,
)
from clef_agents.model.reader import QuestionReader, truncate_ids
from clef_agents.model.taught import (
    TaughtQuestion,
    TaughtQuestions,
    feature_size,
    mean_pool,
    pool_features,
)
from clef_agents.model.tool_match import TOKEN_MAX_LENGTH, TokenStates, ToolMatch

SCHEMA_CACHE_SIZE = 8192
TEXT_CACHE_SIZE = 32768
"""Frozen embeddings kept (option and instruction texts, tools listed in states); least recently used go first."""
TOKEN_CACHE_SIZE = 1024
"""Tool texts whose frozen token vectors are kept (half precision, at most ``TOKEN_MAX_LENGTH`` tokens each: under 100 MB)."""
HEAD_PRECISIONS = ("auto", "float32", "bfloat16")
"""How the head's attention blocks run at inference on a CPU: ``auto`` picks bfloat16 where the CPU
computes it natively (AVX512-BF16 or AMX; about twice as fast with hundreds of options), else float32."""
FORWARD_CHUNK = 64


@dataclass
class QuestionSchema:
    """What the head needs about one question; depends only on the question, so it is cached."""

    option_vec: torch.Tensor  # [n, H]
    question_vec: torch.Tensor  # [H]
    option_type: list[int]
    option_level: list[float]
    head_cache: OptionCache | None = None  # the head's option-only outputs [n, ...], cached at inference


@dataclass
class Truncation:
    """How a state was cut to fit the window (reported to users as ``x_truncation``)."""

    policy: str
    state_tokens: int
    kept_tokens: int

    @property
    def truncated(self) -> bool:
        return self.kept_tokens < self.state_tokens

    def as_dict(self) -> dict[str, Any]:
        return {
            "truncated": self.truncated,
            "policy": self.policy,
            "state_tokens": self.state_tokens,
            "kept_tokens": self.kept_tokens,
            "dropped_tokens": self.state_tokens - self.kept_tokens,
        }


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


def default_lora_targets(backbone: Backbone) -> list[str]:
    """Attention projections to adapt, by the names the backbone uses."""
    names = {name.rsplit(".", 1)[-1] for name, _ in backbone.model.named_modules()}
    for pair in (["query", "value"], ["q_proj", "v_proj"], ["q", "v"], ["c_attn"]):
        if all(p in names for p in pair):
            return pair
    raise ValueError(f"cannot find attention projections to adapt in {type(backbone.model).__name__}; set lora.target_modules")


_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks)\.(\d+)\.")


def _modules_in_layers(model: torch.nn.Module, suffixes: list[str], layers: set[int]) -> list[str]:
    """Full names of modules ending in one of ``suffixes`` inside the chosen transformer layers."""
    chosen = []
    for name, _ in model.named_modules():
        match = _LAYER_INDEX.search(name)
        if match and int(match.group(1)) in layers and name.rsplit(".", 1)[-1] in suffixes:
            chosen.append(name)
    return chosen


def _num_layers(model: torch.nn.Module) -> int:
    config = model.config
    return int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0))


class DecisionEngine:
    """Backbone (+LoRA) + routing head + calibration, with a schema cache and batching.

    Example:
        >>> engine = DecisionEngine.create(ClefConfig(name="demo", backbone="minilm"))  # doctest: +SKIP
    """

    def __init__(self, config: ClefConfig, backbone: Backbone, device: torch.device | None = None, head_precision: str | None = None):
        self.config = config
        self.backbone = backbone
        self.device = device or default_device()
        self.head_dtype = head_dtype(head_precision, self.device)
        self.network = backbone.model
        if config.lora is not None:
            self.network = self._wrap_lora(backbone)
        self.head = RoutingHead(backbone.hidden_size, config.head)
        self.taught = TaughtQuestions()
        self.reader: QuestionReader | None = None
        self.network.to(self.device)
        if self.device.type == "cuda":
            self.network.to(torch.bfloat16)
        self.head.to(self.device)
        self.network.eval()
        self.head.eval()
        self._schema_cache: OrderedDict[str, QuestionSchema] = OrderedDict()
        self._text_cache: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._token_cache: OrderedDict[str, TokenStates] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(cls, config: ClefConfig, backbone: Backbone | None = None, device: torch.device | None = None) -> DecisionEngine:
        """A fresh (untrained) engine for a config; the backbone is loaded from its reference if not given."""
        return cls(config, backbone or load_backbone(config.backbone), device)

    def _wrap_lora(self, backbone: Backbone) -> torch.nn.Module:
        from peft import LoraConfig, get_peft_model

        settings = self.config.lora
        assert settings is not None
        n_layers = _num_layers(backbone.model)
        layers = settings.layers if settings.layers is not None else list(range(n_layers // 2, n_layers))
        suffixes = settings.target_modules or default_lora_targets(backbone)
        targets = _modules_in_layers(backbone.model, suffixes, set(layers))
        if not targets:
            raise ValueError(f"no modules named {suffixes} in layers {layers} of {type(backbone.model).__name__}")
        lora_config = LoraConfig(
            r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout, target_modules=targets, bias="none"
        )
        with warnings.catch_warnings():
            # peft asks transformers a question transformers 5 renamed; the warning is theirs, not the user's
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*deprecated", category=FutureWarning)
            return get_peft_model(backbone.model, lora_config)

    @classmethod
    def load(cls, folder: str | Path, device: torch.device | None = None, head_precision: str | None = None,
             reader: bool = True) -> DecisionEngine:
        """Rebuild an engine from a checkpoint folder (config.json, adapter/, head.safetensors, and the
        question reader when the folder has one and ``reader`` is true); ``head_precision``: one of
        ``HEAD_PRECISIONS`` (default: ``CLEF_AGENTS_HEAD_PRECISION``, else auto)."""
        folder = Path(folder)
        config_path = folder / CONFIG_FILE
        if not config_path.exists():
            raise FileNotFoundError(f"{folder} is not a clef_agents checkpoint: no {CONFIG_FILE}")
        config = ClefConfig.model_validate_json(config_path.read_text())
        backbone = load_backbone(_resolve_backbone(config.backbone, folder))
        engine = cls(config, backbone, device, head_precision)
        engine.load_weights(folder)
        if reader and QuestionReader.exists(folder):
            engine.attach_reader(QuestionReader.load(folder, engine.device))
        return engine

    def attach_reader(self, reader: QuestionReader | None) -> None:
        """Answer untaught questions with ``reader`` from now on (``None``: with the routing head again)."""
        self.reader = reader

    def load_weights(self, folder: str | Path, strict: bool = True) -> list[str]:
        """Load the adapter and head weights of a checkpoint folder into this engine.

        With ``strict=False`` head parts the folder lacks (e.g. one added since it was trained)
        keep their initial values; their names (``match_state``, ...) are returned.
        """
        from safetensors.torch import load_file

        folder = Path(folder)
        if self.config.lora is not None:
            self._load_adapter(folder / ADAPTER_DIR)
        weights = load_file(str(folder / HEAD_FILE), device=str(self.device))
        missing = sorted({k.split(".")[0] for k in self.head.state_dict() if k not in weights})
        if strict and missing:
            hint = ' (saved before the match path existed: set "match": false under "head" in its config.json)' if all(
                m.startswith("match_") for m in missing) else ""
            raise ValueError(f"head weights in {folder} lack {', '.join(missing)}{hint}")
        result = self.head.load_state_dict(weights, strict=False)
        self.taught = TaughtQuestions.load(folder)
        self._check_taught(folder)
        self._forget_head_caches()
        if result.unexpected_keys:
            raise ValueError(f"head weights in {folder} do not fit this head: unexpected {result.unexpected_keys[:3]}")
        return missing

    def _check_taught(self, folder: Path) -> None:
        """Every taught question's weights must read features of this backbone's size."""
        for taught in self.taught.questions.values():
            expected = feature_size(taught.features, self.backbone.hidden_size, _num_layers(self.backbone.model))
            found = taught.hidden_weight.shape[1]
            if found != expected:
                raise ValueError(f"taught question {taught.instructions!r} in {folder} reads {found} features, but its "
                                 f"{taught.features!r} features have {expected} on this backbone: it was taught on another one")

    def _load_adapter(self, adapter_dir: Path) -> None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        weights = adapter_dir / "adapter_model.safetensors"
        if not weights.exists():
            raise FileNotFoundError(f"adapter weights missing: {weights}")
        result = set_peft_model_state_dict(self.network, load_file(str(weights), device=str(self.device)))
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise ValueError(f"adapter in {adapter_dir} does not fit this backbone: unexpected keys {unexpected[:3]}")

    def save(self, folder: str | Path) -> Path:
        """Write config.json, the PEFT adapter and head.safetensors (no pickles, no backbone copy)."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / CONFIG_FILE).write_text(self.config.model_dump_json(indent=2) + "\n")
        if self.config.lora is not None:
            self.network.save_pretrained(str(folder / ADAPTER_DIR), safe_serialization=True)
        state = {k: v.detach().float().cpu().contiguous() for k, v in self.head.state_dict().items()}
        save_file(state, str(folder / HEAD_FILE))
        self.taught.save(folder)
        if self.reader is not None:
            self.reader.save(folder)
        return folder

    # ------------------------------------------------------------------ schema

    def encode_texts(self, texts: list[str]) -> torch.Tensor:
        """Mean-pooled frozen-backbone embeddings of texts (adapters off), cached per text."""
        found = self._through_cache(self._text_cache, TEXT_CACHE_SIZE, texts, self._embed_frozen)
        return torch.stack([found[t] for t in texts])

    def _through_cache(self, cache: OrderedDict[str, Any], size: int, texts: list[str],
                       compute: Callable[[list[str]], Sequence[Any]]) -> dict[str, Any]:
        """Each distinct text's value from ``cache`` (least recently used dropped past ``size``), the
        missing ones computed by ``compute`` in chunks of ``FORWARD_CHUNK``."""
        wanted = list(dict.fromkeys(texts))
        with self._lock:
            found = {t: cache[t] for t in wanted if t in cache}
        missing = [t for t in wanted if t not in found]
        for start in range(0, len(missing), FORWARD_CHUNK):
            chunk = missing[start : start + FORWARD_CHUNK]
            found.update(zip(chunk, compute(chunk)))
        with self._lock:
            for text in wanted:
                cache[text] = found[text]
                cache.move_to_end(text)
            while len(cache) > size:
                cache.popitem(last=False)
        return found

    def embed_frozen(self, texts: list[str], cache: bool = True) -> torch.Tensor:
        """Mean-pooled frozen-backbone embeddings [N, H]; with ``cache`` through ``encode_texts``'s cache
        (texts asked about again and again), else computed afresh (one-off texts such as requests)."""
        if cache:
            return self.encode_texts(texts)
        if not texts:
            return torch.zeros(0, self.backbone.hidden_size)
        return torch.cat([self._embed_frozen(texts[i : i + FORWARD_CHUNK]) for i in range(0, len(texts), FORWARD_CHUNK)])

    @torch.no_grad()
    def _frozen_hidden(self, texts: list[str], max_length: int) -> tuple[Any, torch.Tensor]:
        """Tokens and last-layer token states of texts, adapters off and dropout off (the frozen encoder)."""
        tokens = self.backbone.tokenizer(
            texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        ).to(self.device)
        with self._network_in_eval(), self._adapters_disabled():  # frozen and cached: never with dropout
            hidden = self._hidden(tokens["input_ids"], tokens["attention_mask"])
        return tokens, hidden

    def _embed_frozen(self, texts: list[str]) -> torch.Tensor:
        tokens, hidden = self._frozen_hidden(texts, 128)
        return mean_pool(hidden, tokens["attention_mask"]).float().cpu()

    def embed_tokens_frozen(self, texts: list[str], cache: bool = True) -> list[TokenStates]:
        """Each text's token ids [L] and unit frozen-backbone token vectors [L, H] (adapters off, special
        tokens left out, at most ``TOKEN_MAX_LENGTH`` tokens); with ``cache``, kept per text (LRU)."""
        if not cache:
            return [state for i in range(0, len(texts), FORWARD_CHUNK) for state in self._embed_tokens(texts[i : i + FORWARD_CHUNK])]
        found = self._through_cache(self._token_cache, TOKEN_CACHE_SIZE, texts,
                                    lambda chunk: [(ids, vectors.half()) for ids, vectors in self._embed_tokens(chunk)])
        return [(found[t][0], found[t][1].float()) for t in texts]

    def _embed_tokens(self, texts: list[str]) -> list[TokenStates]:
        if not texts:
            return []
        tokens, hidden = self._frozen_hidden(texts, TOKEN_MAX_LENGTH)
        hidden = F.normalize(hidden.float(), dim=-1).cpu()
        ids = tokens["input_ids"].cpu()
        keep = tokens["attention_mask"].cpu().bool() & ~torch.isin(ids, torch.tensor(self.backbone.tokenizer.all_special_ids))
        return [(ids[i][keep[i]], hidden[i][keep[i]]) for i in range(len(texts))]

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """The token ids ``embed_tokens_frozen`` would read for each text (special tokens left out)."""
        if not texts:
            return []
        return self.backbone.tokenizer(texts, add_special_tokens=False, truncation=True,
                                       max_length=TOKEN_MAX_LENGTH - 2, verbose=False)["input_ids"]

    @contextmanager
    def _network_in_eval(self) -> Iterator[None]:
        """Dropout off for a block, then the network's previous mode back."""
        was_training = self.network.training
        self.network.eval()
        try:
            yield
        finally:
            self.network.train(was_training)

    def _adapters_disabled(self):
        if self.config.lora is None:
            return nullcontext()
        return self.network.disable_adapter()

    def schema(self, question: wire.TextQuestion) -> QuestionSchema:
        """The cached schema tensors of a question (computed once per distinct question)."""
        key = question_key(question)
        with self._lock:
            cached = self._schema_cache.get(key)
            if cached is not None:
                self._schema_cache.move_to_end(key)
                return cached
        wire.raise_if_cancelled()  # a server abandoned this request: stop before the next encoder pass
        texts = option_texts(question)
        vectors = self.encode_texts([*texts, wire.content_text(question.instructions) or "yes or no"])
        types, levels = option_types(question)
        built = QuestionSchema(option_vec=vectors[:-1], question_vec=vectors[-1], option_type=types, option_level=levels)
        with self._lock:
            self._schema_cache[key] = built
            if len(self._schema_cache) > SCHEMA_CACHE_SIZE:
                self._schema_cache.popitem(last=False)
        return built

    def clear_caches(self) -> None:
        """Forget cached schema and text embeddings (needed after the backbone changes)."""
        with self._lock:
            self._schema_cache.clear()
            self._text_cache.clear()
            self._token_cache.clear()

    # ------------------------------------------------------------------ state

    def tokenize_state(self, text: str) -> tuple[list[int], Truncation]:
        """Token ids of a state within ``max_state_tokens``, cut by the configured policy."""
        ids = self.backbone.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        prefix, suffix = self._special_tokens
        budget = max(1, min(self.config.max_state_tokens, self.backbone.max_positions) - len(prefix) - len(suffix))
        kept = _truncate(ids, budget, self.config.truncation, self.config.tail_fraction)
        return prefix + kept + suffix, Truncation(self.config.truncation, len(ids), len(kept))

    @cached_property
    def _special_tokens(self) -> tuple[list[int], list[int]]:
        """The special tokens the tokenizer puts before and after a text (e.g. [CLS] / [SEP])."""
        tokenizer = self.backbone.tokenizer
        full = tokenizer("a", add_special_tokens=True)["input_ids"]
        bare = tokenizer("a", add_special_tokens=False)["input_ids"]
        for start in range(len(full) - len(bare) + 1):
            if full[start : start + len(bare)] == bare:
                return full[:start], full[start + len(bare) :]
        return [], []

    # ------------------------------------------------------------------ batching

    def encode(self, requests: list[tuple[str, list[wire.TextQuestion]]]) -> EncodedBatch:
        """Pack several (state text, questions) requests into padded tensors."""
        token_rows, truncations = zip(*(self.tokenize_state(text) for text, _ in requests))
        input_ids, attention = self._pad(list(token_rows))
        batch = self.encode_schemas([questions for _, questions in requests])
        batch.input_ids, batch.attention_mask, batch.truncations = input_ids, attention, list(truncations)
        batch.texts = [text for text, _ in requests]
        return batch

    def _pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded token ids and attention mask for token rows."""
        pad_id = self.backbone.tokenizer.pad_token_id or 0
        ids = torch.full((len(rows), max(len(row) for row in rows)), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        return ids, mask

    def encode_schemas(self, question_rows: list[list[wire.TextQuestion]]) -> EncodedBatch:
        """The option side of a batch (no state tokens: ``input_ids`` and ``attention_mask`` are empty)."""
        schemas = [[self.schema(q) for q in questions] for questions in question_rows]
        n_rows = len(question_rows)
        n_options = max(sum(len(s.option_type) for s in row) for row in schemas)
        hidden = self.backbone.hidden_size
        option_vec = torch.zeros(n_rows, n_options, hidden)
        question_vec = torch.zeros(n_rows, n_options, hidden)
        option_type = torch.zeros(n_rows, n_options, dtype=torch.long)
        option_level = torch.zeros(n_rows, n_options)
        option_question = torch.full((n_rows, n_options), -1, dtype=torch.long)
        cache = self._empty_option_cache(n_rows, n_options) if self._head_frozen else None
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
        return EncodedBatch(empty, empty, option_vec, question_vec, option_type, option_level, option_question, spans, option_cache=cache)

    @property
    def _head_frozen(self) -> bool:
        """Inference: the head is in eval mode with gradients off. Only then are its option-only
        outputs cached per question, and only then may it run in bfloat16 (``head_dtype``)."""
        return not self.head.training and not torch.is_grad_enabled()

    def _empty_option_cache(self, n_rows: int, n_options: int) -> OptionCache:
        dim, hidden = self.config.head.dim, self.backbone.hidden_size
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

    def _forget_head_caches(self) -> None:
        with self._lock:
            for schema in self._schema_cache.values():
                schema.head_cache = None

    def logits(self, batch: EncodedBatch) -> torch.Tensor:
        """Raw option logits [B, O] for an encoded batch (differentiable when training)."""
        return self.logits_and_features(batch)[0]

    def logits_and_features(self, batch: EncodedBatch, specs: Collection[str] = ()) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Raw option logits [B, O] and, per taught feature spec asked for, the state features [B, F]
        that taught questions read (``taught.pool_features``), from the same backbone pass."""
        mask = batch.attention_mask.to(self.device)
        states = self._hidden_states(batch.input_ids.to(self.device), mask, every_layer=bool(specs))
        features = {spec: pool_features(states, mask, spec) for spec in specs}
        return self.head_logits(states[-1].float(), mask, batch), features

    def head_logits(self, hidden: torch.Tensor, mask: torch.Tensor, batch: EncodedBatch) -> torch.Tensor:
        """Option logits from given state token states [B, T, H] (e.g. cached ones) and a batch's options."""
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

    @torch.no_grad()
    def state_hidden(self, texts: list[str]) -> list[torch.Tensor]:
        """Final-layer token states [T, H] of state texts (as the head sees them; float16, CPU),
        for training the head on cached states while the backbone and adapter stay fixed."""
        rows = [self.tokenize_state(text)[0] for text in texts]
        ids, mask = self._pad(rows)
        with self._network_in_eval():
            hidden = self._hidden(ids.to(self.device), mask.to(self.device)).float().cpu()
        return [hidden[i, : len(row)].to(torch.float16) for i, row in enumerate(rows)]

    def state_features(self, texts: list[str], spec: str) -> torch.Tensor:
        """Taught features [B, F] (``taught.pool_features`` for ``spec``) of state texts, from one backbone
        pass in the network's current mode, differentiable (the adapter stage trains through them)."""
        ids, mask = self._pad([self.tokenize_state(text)[0] for text in texts])
        mask = mask.to(self.device)
        return pool_features(self._hidden_states(ids.to(self.device), mask, every_layer=True), mask, spec)

    def _head_autocast(self):
        """bfloat16 for the head's attention blocks at CPU inference when ``head_dtype`` says so."""
        if self.device.type == "cpu" and self._head_frozen and self.head_dtype == torch.bfloat16:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return nullcontext()

    def _hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.network(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state

    def _hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, every_layer: bool = True) -> tuple[torch.Tensor, ...]:
        """Token states of every layer (embeddings first, the last layer last), or of the last one alone."""
        if not every_layer:
            return (self._hidden(input_ids, attention_mask),)
        return tuple(self.network(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states)

    def calibrated_log_probs(
        self,
        logits: torch.Tensor,
        batch: EncodedBatch,
        questions: list[list[wire.TextQuestion]],
        features: Mapping[str, torch.Tensor] | None = None,
        taught: list[list[TaughtQuestion | None]] | None = None,
    ) -> list[list[torch.Tensor]]:
        """Per request, per question: calibrated log-probabilities over that question's options.

        With ``features`` (from ``logits_and_features`` for the specs of ``taught_specs``), taught
        questions answer with their blend of taught weights and head logits (calibrated when
        taught); the others with the head alone. ``taught`` passes the entries of
        ``taught_entries(questions)`` when the caller has them.
        """
        cal = self.config.calibration
        if features is not None and taught is None:
            taught = self.taught_entries(questions)
        tools = self._tool_features(batch, taught) if features is not None and taught is not None else {}
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
                    blended = entry.logits(state, z.to(entry.weight.device), wire.option_names(question), text, encoder=self,
                                           tools=tools.get((i, id(part))) if part is not None else None)
                    row_out.append(F.log_softmax(blended, dim=-1))
                elif isinstance(question, wire.Noul):
                    margin = cal.noul_a * (z[0] - z[1]) + cal.noul_b
                    row_out.append(torch.stack([F.logsigmoid(margin), F.logsigmoid(-margin)]))
                else:
                    t = cal.choice_temperature if isinstance(question, wire.Choice) else cal.score_temperature
                    row_out.append(F.log_softmax(z / t, dim=-1))
            out.append(row_out)
        return out

    def _tool_features(self, batch: EncodedBatch, taught: list[list[TaughtQuestion | None]]) -> dict[tuple[int, int], torch.Tensor]:
        """The tool-match features of every request one of whose taught questions has a tool-match part,
        by (request index, ``id`` of the part): one batched encoder call per part for all of its requests."""
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
            out.update({(i, key): row for i, row in zip(rows, part.features([batch.texts[i] for i in rows], self))})
        return out

    def taught_entry(self, question: wire.TextQuestion) -> TaughtQuestion | None:
        """The taught weights that answer this question, or None (not taught, or an option never taught)."""
        entry = self.taught.lookup(question)
        if entry is None or any(name not in entry.names for name in wire.option_names(question)):
            return None
        return entry

    def taught_entries(self, questions: list[list[wire.TextQuestion]]) -> list[list[TaughtQuestion | None]]:
        """``taught_entry`` for every question of every request."""
        return [[self.taught_entry(question) for question in row] for row in questions]

    @staticmethod
    def taught_specs(taught: list[list[TaughtQuestion | None]]) -> set[str]:
        """The feature specs the given taught entries read (empty when none is taught)."""
        return {entry.features for row in taught for entry in row if entry is not None}

    @torch.no_grad()
    def predict(self, requests: list[tuple[str, list[wire.TextQuestion]]]) -> list[Prediction]:
        """Calibrated probabilities for many (state text, questions) requests.

        Taught questions answer with their taught weights on the routing head's pass; the others with
        the question reader when one is attached (one pass per question, reading it with the state),
        else with the head alone. A request none of whose questions is taught skips the head's pass.
        """
        taught = self.taught_entries([questions for _, questions in requests])
        if self.reader is None:
            return self._predict_head(requests, taught)
        head_index = [[q for q, entry in enumerate(entries) if entry is not None] for entries in taught]
        head_rows = [i for i, index in enumerate(head_index) if index]
        head_out = self._predict_head([(requests[i][0], [requests[i][1][q] for q in head_index[i]]) for i in head_rows],
                                      [[taught[i][q] for q in head_index[i]] for i in head_rows]) if head_rows else []
        head_by_row = dict(zip(head_rows, head_out))
        items = [(text, question) for (text, questions), entries in zip(requests, taught)
                 for question, entry in zip(questions, entries) if entry is None]
        read = iter(self.reader.read(items)) if items else iter(())
        out = []
        for i, ((text, questions), entries) in enumerate(zip(requests, taught)):
            head = head_by_row.get(i)
            from_head = iter(head.probabilities) if head else iter(())
            probabilities, parts, tokens, truncation = [], [], 0, head.truncation if head else None
            for entry in entries:
                if entry is not None:
                    probabilities.append(next(from_head))
                    parts.append("taught")
                    continue
                result = next(read)
                probabilities.append(result.probabilities)
                parts.append("reader")
                tokens += result.input_tokens
                truncation = truncation or Truncation("head_tail", result.state_tokens, result.state_kept)
            tokens += head.input_tokens if head else 0
            out.append(Prediction(probabilities, truncation or self.tokenize_state(text)[1], tokens, parts))
        return out

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
            with _autocast(self.device):
                logits, features = self.logits_and_features(batch, self.taught_specs(entries))
            features = {spec: value.float().cpu() for spec, value in features.items()}
            log_probs = self.calibrated_log_probs(logits.float(), batch, questions, features, entries)
            for j, i in enumerate(chunk):
                probs = [lp.exp().cpu().tolist() for lp in log_probs[j]]
                parts = ["taught" if entry is not None else "head" for entry in entries[j]]
                results[i] = Prediction(probs, batch.truncations[j], int(batch.attention_mask[j].sum()), parts)
        return results

    def train_mode(self, training: bool) -> None:
        """Switch dropout on (training) or off (inference)."""
        self.network.train(training)
        self.head.train(training)
        self._forget_head_caches()

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """LoRA and head parameters (the backbone itself stays frozen)."""
        lora = [p for n, p in self.network.named_parameters() if "lora_" in n]
        for p in lora:
            p.requires_grad_(True)
        return lora + list(self.head.parameters())


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
    move = lambda t: t.to(device=device, dtype=torch.float32)
    return OptionCache(move(cache.option_input), move(cache.gather_query), move(cache.match) if cache.match is not None else None)


def _truncate(ids: list[int], budget: int, policy: str, tail_fraction: float) -> list[int]:
    if len(ids) <= budget:
        return ids
    if policy == "head":
        return ids[:budget]
    if policy == "tail":
        return ids[-budget:]
    return truncate_ids(ids, budget, tail_fraction)


def _autocast(device: torch.device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


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


def default_device() -> torch.device:
    """CUDA when available, else CPU (``CLEF_AGENTS_DEVICE`` overrides)."""
    import os

    chosen = os.environ.get("CLEF_AGENTS_DEVICE")
    if chosen:
        return torch.device(chosen)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _resolve_backbone(reference: str, folder: Path) -> str:
    """A relative backbone path in a config is relative to the checkpoint folder."""
    candidate = folder / reference
    if not Path(reference).is_absolute() and candidate.exists() and reference not in (".", ""):
        return str(candidate)
    return reference
