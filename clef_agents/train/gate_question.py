"""The decision record that asks the tool gate's question: the one shape every gate record source writes.

The staged agent-safety sets (``gate_records``), the written call files (``gate_calls``) and the
catalogue of written calls (``gate_synth``) all turn a gate state and its label into this record.

Example:
    >>> gate_record("Proposed tool call: ls{}", False, {"dataset": "x"})["labels"]
    {'needs_approval': False}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clef_agents import wire
from clef_agents.graph.tools import DEFAULT_GATE_QUESTION, QUESTION_ID


def gate_record(state: str, risky: bool, meta: Mapping[str, Any]) -> dict[str, Any]:
    """One decision record asking the gate question (yes = a person should approve the call first).

    Example:
        >>> sorted(gate_record("Proposed tool call: rm{}", True, {"source": "hand"}))
        ['labels', 'meta', 'questions', 'state']
    """
    return {
        "state": state,
        "questions": {QUESTION_ID: wire.question_to_wire(DEFAULT_GATE_QUESTION)},
        "labels": {QUESTION_ID: bool(risky)},
        "meta": dict(meta),
    }


__all__ = ["gate_record"]
