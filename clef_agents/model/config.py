"""The checkpoint config: one JSON file naming the backbone, LoRA, head, calibration and data card.

Example:
    >>> cfg = ClefConfig(name="demo", backbone="minilm")
    >>> ClefConfig.model_validate_json(cfg.model_dump_json()).truncation
    'head_tail'
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CHECKPOINT_FORMAT = "clef-agents-checkpoint/1"
CONFIG_FILE = "config.json"
HEAD_FILE = "head.safetensors"
ADAPTER_DIR = "adapter"

TruncationPolicy = Literal["head", "tail", "head_tail"]


class LoraSettings(BaseModel):
    """LoRA on the backbone. ``layers=None`` adapts the top half of the layers (the bottom stays
    exactly frozen, which keeps training cheap); ``target_modules=None`` picks the attention
    projections the backbone names (``query``/``value`` for BERT, ``q_proj``/``v_proj`` for Llama/Qwen)."""

    model_config = ConfigDict(extra="forbid")

    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: list[str] | None = None
    layers: list[int] | None = None


class HeadSettings(BaseModel):
    """Size of the two-stage routing head."""

    model_config = ConfigDict(extra="forbid")

    dim: int = 256
    heads: int = 4
    ffn: int = 512
    dropout: float = 0.1
    cross_question_gate: float = 0.1
    """Upper bound of the gate on field-to-field attention across questions (0 turns it off)."""
    match: bool = True
    """Add the match path: pooled state against a learned transform of each option's text."""


class Calibration(BaseModel):
    """Post-hoc calibration fitted on held-out data: Platt scaling for nouls (``a·logit + b``),
    a temperature for choice and one for score."""

    model_config = ConfigDict(extra="forbid")

    noul_a: float = 1.0
    noul_b: float = 0.0
    choice_temperature: float = 1.0
    score_temperature: float = 1.0
    fitted_on: dict[str, Any] = Field(default_factory=dict)


class ClefConfig(BaseModel):
    """Everything needed to rebuild a model from its folder (weights live beside it)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["clef-agents-checkpoint/1"] = CHECKPOINT_FORMAT
    name: str
    backbone: str
    lora: LoraSettings | None = Field(default_factory=LoraSettings)
    head: HeadSettings = Field(default_factory=HeadSettings)
    max_state_tokens: int = 256
    truncation: TruncationPolicy = "head_tail"
    tail_fraction: float = Field(default=0.6, ge=0.0, le=1.0)
    calibration: Calibration = Field(default_factory=Calibration)
    trained: bool = False
    data_card: dict[str, Any] = Field(default_factory=dict)
