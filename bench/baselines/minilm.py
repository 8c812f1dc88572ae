"""The MiniLM backbone as the baselines use it: bare forward, mean-pooled embeddings, pair passes.

Example:
    >>> enc = MiniLM.load()  # doctest: +SKIP
    >>> enc.embed(["my card is lost"]).shape  # doctest: +SKIP
    torch.Size([1, 384])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.functional import normalize
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from clef_agents.model.backbones import minilm_path
from clef_agents.model.taught import mean_pool

EMBED_MAX_TOKENS = 256
"""all-MiniLM-L6-v2 was trained on 256-token inputs (its sentence-transformers max_seq_length)."""


@dataclass
class MiniLM:
    """A frozen all-MiniLM-L6-v2 in fp32 on the CPU."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase

    @classmethod
    def load(cls) -> "MiniLM":
        folder = minilm_path()
        model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
        return cls(model=model, tokenizer=AutoTokenizer.from_pretrained(folder))

    @torch.inference_mode()
    def forward(self, texts: list[str], max_tokens: int = 512) -> torch.Tensor:
        """The bare backbone pass (tokenise + forward), returning the last hidden states."""
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=max_tokens, return_tensors="pt")
        return self.model(**enc).last_hidden_state

    @torch.inference_mode()
    def embed(self, texts: list[str], batch_size: int = 64, max_tokens: int = EMBED_MAX_TOKENS) -> torch.Tensor:
        """L2-normalised mean-pooled sentence embeddings (the sentence-transformers recipe)."""
        chunks = []
        for start in range(0, len(texts), batch_size):
            enc = self.tokenizer(
                texts[start : start + batch_size],
                padding=True,
                truncation=True,
                max_length=max_tokens,
                return_tensors="pt",
            )
            hidden = self.model(**enc).last_hidden_state
            chunks.append(normalize(mean_pool(hidden, enc["attention_mask"]), dim=-1))
        return torch.cat(chunks) if chunks else torch.empty(0, self.model.config.hidden_size)

    @torch.inference_mode()
    def pair_similarities(self, state: str, options: list[str], max_tokens: int = 512) -> torch.Tensor:
        """One pass per (state, option) pair, batched: cosine between the contextualised state
        tokens and option tokens of each pair (cross-encoder style, no trained head)."""
        enc = self.tokenizer(
            [state] * len(options),
            options,
            padding=True,
            truncation="only_first",
            max_length=max_tokens,
            return_tensors="pt",
            return_token_type_ids=True,
        )
        hidden = self.model(**enc).last_hidden_state
        mask = enc["attention_mask"]
        segment = enc["token_type_ids"]
        state_vec = normalize(mean_pool(hidden, mask * (segment == 0)), dim=-1)
        option_vec = normalize(mean_pool(hidden, mask * (segment == 1)), dim=-1)
        return (state_vec * option_vec).sum(-1)
