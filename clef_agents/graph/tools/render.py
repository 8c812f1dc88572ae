"""What a decision model reads about tools: a proposed call with its interaction record, or a list of tools.

Example:
    >>> print(render_gate_state([GateTurn("user", "hi")], None))
    Interaction record:
    [user] hi
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.decisions import Noul, NoulCriteria
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from clef_agents import wire

PROPOSED_CHARS = 300
"""The proposed call's first line is cut to this many characters (the record keeps it whole)."""
TOOL_OUTPUT_CHARS = 500
"""Earlier tool output is cut to this many characters in the interaction record."""
OPENAI_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}

TOOL_RELEVANCE_QUESTION = Noul(
    instructions="Should one of the listed tools be called to handle the user's request?",
    criteria=NoulCriteria(
        true="One of the listed tools fits the request and should be called.",
        false="None of the listed tools fits the request; answer without a tool call.",
    ),
)
"""Ask it of ``tools_state(tools, messages)`` to decide whether to offer tools at all or answer
directly; the shipped ``mini`` is taught this question, with its request–tool match part."""

Role = Literal["user", "agent thought", "agent action", "environment"]


@dataclass(frozen=True)
class GateTurn:
    """One turn of the interaction record the gate reads: who (``user``, ``agent thought``,
    ``agent action``, ``environment``) and what."""

    role: Role
    text: str


def render_gate_state(turns: Sequence[GateTurn], proposed: str | None, description: str | None = None) -> str:
    """The gate's state: the proposed call (and its tool's description) first, so that it stays
    inside the backbone's window, then the interaction record, ending with the proposed call.
    Training records (``clef_agents.train.gate_records``) use the same layout.

    Example:
        >>> print(render_gate_state([GateTurn("user", "drop the test table")], 'drop_table{"name": "test"}'))
        Proposed tool call: drop_table{"name": "test"}
        <BLANKLINE>
        Interaction record:
        [user] drop the test table
        [agent action] drop_table{"name": "test"}
    """
    head = [] if proposed is None else [f"Proposed tool call: {clip(proposed, PROPOSED_CHARS)}"]
    if proposed is not None and description:
        head.append(f"Tool description: {description}")
    record = ["Interaction record:", *(f"[{t.role}] {t.text}" for t in turns)]
    if proposed is not None:
        record.append(f"[agent action] {proposed}")
    return "\n".join([*head, *([""] if head else []), *record])


def call_state(
    tool_call: Mapping[str, Any], messages: Sequence[Any], tool: BaseTool | None = None, history: int = 12
) -> str:
    """What the gate's model judges (``render_gate_state``): the proposed call and its tool's
    description, then the last ``history`` messages as an interaction record. The message that
    proposes ``tool_call`` adds only its text; arguments and tool output are data.

    Example:
        >>> from langchain_core.messages import AIMessage, HumanMessage
        >>> call = {"name": "pay", "args": {"to": "bob"}, "id": "1"}
        >>> print(call_state(call, [HumanMessage("pay bob"), AIMessage("", tool_calls=[call])]))
        Proposed tool call: pay{"to": "bob"}
        <BLANKLINE>
        Interaction record:
        [user] pay bob
        [agent action] pay{"to": "bob"}
    """
    recent = [m for m in messages if isinstance(m, BaseMessage)][-history:]
    turns = [turn for message in recent for turn in message_turns(message, tool_call.get("id"))]
    description = tool.description if tool is not None and tool.description else None
    return render_gate_state(
        turns, call_text(tool_call), None if description is None else clip(description, PROPOSED_CHARS)
    )


def tools_state(tools: Sequence[BaseTool | Mapping[str, Any] | Callable[..., Any]], messages: Any) -> str:
    """A state that lists tools (one JSON function schema per line) above the conversation: the
    layout the request–tool match of taught yes/no questions reads (``clef_agents.model.tool_match``).
    Messages are written ``role: content`` with the roles of function-calling APIs (user, assistant,
    system, tool), as in the bfcl_relevance records the shipped ``mini`` was taught on.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> def get_weather(city: str) -> str:
        ...     \"\"\"Current weather for a city.\"\"\"
        ...     return "sunny"
        >>> print(tools_state([get_weather], [HumanMessage("rain in Oslo?")]))
        Available tools:
        {"name": "get_weather", "description": "Current weather for a city.", "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"}}
        <BLANKLINE>
        Conversation:
        user: rain in Oslo?
    """
    if not tools:
        raise ValueError("tools_state needs at least one tool (a BaseTool, a function or a JSON schema dict), got none")
    lines = [json.dumps(convert_to_openai_tool(tool)["function"], ensure_ascii=False) for tool in tools]
    return (
        "Available tools:\n" + "\n".join(lines) + "\n\nConversation:\n" + wire.state_text(messages, roles=OPENAI_ROLES)
    )


def message_turns(message: BaseMessage, proposed_id: Any) -> list[GateTurn]:
    """The record turns of one message; the AI message that proposes ``proposed_id`` adds only its text.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> message_turns(HumanMessage("hi"), None)
        [GateTurn(role='user', text='hi')]
    """
    if message.type == "human":
        return [GateTurn("user", message_text(message))]
    if isinstance(message, ToolMessage):
        return [GateTurn("environment", clip(message_text(message), TOOL_OUTPUT_CHARS))]
    if isinstance(message, AIMessage):
        turns = [GateTurn("agent thought", message_text(message))] if message_text(message).strip() else []
        if proposed_id is not None and any(c.get("id") == proposed_id for c in message.tool_calls):
            return turns
        return turns + [GateTurn("agent action", call_text(c)) for c in message.tool_calls]
    return []


def call_text(tool_call: Mapping[str, Any]) -> str:
    """A call as one line: its name, then its arguments as JSON.

    Example:
        >>> call_text({"name": "pay", "args": {"to": "bob"}})
        'pay{"to": "bob"}'
    """
    return f"{tool_call.get('name')}{json.dumps(tool_call.get('args', {}), ensure_ascii=False, default=str)}"


def message_text(message: BaseMessage) -> str:
    """A message's content as text (non-text content as JSON)."""
    return message.content if isinstance(message.content, str) else json.dumps(message.content, default=str)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending with an ellipsis when cut.

    Example:
        >>> clip("abcdef", 4)
        'abc…'
    """
    return text if len(text) <= limit else text[: limit - 1] + "…"
