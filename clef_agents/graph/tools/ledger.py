"""Verdicts and reviews in graph state: one ``ToolGateEntry`` per gate under ``state["decisions"]``, one item
per call, keyed so that a verdict never serves another call.

Example:
    >>> VerdictLedger("tool_gate").entry({})
    {'gate': 'tool_gate', 'kind': 'tool_gate', 'calls': {}}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.config import get_config

from clef_agents.graph.state import DECISIONS_KEY, ToolCallVerdict, ToolGateEntry, ToolReview
from clef_agents.graph.tools.policy import GateVerdict
from clef_agents.graph.tools.review import ReviewDecision


def call_key(tool_call: Mapping[str, Any]) -> str:
    """The key of a call's verdict in graph state: its id and a hash of its name and arguments,
    so that a verdict never serves a different call (another id, or the same id with other arguments).

    Example:
        >>> call_key({"name": "pay", "args": {"amount": 5}, "id": "c1"})
        'c1:d485c2a7ccf75171'
    """
    return f"{tool_call.get('id')}:{call_hash(tool_call)}"


def call_hash(tool_call: Mapping[str, Any]) -> str:
    """A stable hash of a call's tool name and arguments.

    Example:
        >>> call_hash({"name": "pay", "args": {"amount": 5}}) == call_hash({"args": {"amount": 5}, "name": "pay"})
        True
    """
    body = json.dumps({"name": tool_call.get("name"), "args": tool_call.get("args", {})}, sort_keys=True, default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def verdict_entry(tool_call: Mapping[str, Any], verdict: GateVerdict) -> ToolCallVerdict:
    """A verdict as the typed, JSON-ready entry kept in graph state.

    Example:
        >>> verdict_entry({"name": "pay", "args": {}, "id": "c1"}, GateVerdict("allow", 0.1, "low"))["lane"]
        'auto'
    """
    entry: ToolCallVerdict = {
        "tool_call_id": None if tool_call.get("id") is None else str(tool_call.get("id")),
        "tool": str(tool_call.get("name")),
        "call_hash": call_hash(tool_call),
        "action": verdict.action,
        "lane": verdict.lane,
        "probability": verdict.probability,
        "reason": verdict.reason,
        "judge": verdict.judge,
        "trace_id": verdict.trace_id,
    }
    if verdict.autopilot_item is not None:
        entry["autopilot_item"] = verdict.autopilot_item
    return entry


def review_entry(decision: ReviewDecision) -> ToolReview:
    """A reviewer's decision as the JSON-ready entry kept in graph state.

    Example:
        >>> review_entry(ReviewDecision("reject", message="no"))
        {'type': 'reject', 'args': None, 'message': 'no'}
    """
    return {"type": decision.type, "args": decision.args, "message": decision.message}


def messages_of(state: Any) -> list[Any]:
    """The messages of a graph state (a mapping or object with ``messages``, or a message list).

    Example:
        >>> messages_of({"messages": ["hi"]}), messages_of(["hi"])
        (['hi'], ['hi'])
    """
    if isinstance(state, Mapping):
        return list(state.get("messages", []))
    if isinstance(state, Sequence):
        return list(state)
    return list(getattr(state, "messages", []) or [])


def last_ai_message(state: Any) -> AIMessage | None:
    """The last AI message of a graph state, or None."""
    return next((m for m in reversed(messages_of(state)) if isinstance(m, AIMessage)), None)


def last_tool_calls(state: Any) -> list[Mapping[str, Any]]:
    """The tool calls of the last AI message in a graph state (none when there is no AI message)."""
    last = last_ai_message(state)
    return [] if last is None else list(last.tool_calls)


def run_thread_id() -> str | None:
    """The ``thread_id`` of the LangGraph run this is called in, or None outside a run."""
    try:
        value = (get_config().get("configurable") or {}).get("thread_id")
    except RuntimeError:  # outside a graph run
        return None
    return None if value is None else str(value)


class VerdictLedger:
    """Reads and writes one gate's verdicts and reviews in graph state (``state["decisions"][name]``).

    Example:
        >>> ledger = VerdictLedger("g")
        >>> update = ledger.with_verdicts({}, [({"name": "pay", "args": {}, "id": "c1"}, GateVerdict("hold", 0.5, "risky"))])
        >>> ledger.stored_verdict(update, {"name": "pay", "args": {}, "id": "c1"}).action
        'hold'
    """

    def __init__(self, name: str):
        self.name = name

    def entry(self, state: Any) -> ToolGateEntry:
        """This gate's ``ToolGateEntry`` in a graph state (empty when it has judged nothing yet)."""
        decisions = (
            state.get(DECISIONS_KEY) if isinstance(state, Mapping) else getattr(state, DECISIONS_KEY, None)
        ) or {}
        found = decisions.get(self.name)
        if not found:
            return {"gate": self.name, "kind": "tool_gate", "calls": {}}
        if found.get("kind") != "tool_gate":
            raise ValueError(
                f"state['{DECISIONS_KEY}'][{self.name!r}] belongs to another kind of gate ({found.get('kind')!r}); "
                "give the tool gate another name"
            )
        return {"gate": self.name, "kind": "tool_gate", "calls": dict(found.get("calls") or {})}

    def stored_verdict(self, state: Any, tool_call: Mapping[str, Any]) -> GateVerdict | None:
        """The verdict kept in graph state for exactly this call, or None."""
        item = self.entry(state)["calls"].get(call_key(tool_call))
        return None if item is None else _verdict(item)

    def stored_review(self, state: Any, tool_call: Mapping[str, Any]) -> ReviewDecision | None:
        """The reviewer's decision kept in graph state for exactly this call, or None."""
        item = self.entry(state)["calls"].get(call_key(tool_call)) or {}
        review = item.get("review")
        if not review:
            return None
        return ReviewDecision(
            review["type"], review.get("args"), review.get("message"), name=str(tool_call.get("name"))
        )

    def unjudged(self, state: Any, guards: Callable[[str | None], bool]) -> list[Mapping[str, Any]]:
        """Calls of the last AI message that ``guards`` and that have no stored verdict yet."""
        stored = self.entry(state)["calls"]
        return [c for c in last_tool_calls(state) if guards(c.get("name")) and call_key(c) not in stored]

    def held_unreviewed(self, state: Any) -> list[Mapping[str, Any]]:
        """Calls of the last AI message whose stored verdict is *hold* and that have no review yet."""
        return [call for call, _ in self.held_for_review(state)]

    def held_for_review(self, state: Any) -> list[tuple[Mapping[str, Any], GateVerdict]]:
        """``held_unreviewed`` calls, each with its stored verdict."""
        calls = self.entry(state)["calls"]
        held = [(c, calls.get(call_key(c)) or {}) for c in last_tool_calls(state)]
        return [(c, _verdict(item)) for c, item in held if item.get("action") == "hold" and not item.get("review")]

    def with_verdicts(self, state: Any, judged: Sequence[tuple[Mapping[str, Any], GateVerdict]]) -> dict[str, Any]:
        """The state update that keeps these verdicts (empty when there are none)."""
        if not judged:
            return {}
        entry = self.entry(state)
        for tool_call, verdict in judged:
            entry["calls"][call_key(tool_call)] = verdict_entry(tool_call, verdict)
        return {DECISIONS_KEY: {self.name: entry}}

    def with_reviews(self, state: Any, reviewed: Sequence[tuple[Mapping[str, Any], ReviewDecision]]) -> dict[str, Any]:
        """The state update that adds these reviews to the calls' stored verdicts (empty when there are none)."""
        if not reviewed:
            return {}
        entry = self.entry(state)
        for tool_call, decision in reviewed:
            key = call_key(tool_call)
            entry["calls"][key] = {**entry["calls"][key], "review": review_entry(decision)}
        return {DECISIONS_KEY: {self.name: entry}}


def _verdict(item: Mapping[str, Any]) -> GateVerdict:
    return GateVerdict(
        item["action"], item["probability"], item["reason"], item["trace_id"], item["judge"], item.get("autopilot_item")
    )
