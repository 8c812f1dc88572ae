"""The two-stage routing head.

Every option is a query vector built from (frozen) embeddings of its own text and of its
question's instructions. Stage 1: each option gathers evidence from the state tokens. Stage 2:
options attend to their siblings (the other options of the same question), question summaries
attend to each other through a small bounded gate, and every option looks back at the state
before it is scored. A lexical prior (cosine between the pooled state and the option text)
keeps each option's meaning even for names the head never saw, and a match path scores the
pooled state against a learned transform of each option's text (a schema-conditioned bilinear
classifier: it starts as the lexical prior and learns fast, because it needs no attention).

No positional information enters the option axis (levels of a score are the exception, by
design), so answers are invariant to option order, question order and question ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from clef_agents.model.config import HeadSettings

OPTION_TYPES = {"noul_yes": 0, "noul_no": 1, "choice": 2, "score": 3}
NEG_INF = -1e4


class _Attention(nn.Module):
    """Pre-norm multi-head attention with a boolean "may attend" mask, plus a feed-forward."""

    def __init__(self, dim: int, heads: int, ffn: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.norm_q = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.o = nn.Linear(dim, dim)
        self.norm_ff = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(), nn.Dropout(dropout), nn.Linear(ffn, dim))
        self.drop = nn.Dropout(dropout)

    def query(self, x: torch.Tensor) -> torch.Tensor:
        """The attention queries of ``x`` (a function of ``x`` alone, so it can be precomputed)."""
        return self.q(self.norm_q(x))

    def attend(
        self, x: torch.Tensor, memory: torch.Tensor, allowed: torch.Tensor, query: torch.Tensor | None = None
    ) -> torch.Tensor:
        b, n, d = x.shape
        h = self.heads
        q = (self.query(x) if query is None else query).view(b, n, h, d // h).transpose(1, 2)
        k, v = self.kv(memory).chunk(2, dim=-1)
        k = k.view(b, -1, h, d // h).transpose(1, 2)
        v = v.view(b, -1, h, d // h).transpose(1, 2)
        bias = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill(~allowed, NEG_INF)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.unsqueeze(1))
        return self.o(out.transpose(1, 2).reshape(b, n, d))

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, allowed: torch.Tensor, query: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = x + self.drop(self.attend(x, memory, allowed, query))
        return x + self.drop(self.ff(self.norm_ff(x)))


@dataclass
class OptionCache:
    """The head's outputs that depend on the options alone (not on the state): inference computes
    them once per question and reuses them. Shapes [..., O, dim] except ``match`` [..., O, H]."""

    option_input: torch.Tensor  # what the options start as, before they read the state
    gather_query: torch.Tensor  # their first attention queries
    match: torch.Tensor | None  # match-path option vectors (None when the head has no match path)


class RoutingHead(nn.Module):
    """Scores every option of every question of a batch in one call.

    Inputs (B requests, T state tokens, O options in all, Q questions in all):
      state [B,T,H], state_mask [B,T] bool, pooled_state [B,H],
      option_vec [B,O,H], question_vec [B,O,H] (the option's question), option_type [B,O] long,
      option_level [B,O] float (score level in [0,1], else 0), option_question [B,O] long
      (question index, -1 for padding).
    Returns logits [B,O] (padding options get NEG_INF).
    """

    def __init__(self, backbone_dim: int, settings: HeadSettings):
        super().__init__()
        d = settings.dim
        self.settings = settings
        self.state_proj = nn.Linear(backbone_dim, d)
        self.option_proj = nn.Linear(backbone_dim, d)
        self.question_proj = nn.Linear(backbone_dim, d)
        self.type_embedding = nn.Embedding(len(OPTION_TYPES), d)
        self.level_proj = nn.Linear(2, d)
        self.gather = _Attention(d, settings.heads, settings.ffn, settings.dropout)
        self.siblings = _Attention(d, settings.heads, settings.ffn, settings.dropout)
        self.fields = _Attention(d, settings.heads, settings.ffn, settings.dropout)
        self.recheck = _Attention(d, settings.heads, settings.ffn, settings.dropout)
        self.field_gate = nn.Parameter(torch.zeros(()))
        self.score = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1))
        self.prior_scale = nn.Parameter(torch.tensor([0.0, 0.0, 20.0, 5.0]))
        if settings.match:
            self.match_state = nn.Linear(backbone_dim, backbone_dim)
            self.match_option = nn.Sequential(
                nn.Linear(2 * backbone_dim, 2 * backbone_dim), nn.GELU(), nn.Linear(2 * backbone_dim, backbone_dim)
            )
            self.match_scale = nn.Parameter(torch.tensor([1.0, 1.0, 1.0, 1.0]))
            _start_as_identity(self.match_state, self.match_option[-1])

    def forward(
        self,
        state: torch.Tensor,
        state_mask: torch.Tensor,
        pooled_state: torch.Tensor,
        option_vec: torch.Tensor,
        question_vec: torch.Tensor,
        option_type: torch.Tensor,
        option_level: torch.Tensor,
        option_question: torch.Tensor,
        cached: OptionCache | None = None,
    ) -> torch.Tensor:
        """``cached``: this batch's ``option_cache`` (precomputed per question at inference)."""
        valid = option_question >= 0
        memory = self.state_proj(state)
        if cached is None:
            cached = self.option_cache(option_vec, question_vec, option_type, option_level)
        to_state = state_mask.unsqueeze(1).expand(-1, cached.option_input.shape[1], -1)
        x = self.gather(cached.option_input, memory, to_state, query=cached.gather_query)
        same_question = (option_question.unsqueeze(2) == option_question.unsqueeze(1)) & valid.unsqueeze(2)
        same_question = same_question | torch.eye(x.shape[1], dtype=torch.bool, device=x.device).unsqueeze(0)
        x = self.siblings(x, x, same_question)
        x = self._cross_question(x, option_question, valid)
        x = self.recheck(x, memory, to_state)
        # the attention blocks may run in bfloat16 (inference on CPUs with native bf16); scores stay float32
        with torch.autocast(x.device.type, enabled=False):
            logits = self.score(x.float()).squeeze(-1)
            match = cached.match.float() if cached.match is not None else None
            return self.pooled_logits(
                pooled_state.float(),
                option_vec.float(),
                question_vec.float(),
                option_type,
                option_question,
                logits,
                match,
            )

    def option_cache(
        self,
        option_vec: torch.Tensor,
        question_vec: torch.Tensor,
        option_type: torch.Tensor,
        option_level: torch.Tensor,
    ) -> OptionCache:
        """The options' state-independent part of the head (see ``OptionCache``)."""
        level = torch.stack([option_level, (option_level - 0.5) ** 2], dim=-1)
        option_input = (
            self.option_proj(option_vec)
            + self.question_proj(question_vec)
            + self.type_embedding(option_type)
            + self.level_proj(level) * (option_type == OPTION_TYPES["score"]).unsqueeze(-1)
        )
        match = self.match_option_vectors(option_vec, question_vec) if self.settings.match else None
        return OptionCache(option_input, self.gather.query(option_input), match)

    def pooled_logits(
        self,
        pooled_state: torch.Tensor,
        option_vec: torch.Tensor,
        question_vec: torch.Tensor,
        option_type: torch.Tensor,
        option_question: torch.Tensor,
        base: torch.Tensor | None = None,
        match_options: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The lexical prior plus the match path (added to ``base`` when given): the part of the
        head that sees only the pooled state, cheap enough to pre-train on cached states.
        ``match_options`` are precomputed ``match_option_vectors`` (they depend only on the schema)."""
        prior = F.cosine_similarity(pooled_state.unsqueeze(1), option_vec, dim=-1)
        logits = self.prior_scale[option_type] * prior
        if base is not None:
            logits = logits + base
        if self.settings.match:
            state = F.normalize(self.match_state(pooled_state), dim=-1)
            options = (
                match_options if match_options is not None else self.match_option_vectors(option_vec, question_vec)
            )
            logits = logits + self.match_scale[option_type] * torch.einsum("bh,boh->bo", state, options)
        return logits.masked_fill(option_question < 0, NEG_INF)

    def match_option_vectors(self, option_vec: torch.Tensor, question_vec: torch.Tensor) -> torch.Tensor:
        """The option side of the match path (unit vectors); a function of the schema alone, so
        inference caches it per question."""
        options = option_vec + self.match_option(torch.cat([option_vec, question_vec], dim=-1))
        return F.normalize(options, dim=-1)

    def match_parameters(self) -> list[nn.Parameter]:
        """Parameters of the pooled part (prior scale and match path)."""
        params = [self.prior_scale]
        if self.settings.match:
            params += [*self.match_state.parameters(), *self.match_option.parameters(), self.match_scale]
        return params

    def _cross_question(self, x: torch.Tensor, option_question: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Question summaries attend to each other; the result flows back to their options
        through a gate bounded by ``settings.cross_question_gate``."""
        bound = self.settings.cross_question_gate
        if bound <= 0:
            return x
        n_questions = int(option_question.max().item()) + 1 if valid.any() else 0
        if n_questions <= 1:
            return x
        membership = F.one_hot(option_question.clamp(min=0), n_questions).to(x.dtype) * valid.unsqueeze(-1).to(x.dtype)
        counts = membership.sum(1).clamp(min=1.0)  # [B,Q]
        summaries = torch.einsum("boq,bod->bqd", membership, x) / counts.unsqueeze(-1)
        present = membership.sum(1) > 0
        allowed = present.unsqueeze(1) & present.unsqueeze(2)
        allowed = allowed | torch.eye(n_questions, dtype=torch.bool, device=x.device).unsqueeze(0)
        mixed = self.fields.attend(summaries, summaries, allowed)
        gate = bound * torch.tanh(self.field_gate)
        return x + gate * torch.einsum("boq,bqd->bod", membership, mixed)


def _start_as_identity(state_map: nn.Linear, option_out: nn.Linear) -> None:
    """The match path starts as the plain cosine of pooled state and option text."""
    with torch.no_grad():
        state_map.weight.copy_(torch.eye(state_map.weight.shape[0]))
        state_map.bias.zero_()
        option_out.weight.zero_()
        option_out.bias.zero_()


def level_positions(n_levels: int) -> list[float]:
    """Relative positions of score levels in [0, 1]."""
    return [i / max(1, n_levels - 1) for i in range(n_levels)]
