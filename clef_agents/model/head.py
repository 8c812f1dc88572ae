"""The two-stage routing head.

Every option is a query vector built from (frozen) embeddings of its own text and of its
question's instructions. Stage 1: each option gathers evidence from the state tokens. Stage 2:
options attend to their siblings (the other options of the same question), question summaries
attend to each other through a small bounded gate, and every option looks back at the state
before it is scored. A lexical prior (cosine between the pooled state and the option text)
keeps each option's meaning even for names the head never saw.

No positional information enters the option axis (levels of a score are the exception, by
design), so answers are invariant to option order, question order and question ids.
"""

from __future__ import annotations


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

    def attend(self, x: torch.Tensor, memory: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        h = self.heads
        q = self.q(self.norm_q(x)).view(b, n, h, d // h).transpose(1, 2)
        k, v = self.kv(memory).chunk(2, dim=-1)
        k = k.view(b, -1, h, d // h).transpose(1, 2)
        v = v.view(b, -1, h, d // h).transpose(1, 2)
        bias = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill(~allowed, NEG_INF)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.unsqueeze(1))
        return self.o(out.transpose(1, 2).reshape(b, n, d))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, allowed: torch.Tensor, gate: torch.Tensor | float = 1.0) -> torch.Tensor:
        x = x + gate * self.drop(self.attend(x, memory, allowed))
        return x + gate * self.drop(self.ff(self.norm_ff(x)))


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
    ) -> torch.Tensor:
        valid = option_question >= 0
        memory = self.state_proj(state)
        level = torch.stack([option_level, (option_level - 0.5) ** 2], dim=-1)
        x = (
            self.option_proj(option_vec)
            + self.question_proj(question_vec)
            + self.type_embedding(option_type)
            + self.level_proj(level) * (option_type == OPTION_TYPES["score"]).unsqueeze(-1)
        )
        to_state = state_mask.unsqueeze(1).expand(-1, x.shape[1], -1)
        x = self.gather(x, memory, to_state)
        same_question = (option_question.unsqueeze(2) == option_question.unsqueeze(1)) & valid.unsqueeze(2)
        same_question = same_question | torch.eye(x.shape[1], dtype=torch.bool, device=x.device).unsqueeze(0)
        x = self.siblings(x, x, same_question)
        x = self._cross_question(x, option_question, valid)
        x = self.recheck(x, memory, to_state)
        logits = self.score(x).squeeze(-1)
        prior = F.cosine_similarity(pooled_state.unsqueeze(1), option_vec, dim=-1)
        logits = logits + self.prior_scale[option_type] * prior
        return logits.masked_fill(~valid, NEG_INF)

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


def level_positions(n_levels: int) -> list[float]:
    """Relative positions of score levels in [0, 1]."""
    return [i / max(1, n_levels - 1) for i in range(n_levels)]
