"""Lane policies: per-question thresholds that send an answer to auto, an LLM, or a human.

The signal is ``wire.decision_probability(answer)`` (the probability of the decided label).
With ``p`` that signal: ``p >= auto_at`` → ``"auto"``; ``human_below <= p < auto_at`` → ``"llm"``;
``p < human_below`` → ``"human"``. A question may have per-slice bands (slices are the route that
reached the gate); a missing slice falls back to the question's band, then to the default.

File format (JSON, ``format: "clef-agents-lanes/1"``)::

    {"format": "clef-agents-lanes/1",
     "default": {"auto_at": 0.9, "human_below": 0.5},
     "questions": {"dept": {"auto_at": 0.93, "human_below": 0.6,
                            "slices": {"refunds": {"auto_at": 0.97, "human_below": 0.7}},
                            "fit": {"method": "...", "target": 0.01}}}}

Example:
    >>> policy = LanePolicy.model_validate({"questions": {"dept": {"auto_at": 0.8, "human_below": 0.4}}})
    >>> policy.lane("dept", 0.5)
    'llm'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clef_agents.lanes import Lane

POLICY_FORMAT = "clef-agents-lanes/1"


class Band(BaseModel):
    """Two thresholds on the decision probability: act at or above ``auto_at``, ask a human
    below ``human_below``, ask an LLM in between.

    Example:
        >>> Band(auto_at=0.9, human_below=0.5).lane(0.95)
        'auto'
    """

    model_config = ConfigDict(extra="forbid")

    auto_at: float = Field(ge=0.0, le=1.0)
    human_below: float = Field(default=0.0, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _ordered(self) -> Band:
        if self.human_below > self.auto_at:
            raise ValueError(f"human_below ({self.human_below}) must not exceed auto_at ({self.auto_at})")
        return self

    def lane(self, probability: float) -> Lane:
        """The lane for one decision probability (``auto_at = 1`` means never automatic)."""
        if probability >= self.auto_at and self.auto_at < 1.0:
            return "auto"
        if probability >= self.human_below:
            return "llm"
        return "human"


class QuestionBands(Band):
    """A question's band, optional per-slice bands, and the fit that produced them."""

    slices: dict[str, Band] = Field(default_factory=dict)
    fit: dict[str, Any] = Field(default_factory=dict)


class LanePolicy(BaseModel):
    """Per-question lane thresholds, loadable from and savable to a JSON policy file.

    Example:
        >>> LanePolicy().lane("anything", 0.95)
        'auto'
    """

    model_config = ConfigDict(extra="forbid")

    format: Literal["clef-agents-lanes/1"] = POLICY_FORMAT
    default: Band = Field(default_factory=lambda: Band(auto_at=0.9, human_below=0.5))
    questions: dict[str, QuestionBands] = Field(default_factory=dict)
    meta: dict[str, Any] = Field(default_factory=dict)

    def band(self, question_id: str, slice_key: str | None = None) -> Band:
        """The band that applies to a question (and slice), with fallbacks."""
        bands = self.questions.get(question_id)
        if bands is None:
            return self.default
        if slice_key is not None and slice_key in bands.slices:
            return bands.slices[slice_key]
        return Band(auto_at=bands.auto_at, human_below=bands.human_below)

    def lane(self, question_id: str, probability: float, slice_key: str | None = None) -> Lane:
        """The lane for one answer's decision probability."""
        return self.band(question_id, slice_key).lane(probability)

    @classmethod
    def load(cls, path: str | Path) -> LanePolicy:
        """Read a policy file; errors name the file and the broken field."""
        path = Path(path)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"lane policy file not found: {path}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
        try:
            return cls.model_validate(raw)
        except ValueError as exc:
            raise ValueError(f"{path}: not a valid lane policy: {exc}") from None

    def save(self, path: str | Path) -> Path:
        """Write the policy as indented JSON and return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=2) + "\n")
        return path
