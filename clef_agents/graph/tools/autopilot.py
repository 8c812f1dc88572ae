"""The tool gate's autopilot: people's approvals, edits and rejections of held calls become labels of the gate
question, and a call runs without asking only where the autopilot is certified to say it needs no approval.

The graph layer knows the autopilot only by its methods (``decide``, ``record_label``); nothing here imports
``clef_agents.autopilot`` unless a path is given, so graphs without one stay free of numpy and scikit-learn.

Example:
    >>> review_label("approve"), review_label("reject")
    ((1, 'approval'), (0, 'rejection'))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clef_agents.graph.tools.policy import QUESTION_ID, GateVerdict

TOOL_GATE_TARGET = 0.99
"""The agreement with the reviewers a tool gate's automatic allows must reach when the gate builds its own
autopilot (a call has side effects: stricter than a ``DecisionNode``'s 0.95)."""
REVIEW_SOURCES = {"approve": "approval", "edit": "human_edit", "reject": "rejection"}
"""The label source each kind of review is stored with."""
YES, NO = 0, 1
"""Option indices of the yes/no gate question (``wire.label_index``): yes = a person should approve it."""


def gate_autopilot(spec: Any, on_hold: str) -> Any:
    """The autopilot a ``ToolGate`` uses: ``None``, an ``Autopilot``, or a store path (SQLite file or
    ``postgresql://``) for one with ``target=TOOL_GATE_TARGET``.

    Example:
        >>> gate_autopilot(None, "interrupt") is None
        True
    """
    if spec is None:
        return None
    if on_hold != "interrupt":
        raise ValueError(
            f"autopilot= needs on_hold='interrupt', got on_hold={on_hold!r}: its teacher is the person "
            "who reviews held calls, and with on_hold='block' no call is ever reviewed"
        )
    if isinstance(spec, (str, Path)):
        from clef_agents.autopilot import Autopilot  # noqa: PLC0415  (keeps numpy and scikit-learn off other graphs)

        return Autopilot(spec, target=TOOL_GATE_TARGET)
    if not callable(getattr(spec, "decide", None)) or not callable(getattr(spec, "record_label", None)):
        raise TypeError(
            f"autopilot must be a clef_agents.autopilot.Autopilot or a store path, got {type(spec).__name__}"
        )
    return spec


def autopilot_verdict(autopilot: Any, gate: str, question: Any, state: str, by_thresholds: GateVerdict) -> GateVerdict:
    """The verdict on a call the model judged, with the autopilot deciding between *allow* and *hold*.

    A refusal the gate's ``block_at`` gives stands. Otherwise the call runs only where the autopilot answers
    "no approval needed" alone (certified, not drawn for an audit) or a person approved this very call before;
    every other call is held for a person, whose decision becomes a label.
    """
    if by_thresholds.action == "block" or by_thresholds.probability is None:
        return by_thresholds
    p = by_thresholds.probability
    decision = autopilot.decide(gate, QUESTION_ID, question, state, [p, 1.0 - p])
    if decision.lane == "auto" and decision.label == NO:
        action, reason = "allow", decision.reason
    elif decision.lane == "known" and decision.label == NO:
        action, reason = "allow", f"autopilot: a person approved this very call before ({decision.source})"
    elif decision.lane in ("auto", "known"):
        action, reason = "hold", f"{decision.reason}; it needs approval: ask a person"
    else:
        action, reason = "hold", decision.reason
    return GateVerdict(action, p, reason, judge="autopilot", autopilot_item=decision.item_key)


def review_label(decision_type: str) -> tuple[int, str]:
    """(option index, source) of a review as a label: an approval as proposed says the call needed no
    approval; an edit or a rejection says it did."""
    if decision_type not in REVIEW_SOURCES:
        raise ValueError(f"review type must be one of {', '.join(REVIEW_SOURCES)}, got {decision_type!r}")
    return (NO if decision_type == "approve" else YES), REVIEW_SOURCES[decision_type]


def record_review_label(autopilot: Any, verdict: GateVerdict, decision_type: str) -> bool:
    """Hand a review of a call the autopilot routed to it as a label; False when there is nothing to record."""
    if autopilot is None or verdict.autopilot_item is None:
        return False
    label, source = review_label(decision_type)
    autopilot.record_label(verdict.autopilot_item, label, source)
    return True
