"""The precise tier's calibration: probabilities from an answer's logits (the question reader's form).

A yes/no margin goes through Platt scaling (``noul_a``, ``noul_b``); a choice's or a score's logits through a
softmax at its type's temperature.

Example:
    >>> calibrated_probabilities(Calibration(), wire.Noul(instructions="?"), torch.tensor([0.0]))
    [0.5, 0.5]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from clef_agents import wire
from clef_agents.model.config import Calibration


def calibrated_probabilities(cal: Calibration, question: wire.TextQuestion, logits: torch.Tensor) -> list[float]:
    """Probabilities over the question's options (indexed as ``wire.option_names``) from ``logits`` under ``cal``.

    Example:
        >>> calibrated_probabilities(Calibration(), wire.Choice(instructions="?", criteria={"a": None, "b": None}), torch.zeros(2))
        [0.5, 0.5]
    """
    if isinstance(question, wire.Noul):
        p = torch.sigmoid(cal.noul_a * logits[0] + cal.noul_b).item()
        return [p, 1.0 - p]
    t = cal.choice_temperature if isinstance(question, wire.Choice) else cal.score_temperature
    return F.softmax(logits / t, dim=-1).tolist()
