"""The encoder: a backbone with its LoRA adapter, tokenisation with the truncation policy, and the
frozen-embedding caches (texts asked about again and again, tool texts' token vectors).

Example:
    >>> encoder = Encoder(ClefConfig(name="demo", backbone="minilm"), load_backbone("minilm"))  # doctest: +SKIP
    >>> encoder.embed_frozen(["card lost"]).shape  # doctest: +SKIP
    torch.Size([1, 384])
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
import torch.nn.functional as F

from clef_agents.model.backbones import Backbone
from clef_agents.model.config import ClefConfig, LoraSettings
from clef_agents.model.lru import LruCache
from clef_agents.model.reader import truncate_ids
from clef_agents.model.taught import mean_pool, pool_features
from clef_agents.model.tool_match import TOKEN_MAX_LENGTH, TokenStates

TEXT_CACHE_SIZE = 32768
"""Frozen embeddings kept (option and instruction texts, tools listed in states); least recently used go first."""
TOKEN_CACHE_SIZE = 1024
"""Tool texts whose frozen token vectors are kept (half precision, at most ``TOKEN_MAX_LENGTH`` tokens each: under 100 MB)."""
FORWARD_CHUNK = 64
"""Texts or requests per backbone pass."""
FROZEN_MAX_LENGTH = 128
"""Tokens read per text for pooled frozen embeddings."""


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


class Encoder:
    """Backbone (+LoRA) on a device: state tokenisation, backbone passes and cached frozen embeddings.

    Example:
        >>> encoder = Encoder(config, backbone)  # doctest: +SKIP
        >>> ids, truncation = encoder.tokenize_state("I was charged twice")  # doctest: +SKIP
    """

    def __init__(self, config: ClefConfig, backbone: Backbone, device: torch.device | None = None):
        self.config = config
        self.backbone = backbone
        self.device = device or default_device()
        self.network = backbone.model if config.lora is None else wrap_lora(backbone, config.lora)
        self.network.to(self.device)
        if self.device.type == "cuda":
            self.network.to(torch.bfloat16)
        self.network.eval()
        self._text_cache: LruCache[torch.Tensor] = LruCache()
        self._token_cache: LruCache[TokenStates] = LruCache()

    @property
    def hidden_size(self) -> int:
        """Width of the backbone's token states."""
        return self.backbone.hidden_size

    @property
    def num_layers(self) -> int:
        """Transformer layers of the backbone."""
        return num_layers(self.backbone.model)

    # ------------------------------------------------------------------ modes and parameters

    def train(self, training: bool) -> None:
        """Dropout on (training) or off (inference)."""
        self.network.train(training)

    def lora_parameters(self) -> list[torch.nn.Parameter]:
        """The adapter's parameters, made trainable (the backbone itself stays frozen)."""
        lora = [p for n, p in self.network.named_parameters() if "lora_" in n]
        for p in lora:
            p.requires_grad_(True)
        return lora

    @contextmanager
    def in_eval(self) -> Iterator[None]:
        """Dropout off for a block, then the network's previous mode back.

        Example:
            >>> with encoder.in_eval():  # doctest: +SKIP
            ...     states = encoder.last_hidden(ids, mask)
        """
        was_training = self.network.training
        self.network.eval()
        try:
            yield
        finally:
            self.network.train(was_training)

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """The frozen backbone for a block: dropout off and the adapter disabled.

        Example:
            >>> with encoder.frozen():  # doctest: +SKIP
            ...     states = encoder.last_hidden(ids, mask)
        """
        adapters_off = nullcontext() if self.config.lora is None else self.network.disable_adapter()
        with self.in_eval(), adapters_off:
            yield

    # ------------------------------------------------------------------ backbone passes

    def last_hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Last-layer token states [B, T, H] in the network's current mode.

        Example:
            >>> encoder.last_hidden(ids, mask).shape  # doctest: +SKIP
            torch.Size([2, 12, 384])
        """
        return self.network(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def hidden_states(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, every_layer: bool = True
    ) -> tuple[torch.Tensor, ...]:
        """Token states of every layer (embeddings first, the last layer last), or of the last one alone.

        Example:
            >>> len(encoder.hidden_states(ids, mask))  # doctest: +SKIP
            7
        """
        if not every_layer:
            return (self.last_hidden(input_ids, attention_mask),)
        return tuple(
            self.network(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
        )

    @torch.no_grad()
    def frozen_hidden(self, texts: list[str], max_length: int) -> tuple[Any, torch.Tensor]:
        """Tokens and last-layer token states of texts from the frozen backbone (adapter off, dropout off).

        Example:
            >>> tokens, hidden = encoder.frozen_hidden(["card lost"], 128)  # doctest: +SKIP
        """
        tokens = self.backbone.tokenizer(
            texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        ).to(self.device)
        with self.frozen():  # frozen and cached: never with dropout
            hidden = self.last_hidden(tokens["input_ids"], tokens["attention_mask"])
        return tokens, hidden

    @torch.no_grad()
    def state_hidden(self, texts: list[str]) -> list[torch.Tensor]:
        """Final-layer token states [T, H] of state texts (as the head sees them; float16, CPU),
        for training the head on cached states while the backbone and adapter stay fixed.

        Example:
            >>> encoder.state_hidden(["I was charged twice"])[0].dtype  # doctest: +SKIP
            torch.float16
        """
        rows = [self.tokenize_state(text)[0] for text in texts]
        ids, mask = self.pad(rows)
        with self.in_eval():
            hidden = self.last_hidden(ids.to(self.device), mask.to(self.device)).float().cpu()
        return [hidden[i, : len(row)].to(torch.float16) for i, row in enumerate(rows)]

    def state_features(self, texts: list[str], spec: str) -> torch.Tensor:
        """Taught features [B, F] (``taught.pool_features`` for ``spec``) of state texts, from one backbone
        pass in the network's current mode, differentiable (the adapter stage trains through them).

        Example:
            >>> encoder.state_features(["I was charged twice"], "mean1").shape  # doctest: +SKIP
            torch.Size([1, 384])
        """
        ids, mask = self.pad([self.tokenize_state(text)[0] for text in texts])
        mask = mask.to(self.device)
        return pool_features(self.hidden_states(ids.to(self.device), mask, every_layer=True), mask, spec)

    # ------------------------------------------------------------------ frozen embeddings

    def embed_frozen(self, texts: list[str], cache: bool = True) -> torch.Tensor:
        """Mean-pooled frozen-backbone embeddings [N, H]; with ``cache`` kept per text (texts asked about
        again and again, least recently used dropped), else computed afresh (one-off texts such as requests).

        Example:
            >>> encoder.embed_frozen(["card lost", "refund"]).shape  # doctest: +SKIP
            torch.Size([2, 384])
        """
        if cache:
            found = self._text_cache.through(texts, self._embed_pooled, TEXT_CACHE_SIZE, FORWARD_CHUNK)
            return torch.stack([found[t] for t in texts])
        if not texts:
            return torch.zeros(0, self.hidden_size)
        return torch.cat(
            [self._embed_pooled(texts[i : i + FORWARD_CHUNK]) for i in range(0, len(texts), FORWARD_CHUNK)]
        )

    def embed_tokens_frozen(self, texts: list[str], cache: bool = True) -> list[TokenStates]:
        """Each text's token ids [L] and unit frozen-backbone token vectors [L, H] (adapters off, special
        tokens left out, at most ``TOKEN_MAX_LENGTH`` tokens); with ``cache``, kept per text (LRU).

        Example:
            >>> (ids, vectors), = encoder.embed_tokens_frozen(["get_weather: Weather for a city."])  # doctest: +SKIP
        """
        if not cache:
            return [
                state
                for i in range(0, len(texts), FORWARD_CHUNK)
                for state in self._embed_tokens(texts[i : i + FORWARD_CHUNK])
            ]
        found = self._token_cache.through(
            texts,
            lambda chunk: [(ids, vectors.half()) for ids, vectors in self._embed_tokens(chunk)],
            TOKEN_CACHE_SIZE,
            FORWARD_CHUNK,
        )
        return [(found[t][0], found[t][1].float()) for t in texts]

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """The token ids ``embed_tokens_frozen`` would read for each text (special tokens left out).

        Example:
            >>> encoder.token_ids(["card lost"])  # doctest: +SKIP
            [[4003, 2439]]
        """
        if not texts:
            return []
        return self.backbone.tokenizer(
            texts, add_special_tokens=False, truncation=True, max_length=TOKEN_MAX_LENGTH - 2, verbose=False
        )["input_ids"]

    def _embed_pooled(self, texts: list[str]) -> torch.Tensor:
        tokens, hidden = self.frozen_hidden(texts, FROZEN_MAX_LENGTH)
        return mean_pool(hidden, tokens["attention_mask"]).float().cpu()

    def _embed_tokens(self, texts: list[str]) -> list[TokenStates]:
        if not texts:
            return []
        tokens, hidden = self.frozen_hidden(texts, TOKEN_MAX_LENGTH)
        hidden = F.normalize(hidden.float(), dim=-1).cpu()
        ids = tokens["input_ids"].cpu()
        keep = tokens["attention_mask"].cpu().bool() & ~torch.isin(
            ids, torch.tensor(self.backbone.tokenizer.all_special_ids)
        )
        return [(ids[i][keep[i]], hidden[i][keep[i]]) for i in range(len(texts))]

    # ------------------------------------------------------------------ caches

    def cached_texts(self) -> list[str]:
        """Texts whose pooled frozen embeddings are cached, least recently used first.

        Example:
            >>> encoder.cached_texts()  # doctest: +SKIP
            ['card lost', 'refund']
        """
        return self._text_cache.keys()

    def cached_vectors(self) -> dict[str, torch.Tensor]:
        """The cached pooled frozen embeddings by text, least recently used first.

        Example:
            >>> encoder.cached_vectors()["card lost"].shape  # doctest: +SKIP
            torch.Size([384])
        """
        return dict(self._text_cache.items())

    def cache_vectors(self, vectors: Mapping[str, torch.Tensor]) -> None:
        """Add pooled frozen embeddings computed earlier by this backbone (texts already cached keep theirs).

        Example:
            >>> encoder.cache_vectors(saved_vectors)  # doctest: +SKIP
        """
        self._text_cache.add_missing(vectors.items(), TEXT_CACHE_SIZE)

    def cached_token_texts(self) -> list[str]:
        """Texts whose frozen token vectors are cached, least recently used first.

        Example:
            >>> encoder.cached_token_texts()  # doctest: +SKIP
            ['get_weather: Weather for a city.']
        """
        return self._token_cache.keys()

    def clear_caches(self) -> None:
        """Forget cached frozen embeddings (needed after the backbone changes).

        Example:
            >>> encoder.clear_caches()  # doctest: +SKIP
        """
        self._text_cache.clear()
        self._token_cache.clear()

    # ------------------------------------------------------------------ state tokens

    def tokenize_state(self, text: str) -> tuple[list[int], Truncation]:
        """Token ids of a state within ``max_state_tokens``, cut by the configured policy.

        Example:
            >>> ids, truncation = encoder.tokenize_state("I was charged twice")  # doctest: +SKIP
            >>> truncation.truncated  # doctest: +SKIP
            False
        """
        ids = self.backbone.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        prefix, suffix = self.special_tokens
        budget = max(1, min(self.config.max_state_tokens, self.backbone.max_positions) - len(prefix) - len(suffix))
        kept = truncate_state_ids(ids, budget, self.config.truncation, self.config.tail_fraction)
        return prefix + kept + suffix, Truncation(self.config.truncation, len(ids), len(kept))

    @cached_property
    def special_tokens(self) -> tuple[list[int], list[int]]:
        """The special tokens the tokenizer puts before and after a text (e.g. [CLS] / [SEP])."""
        tokenizer = self.backbone.tokenizer
        full = tokenizer("a", add_special_tokens=True)["input_ids"]
        bare = tokenizer("a", add_special_tokens=False)["input_ids"]
        for start in range(len(full) - len(bare) + 1):
            if full[start : start + len(bare)] == bare:
                return full[:start], full[start + len(bare) :]
        return [], []

    def pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded token ids and attention mask [B, T] for token rows.

        Example:
            >>> ids, mask = encoder.pad([[101, 7, 102], [101, 102]])  # doctest: +SKIP
        """
        pad_id = self.backbone.tokenizer.pad_token_id or 0
        ids = torch.full((len(rows), max(len(row) for row in rows)), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        return ids, mask


def truncate_state_ids(ids: list[int], budget: int, policy: str, tail_fraction: float) -> list[int]:
    """At most ``budget`` of ``ids``: the first (``head``), the last (``tail``) or both ends (``head_tail``).

    Example:
        >>> truncate_state_ids([1, 2, 3, 4, 5], 2, "tail", 0.5)
        [4, 5]
    """
    if len(ids) <= budget:
        return ids
    if policy == "head":
        return ids[:budget]
    if policy == "tail":
        return ids[-budget:]
    return truncate_ids(ids, budget, tail_fraction)


def wrap_lora(backbone: Backbone, settings: LoraSettings) -> torch.nn.Module:
    """The backbone's model with a fresh LoRA adapter on the chosen layers' attention projections."""
    from peft import LoraConfig, get_peft_model

    n_layers = num_layers(backbone.model)
    layers = settings.layers if settings.layers is not None else list(range(n_layers // 2, n_layers))
    suffixes = settings.target_modules or default_lora_targets(backbone)
    targets = modules_in_layers(backbone.model, suffixes, set(layers))
    if not targets:
        raise ValueError(f"no modules named {suffixes} in layers {layers} of {type(backbone.model).__name__}")
    lora_config = LoraConfig(
        r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout, target_modules=targets, bias="none"
    )
    with warnings.catch_warnings():
        # peft asks transformers a question transformers 5 renamed; the warning is theirs, not the user's
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*deprecated", category=FutureWarning)
        return get_peft_model(backbone.model, lora_config)


def default_lora_targets(backbone: Backbone) -> list[str]:
    """Attention projections to adapt, by the names the backbone uses."""
    names = {name.rsplit(".", 1)[-1] for name, _ in backbone.model.named_modules()}
    for pair in (["query", "value"], ["q_proj", "v_proj"], ["q", "v"], ["c_attn"]):
        if all(p in names for p in pair):
            return pair
    raise ValueError(
        f"cannot find attention projections to adapt in {type(backbone.model).__name__}; set lora.target_modules"
    )


_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks)\.(\d+)\.")


def modules_in_layers(model: torch.nn.Module, suffixes: list[str], layers: set[int]) -> list[str]:
    """Full names of modules ending in one of ``suffixes`` inside the chosen transformer layers."""
    chosen = []
    for name, _ in model.named_modules():
        match = _LAYER_INDEX.search(name)
        if match and int(match.group(1)) in layers and name.rsplit(".", 1)[-1] in suffixes:
            chosen.append(name)
    return chosen


def num_layers(model: torch.nn.Module) -> int:
    """Transformer layers of a backbone model, from its config."""
    config = model.config
    return int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0))


def default_device() -> torch.device:
    """CUDA when available, else CPU (``CLEF_AGENTS_DEVICE`` overrides)."""
    import os

    chosen = os.environ.get("CLEF_AGENTS_DEVICE")
    if chosen:
        return torch.device(chosen)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cuda_autocast(device: torch.device) -> Any:
    """bfloat16 autocast on CUDA (the weights stay as they are); no change elsewhere.

    Example:
        >>> with cuda_autocast(torch.device("cpu")):
        ...     torch.ones(1).dtype
        torch.float32
    """
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()
