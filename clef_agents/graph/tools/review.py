"""Reviews of held calls: the ``interrupt()`` request in LangChain's human-in-the-loop shape, the reviewer's
approve / edit / reject decision read and checked, and the message the model gets when a call does not run.

Example:
    >>> parse_decision({"type": "approve"}).type
    'approve'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langgraph.types import interrupt
from pydantic import BaseModel, ValidationError

from clef_agents.graph.errors import ReviewInputError
from clef_agents.graph.tools.policy import GateVerdict

APPROVAL_KIND = "clef_agents.tool_approval"
DECISIONS = ("approve", "edit", "reject")
"""The review decisions a held call accepts (``HumanInTheLoopMiddleware``'s shapes)."""
APPROVAL_EXPECTED = (
    '{"decisions": [one decision]} or one decision: {"type": "approve"}, '
    '{"type": "edit", "edited_action": {"name": <same tool>, "args": {...}}}, '
    '{"type": "reject", "message": optional text}; also true/false, "approve"/"reject", '
    'or {"approved": true|false, "reason": optional text}'
)
_YES = ("approve", "approved", "yes")
_NO = ("reject", "rejected", "no")


@dataclass(frozen=True)
class ReviewDecision:
    """A reviewer's decision on a held call, in ``HumanInTheLoopMiddleware``'s vocabulary."""

    type: Literal["approve", "edit", "reject"]
    args: dict[str, Any] | None = None
    """The edited arguments (``edit`` only)."""
    message: str | None = None
    """The reviewer's reason (``reject`` only)."""
    name: str | None = None
    """The tool an edit names (it must be the held call's tool)."""


def parse_decision(value: Any) -> ReviewDecision:
    """A reviewer's resume value as a ``ReviewDecision``; ``ReviewInputError`` names the accepted shapes.

    Accepted: ``HumanInTheLoopMiddleware``'s ``{"decisions": [decision]}`` (exactly one) or a bare
    decision (``{"type": "approve"}``, ``{"type": "edit", "edited_action": {"name", "args"}}``,
    ``{"type": "reject", "message": ...}``), and the older ``true``/``false``, ``"approve"``/
    ``"reject"``, ``{"approved": bool, "reason": ...}``. Edited arguments are checked later,
    against the tool's schema.

    Example:
        >>> parse_decision({"decisions": [{"type": "reject", "message": "wrong account"}]})
        ReviewDecision(type='reject', args=None, message='wrong account', name=None)
    """
    value = _only_decision(value)
    if isinstance(value, bool):
        return ReviewDecision("approve" if value else "reject")
    if isinstance(value, str) and value.strip().lower() in (*_YES, *_NO):
        return ReviewDecision("approve" if value.strip().lower() in _YES else "reject")
    if isinstance(value, Mapping) and isinstance(value.get("approved"), bool):
        reason = value.get("reason")
        return (
            ReviewDecision("approve", None, None)
            if value["approved"]
            else ReviewDecision("reject", None, None if reason is None else str(reason))
        )
    if isinstance(value, Mapping) and value.get("type") in DECISIONS:
        return _typed_decision(value)
    raise ReviewInputError(f"got {type(value).__name__} {str(value)[:80]!r}", APPROVAL_EXPECTED)


def _only_decision(value: Any) -> Any:
    """The one decision of ``{"decisions": [decision]}``, or ``value`` itself when it has no such list."""
    if not (isinstance(value, Mapping) and "decisions" in value):
        return value
    decisions = value["decisions"]
    if not isinstance(decisions, Sequence) or isinstance(decisions, str) or len(decisions) != 1:
        found = len(decisions) if isinstance(decisions, list) else type(decisions).__name__
        raise ReviewInputError(f"got {found} decisions for one held call", APPROVAL_EXPECTED)
    return decisions[0]


def _typed_decision(value: Mapping[str, Any]) -> ReviewDecision:
    if value["type"] == "approve":
        return ReviewDecision("approve")
    if value["type"] == "reject":
        message = value.get("message")
        return ReviewDecision("reject", None, None if message is None else str(message))
    edited = value.get("edited_action")
    if not isinstance(edited, Mapping) or not isinstance(edited.get("args"), Mapping):
        raise ReviewInputError(f"an edit without edited_action.args (got {str(edited)[:80]!r})", APPROVAL_EXPECTED)
    return ReviewDecision(
        "edit", dict(edited["args"]), name=None if edited.get("name") is None else str(edited["name"])
    )


def edited_args(tool: BaseTool | None, tool_name: str, decision: ReviewDecision) -> dict[str, Any]:
    """The edited arguments, validated against the tool's argument schema (what the model sees).

    Raises ``ReviewInputError`` when the edit names another tool or its arguments do not fit.

    Example:
        >>> from langchain_core.tools import tool
        >>> @tool
        ... def pay(to: str, amount: float) -> str:
        ...     \"\"\"Send money.\"\"\"
        ...     return "ok"
        >>> edited_args(pay, "pay", ReviewDecision("edit", {"to": "bob", "amount": "12"}))
        {'to': 'bob', 'amount': '12'}
    """
    args = decision.args or {}
    if decision.name is not None and decision.name != tool_name:
        raise ReviewInputError(
            f"an edit that names tool {decision.name!r}",
            f"edits of `{tool_name}` only (edited_action.name {tool_name!r})",
        )
    schema = None if tool is None else tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            schema.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}" for e in exc.errors())
            expected = f"arguments matching {json.dumps(schema.model_json_schema().get('properties', {}))[:300]}"
            raise ReviewInputError(f"edited arguments that do not fit `{tool_name}` ({problems})", expected) from None
    return args


def review_request(
    gate: str, tool_call: Mapping[str, Any], verdict: GateVerdict, error: str | None = None
) -> dict[str, Any]:
    """The ``interrupt()`` payload of gate ``gate``: a ``HumanInTheLoopMiddleware`` ``HITLRequest`` for
    this one call (``action_requests`` / ``review_configs``) plus the gate's own keys.

    Example:
        >>> request = review_request("g", {"name": "pay", "args": {}, "id": "c1"}, GateVerdict("hold", 0.5, "risky"))
        >>> request["review_configs"], request["tool_call_id"]
        ([{'action_name': 'pay', 'allowed_decisions': ['approve', 'edit', 'reject']}], 'c1')
    """
    name = str(tool_call.get("name"))
    args = dict(tool_call.get("args") or {})
    description = f"Tool execution requires approval ({gate}): {verdict.reason}\n\nTool: {name}\nArgs: {json.dumps(args, default=str)}"
    payload: dict[str, Any] = {
        "action_requests": [{"name": name, "args": args, "description": description}],
        "review_configs": [{"action_name": name, "allowed_decisions": list(DECISIONS)}],
        "kind": APPROVAL_KIND,
        "gate": gate,
        "tool_call_id": tool_call.get("id"),
        "probability": verdict.probability,
        "reason": verdict.reason,
        "judge": verdict.judge,
        "expected": APPROVAL_EXPECTED,
    }
    if error is not None:
        payload["error"] = error
    return payload


def ask_reviewer(
    gate: str, tool_call: Mapping[str, Any], verdict: GateVerdict, tool: BaseTool | None
) -> ReviewDecision:
    """Ask a person through ``interrupt()`` until the answer is a valid decision (an edit's
    arguments must fit ``tool``'s schema); a wrong answer asks again with ``error`` set."""
    error: str | None = None
    while True:
        try:
            decision = parse_decision(interrupt(review_request(gate, tool_call, verdict, error)))
            if decision.type == "edit":
                decision = ReviewDecision(
                    "edit", edited_args(tool, str(tool_call.get("name")), decision), name=decision.name
                )
            return decision
        except ReviewInputError as exc:
            error = str(exc)


def refusal_message(tool_call: Mapping[str, Any], reason: str) -> ToolMessage:
    """The message the model gets instead of the tool's output.

    Example:
        >>> refusal_message({"name": "pay", "id": "c1"}, "it was blocked").status
        'error'
    """
    return ToolMessage(
        content=(
            f"The call to `{tool_call.get('name')}` was not run: {reason}. "
            "Do not retry it unchanged; ask the user or choose another action."
        ),
        tool_call_id=str(tool_call.get("id")),
        name=tool_call.get("name"),
        status="error",
    )


def rejection_message(tool_call: Mapping[str, Any], decision: ReviewDecision) -> ToolMessage:
    """The message for a rejected call (the reviewer's message, as LangChain's HITL words it)."""
    return refusal_message(tool_call, "a reviewer rejected it" + (f": {decision.message}" if decision.message else ""))
