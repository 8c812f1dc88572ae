"""The local decision model (torch, transformers, peft and safetensors live only in this package).

Example:
    >>> from clef_agents.model import ClefDecisionModel  # doctest: +SKIP
"""

from clef_agents.model.backbones import Backbone, load_backbone, minilm_path
from clef_agents.model.config import Calibration, ClefConfig, HeadSettings, LoraSettings
from clef_agents.model.decision_model import ClefDecisionModel, UntrainedModelWarning
from clef_agents.model.engine import DecisionEngine

__all__ = [
    "Backbone",
    "Calibration",
    "ClefConfig",
    "ClefDecisionModel",
    "DecisionEngine",
    "HeadSettings",
    "LoraSettings",
    "UntrainedModelWarning",
    "load_backbone",
    "minilm_path",
]
