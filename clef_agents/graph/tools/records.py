"""The gate's decision traces: each verdict as a decision record, each review as the call's human outcome.

Example:
    >>> call = {"name": "pay", "args": {}, "id": "1"}
    >>> GateRecords(None, "tool_gate", {}).verdict(call, None, None, GateVerdict("allow", 0.1, "low"), None).trace_id is None
    True
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from clef_agents import wire
from clef_agents.graph.state import response_to_state
from clef_agents.graph.tools.ledger import call_key
from clef_agents.graph.tools.policy import QUESTION_ID, GateVerdict
from clef_agents.graph.tools.render import call_text
from clef_agents.graph.tools.review import ReviewDecision
from clef_agents.graph.traces import TraceStore


class GateRecords:
    """Writes one gate's verdicts and reviews to a ``TraceStore``; does nothing without one.

    Args:
        store: the trace store, or None (no traces).
        gate: the gate's name, kept with each record.
        questions: the questions the model is asked (kept with each record).
    """

    def __init__(self, store: TraceStore | None, gate: str, questions: Mapping[str, wire.TextQuestion]):
        self.store = store
        self.gate = gate
        self.questions = questions

    def verdict(
        self,
        tool_call: Mapping[str, Any],
        state: str | None,
        response: Any,
        verdict: GateVerdict,
        thread_id: str | None,
    ) -> GateVerdict:
        """Record a verdict (with the state the model read and its response, where it was asked);
        returns the verdict with its ``trace_id`` (unchanged without a store)."""
        if self.store is None:
            return verdict
        trace_id = uuid.uuid4().hex
        self.store.record_decision(
            trace_id=trace_id,
            gate=self.gate,
            input_hash=call_key(tool_call),
            state=state if state is not None else call_text(tool_call),
            questions=self.questions,
            response=response_to_state(response) if response is not None else {"model": None, "answers": {}},
            route={
                QUESTION_ID: {
                    "lane": verdict.lane,
                    "action": verdict.action,
                    "probability": verdict.probability,
                    "reason": verdict.reason,
                    "judge": verdict.judge,
                }
            },
            thread_id=thread_id,
            outcomes=_auto_outcome(verdict),
        )
        return replace(verdict, trace_id=trace_id)

    def review(self, verdict: GateVerdict, decision: ReviewDecision) -> None:
        """Record a reviewer's decision as the human outcome of the call's trace (needs approval =
        not approved as proposed)."""
        if self.store is not None and verdict.trace_id is not None:
            detail = {"decision": decision.type, "message": decision.message, "args": decision.args}
            self.store.record_outcome(verdict.trace_id, QUESTION_ID, decision.type != "approve", "human", detail)


def _auto_outcome(verdict: GateVerdict) -> dict[str, Any] | None:
    """The outcome an automatic verdict settles at once (label: blocked); None for a hold, which a person settles."""
    if verdict.lane != "auto":
        return None
    return {
        QUESTION_ID: {
            "label": verdict.action == "block",
            "source": "auto",
            "detail": {"action": verdict.action, "judge": verdict.judge},
        }
    }
