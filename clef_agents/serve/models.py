"""Turn a ``--model`` argument into a decision model: ``clef_agents.loading.load_model``.

Kept as the serve package's name for it; every spec means what ``clef_agents.loading`` says
(``fake`` is the hashed ``FakeDecisionModel`` served as ``fake``).

Example:
    >>> load_model("fake").model
    'fake'
"""

from __future__ import annotations

from clef_agents.loading import BACKBONE_PREFIX, FAKE, load_model

__all__ = ["BACKBONE_PREFIX", "FAKE", "load_model"]
