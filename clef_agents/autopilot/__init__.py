"""The autopilot: a gate that learns from the answers it escalates and takes over, question by question,
only what it has been certified to answer (docs/autopilot.md).

Needs numpy and scikit-learn (the ``autopilot`` extra); MiniLM sentence vectors need the ``model`` extra.
Names load lazily.

Example:
    >>> from clef_agents.autopilot import Autopilot
    >>> Autopilot(":memory:", embeddings=False, background=False).config.audit
    0.05
"""

from __future__ import annotations

from clef_agents.lazy import lazy_attributes

_EXPORTS = {
    "pilot": ("Autopilot", "AutopilotConfig", "AutoDecision", "Serving", "question_key", "item_key"),
    "status": ("question_status",),
    "certify": ("certify_answers",),
    "store": ("LabelStore", "LABEL_SOURCES"),
    "learner": ("Learner", "LearnerInputs", "fit_learner"),
    "embedder": ("SentenceEmbedder",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


__getattr__, __dir__ = lazy_attributes(__name__, {n: f"{__name__}.{m}" for n, m in _MODULE_OF.items()}, globals())
