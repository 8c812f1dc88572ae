"""The settings a local LM is loaded with (``clef_lm.json``) and where they live.

Example:
    >>> LMSettings(answer="name", prior_correction={"choice": 0.75}).prior_correction
    {'choice': 0.75}
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from clef_agents.model.config import Calibration
from clef_agents.model.precise.prompts import Demonstration
from clef_agents.model.reader import check_prior_correction

SETTINGS_FILE = "clef_lm.json"
NOUL_PROBE_FILE = "noul_probe.safetensors"
VARIANT_SETTINGS = ("calibration", "prior_correction", "noul_both_forms")
"""The settings ``PrefillLM.variant`` may change: they leave the state prefixes and question priors as read."""
PRECISE_SETTINGS = Path(__file__).resolve().parents[2] / "checkpoints" / "precise" / SETTINGS_FILE
"""The shipped settings of ``"precise"`` (package data)."""


class LMSettings(BaseModel):
    """The settings a local LM is loaded with, chosen and calibrated on the probe (bench/precise).

    Example:
        >>> LMSettings.model_validate_json(PRECISE_SETTINGS.read_text()).answer
        'name'
    """

    model_config = ConfigDict(extra="forbid")

    answer: Literal["letter", "name"] = "letter"
    max_state_tokens: int = Field(default=512, ge=8)
    prior_correction: dict[Literal["noul", "choice", "score"], float] = Field(default_factory=dict)
    """Per question type, how much of the question's answer about content-free states is subtracted
    from its logits (``z − λ·z_prior``); absent or 0: none."""
    system_prompt: str | None = None
    """The chat template's system message; None keeps the template's default."""
    demonstrations: list[Demonstration] = Field(default_factory=list)
    """Worked examples shown before every state, as earlier chat turns; empty: none."""
    questions_first: bool = False
    """Whether the request's questions are also listed before the state (``questions_preview``)."""
    noul_both_forms: bool = False
    """Whether a yes/no question is also read as the choice ``yes`` / ``no``, its margin the two forms' mean."""
    noul_probe: str | None = None
    """A ``NoulProbe`` file beside the settings that reads yes/no answers from hidden states; None: the
    yes/no margin of the answer tokens."""
    noul_adapter: str | None = None
    """A folder beside the settings with a LoRA adapter that reads yes/no questions (the question's tokens
    only; the state's prefix is read without it); None: no adapter."""
    calibration: Calibration = Field(default_factory=Calibration)

    @field_validator("prior_correction")
    @classmethod
    def _correction_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        return check_prior_correction(value)

    @field_validator("noul_probe")
    @classmethod
    def _probe_beside_the_settings(cls, value: str | None) -> str | None:
        return None if value is None else check_beside_settings(value, "noul_probe", "a file")

    @field_validator("noul_adapter")
    @classmethod
    def _adapter_beside_the_settings(cls, value: str | None) -> str | None:
        return None if value is None else check_adapter_folder(value)


def check_beside_settings(name: str, field: str, kind: str) -> str:
    """``name`` when it names ``kind`` (a file, a folder) beside the settings: no path separators, not "." or "..".

    Example:
        >>> check_beside_settings("noul_probe.safetensors", "noul_probe", "a file")
        'noul_probe.safetensors'
    """
    if not name or Path(name).name != name or name in (".", ".."):
        raise ValueError(f"{field} must name {kind} beside the settings, without folders; got {name!r}")
    return name


def check_adapter_folder(name: str) -> str:
    """``check_beside_settings`` for the yes/no adapter's folder.

    Example:
        >>> check_adapter_folder("noul_adapter")
        'noul_adapter'
    """
    return check_beside_settings(name, "noul_adapter", "a folder")


def settings_path(reference: str | Path) -> Path:
    """Where a local LM's settings live: beside its folder or GGUF file, in the package for ``"precise"``
    (``CLEF_AGENTS_LM_SETTINGS`` overrides).

    Example:
        >>> settings_path("runs/my-lm").as_posix()
        'runs/my-lm/clef_lm.json'
    """
    override = os.environ.get("CLEF_AGENTS_LM_SETTINGS")
    if override:
        return Path(override)
    if str(reference) == "precise":
        return PRECISE_SETTINGS
    path = Path(reference).expanduser()
    return (path.parent if path.suffix == ".gguf" else path) / SETTINGS_FILE
