"""Turn a ``--model`` argument into a decision model.

- ``fake``: ``clef_agents.testing.FakeDecisionModel`` in hashed mode (stable, id/order/batch
  invariant answers; no torch) — for wiring checks and conformance runs without a model.
- ``backbone:NAME``: ``ClefDecisionModel.from_backbone(NAME)`` (a backbone with an untrained head).
- anything else (``mini``, a folder): ``ClefDecisionModel.from_pretrained(spec)``.

Example:
    >>> load_model("fake").model
    'fake'
"""

from __future__ import annotations

from langchain_core.decisions import BaseDecisionModel

FAKE = "fake"
BACKBONE_PREFIX = "backbone:"


def load_model(spec: str) -> BaseDecisionModel:
    """Load the model a ``--model`` argument names (see the module docstring).

    Example:
        >>> load_model("fake").invoke({"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}).model
        'fake'
    """
    if spec == FAKE:
        from clef_agents.testing import FakeDecisionModel

        return FakeDecisionModel(model=FAKE)
    from clef_agents.model import ClefDecisionModel  # torch lives behind this import

    if spec.startswith(BACKBONE_PREFIX):
        return ClefDecisionModel.from_backbone(spec[len(BACKBONE_PREFIX) :])
    return ClefDecisionModel.from_pretrained(spec)
