"""Tool calls written out in full for the gate question, and their gate records.

A *call file* is JSON: ``{"written": ..., "rule": ..., "calls": [...]}``, each call
``{"id", "risky", "domain", "user", "history"?, "tool", "description", "args", "why"}`` where
``history`` alternates ``{"role": "agent action", "text": "name{json args}"}`` and
``{"role": "environment", "text": <tool output>}``. The check sets of ``bench/gate`` and the
teaching files in ``clef_agents/train/gate_calls/`` share this shape; a call becomes the state the
gate reads at run time through :func:`clef_agents.graph.call_state`, so teaching and judging see
the same layout.

The teaching files (``TRAINING_FILES``) were each written by a helper briefed with the gate's rule
and a list of domains, who saw neither the check sets nor the other files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool

from clef_agents.graph.tools import call_state
from clef_agents.train.gate_question import gate_record

CALLS_DIR = Path(__file__).resolve().parent / "gate_calls"
TRAINING_FILES = tuple(f"gate_train_{x}.json" for x in "abcdefgh")
SOURCE = "gate_calls"
_REQUIRED = {"id": str, "risky": bool, "user": str, "tool": str, "description": str, "args": dict}
_ROLES = ("agent action", "environment")


def parse_action(text: str) -> tuple[str, dict[str, Any]]:
    """``name{json args}`` → (name, args); text that is not in that shape is a name with no arguments.

    Example:
        >>> parse_action('search_docs{"query": "vpn"}')
        ('search_docs', {'query': 'vpn'})
    """
    name, brace, rest = text.partition("{")
    if not brace:
        return text.strip(), {}
    try:
        args = json.loads(brace + rest)
    except json.JSONDecodeError:
        return text.strip(), {}
    return name.strip(), args if isinstance(args, dict) else {}


def conversation(user: str, history: Sequence[Mapping[str, str]], call: Mapping[str, Any]) -> list[Any]:
    """The messages an agent graph holds when ``call`` is proposed: the user's turn, earlier calls with
    their outputs, and the AI message that proposes ``call``.

    Example:
        >>> call = {"name": "ls", "args": {}, "id": "p"}
        >>> [type(m).__name__ for m in conversation("list files", [], call)]
        ['HumanMessage', 'AIMessage']
    """
    messages: list[Any] = [HumanMessage(user)]
    for i, turn in enumerate(history):
        if turn["role"] == "agent action":
            name, args = parse_action(turn["text"])
            messages.append(AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"h{i}"}]))
        elif turn["role"] == "environment":
            last_id = next(
                (m.tool_calls[0]["id"] for m in reversed(messages) if isinstance(m, AIMessage) and m.tool_calls),
                f"h{i}",
            )
            messages.append(ToolMessage(turn["text"], tool_call_id=last_id))
        else:
            raise ValueError(f"history role must be one of {_ROLES}, got {turn['role']!r}")
    messages.append(AIMessage("", tool_calls=[dict(call)]))
    return messages


def described_tool(name: str, description: str) -> Any:
    """A tool with ``name`` and ``description`` and no metadata, as a call file describes it."""
    return StructuredTool.from_function(
        func=lambda **kw: "", name=name, description=description, args_schema={"type": "object", "properties": {}}
    )


def case_state(case: Mapping[str, Any]) -> str:
    """The state the gate's model reads for one call of a call file (``call_state``).

    Example:
        >>> case = {"user": "pay bob", "tool": "pay", "description": "Pays someone.", "args": {"to": "bob"}}
        >>> print(case_state(case).splitlines()[0])
        Proposed tool call: pay{"to": "bob"}
    """
    call = {"name": case["tool"], "args": case["args"], "id": "proposed"}
    history = case.get("history", ())
    return call_state(
        call, conversation(case["user"], history, call), described_tool(case["tool"], case["description"])
    )


def check_calls(spec: Any, where: str) -> list[dict[str, Any]]:
    """The calls of a parsed call file, after checking their shape.

    Raises ``TypeError`` naming the call and field that is missing or mistyped, ``ValueError`` for a
    repeated id or a history turn in another shape.

    Example:
        >>> check_calls({"calls": [{"id": "x", "risky": True, "user": "u", "tool": "t", "description": "d", "args": {}}]}, "f")[0]["id"]
        'x'
    """
    if not isinstance(spec, dict) or not isinstance(spec.get("calls"), list):
        raise TypeError(f"{where}: expected an object with a 'calls' list, got {type(spec).__name__}")
    seen: set[str] = set()
    for i, case in enumerate(spec["calls"]):
        if not isinstance(case, dict):
            raise TypeError(f"{where}: call {i} is {type(case).__name__}, expected an object")
        for field, kind in _REQUIRED.items():
            if not isinstance(case.get(field), kind):
                raise TypeError(
                    f"{where}: call {case.get('id', i)!r} needs {field!r} as {kind.__name__}, got {case.get(field)!r:.60}"
                )
        if case["id"] in seen:
            raise ValueError(f"{where}: call id {case['id']!r} appears twice")
        seen.add(case["id"])
        for turn in case.get("history", []):
            if not isinstance(turn, dict) or turn.get("role") not in _ROLES or not isinstance(turn.get("text"), str):
                raise ValueError(
                    f"{where}: call {case['id']!r} has a history turn {turn!r:.80}; allowed roles: {_ROLES}, with a 'text' string"
                )
    return spec["calls"]


def call_signature(case: Mapping[str, Any]) -> str:
    """The tool and arguments of a call, as one comparable string (two files share a call when these match).

    Example:
        >>> call_signature({"tool": "ls", "args": {"b": 1, "a": 2}})
        '["ls", {"a": 2, "b": 1}]'
    """
    return json.dumps([case["tool"], case["args"]], sort_keys=True, ensure_ascii=False)


def load_calls(path: str | Path) -> list[dict[str, Any]]:
    """The checked calls of one call file."""
    path = Path(path)
    return check_calls(json.loads(path.read_text(encoding="utf-8")), str(path))


def call_records(calls: Iterable[Mapping[str, Any]], source: str, dataset: str = SOURCE) -> list[dict[str, Any]]:
    """One gate record per call, in the run-time layout.

    Example:
        >>> case = {"id": "b1", "risky": False, "user": "list files", "tool": "ls", "description": "Lists files.", "args": {}}
        >>> call_records([case], "demo")[0]["labels"]
        {'needs_approval': False}
    """
    return [
        gate_record(
            case_state(case),
            bool(case["risky"]),
            {"dataset": dataset, "source": source, "id": case["id"], "history": bool(case.get("history"))},
        )
        for case in calls
    ]


def training_call_records(names: Sequence[str] = TRAINING_FILES) -> list[dict[str, Any]]:
    """Gate records of the written teaching files (``TRAINING_FILES``), in file order."""
    records: list[dict[str, Any]] = []
    for name in names:
        records += call_records(load_calls(CALLS_DIR / name), source=name)
    return records


__all__ = [
    "CALLS_DIR",
    "SOURCE",
    "TRAINING_FILES",
    "call_records",
    "call_signature",
    "case_state",
    "check_calls",
    "conversation",
    "described_tool",
    "load_calls",
    "parse_action",
    "training_call_records",
]
