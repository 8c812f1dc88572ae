"""What the graph layer keeps in LangGraph state, in a form every checkpointer can serialise.

Each decision gate owns one entry under the state key ``decisions`` (a dict merged by gate name).
An entry is plain JSON: the questions and the response in System One wire form, the input hash
that memoises the gate, the route trace (lane, probability and reason per question), and the
final label of each question with who decided it (``auto``, ``llm`` or ``human``).

Example:
    >>> from typing_extensions import NotRequired, TypedDict
    >>> class MyState(DecisionState):
    ...     ticket: str
    >>> merge_decisions({"a": {"x": 1}}, {"b": {"y": 2}})
    {'a': {'x': 1}, 'b': {'y': 2}}
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from langchain_core.decisions import Answer, ClassifierResponse
from typing_extensions import NotRequired, TypedDict

from clef_agents import wire
from clef_agents.lanes import GateAction, Lane

Source = Lane
"""Who gave a final label (the lane vocabulary of ``clef_agents.lanes``)."""
DECISIONS_KEY = "decisions"


def merge_decisions(current: Mapping[str, Any] | None, update: Mapping[str, Any] | None) -> dict[str, Any]:
    """State reducer for ``decisions``: each update replaces the entries of the gates it names.

    Example:
        >>> merge_decisions({"g": {"v": 1}}, {"g": {"v": 2}})
        {'g': {'v': 2}}
    """
    return {**(current or {}), **(update or {})}


class DecisionState(TypedDict, total=False):
    """Mix into a graph's state schema to give decision gates their key.

    Example:
        >>> from langgraph.graph import MessagesState
        >>> class TriageState(MessagesState, DecisionState):
        ...     destination: str
    """

    decisions: Annotated[dict[str, Any], merge_decisions]


Judge = Literal["model", "metadata", "fail_closed", "autopilot"]
"""What settled a tool-gate verdict: the decision model, the tool's own metadata, a failure
(the model raised, timed out or gave no valid probability), which blocks, or the gate's autopilot."""


class ToolReview(TypedDict):
    """A reviewer's decision on a held call, kept in graph state by the gate's review step so that
    the tool step acts on it without asking again.

    Example:
        >>> r: ToolReview = {"type": "reject", "args": None, "message": "not today"}
        >>> r["type"]
        'reject'
    """

    type: Literal["approve", "edit", "reject"]
    args: dict[str, Any] | None
    message: str | None


class ToolCallVerdict(TypedDict):
    """The tool gate's verdict on one proposed call, kept in graph state so that a resumed
    approval reads it instead of judging again (in the same process or another one).

    Example:
        >>> v: ToolCallVerdict = {"tool_call_id": "c1", "tool": "pay", "call_hash": "ab12", "action": "hold",
        ...     "lane": "human", "probability": 0.7, "reason": "p(needs approval)=0.700 >= hold_at 0.2",
        ...     "judge": "model", "trace_id": None}
        >>> v["lane"]
        'human'
    """

    tool_call_id: str | None
    tool: str
    call_hash: str
    """Hash of the tool name and arguments: part of the key, so a verdict never serves another call."""
    action: GateAction
    lane: Lane
    probability: float | None
    reason: str
    judge: Judge
    trace_id: str | None
    review: NotRequired[ToolReview]
    """Set by ``ToolGate.review_node`` once a person decided on a held call."""
    autopilot_item: NotRequired[str]
    """The autopilot's item key of a call it routed (its reviewer's decision becomes that item's label)."""


class ToolGateEntry(TypedDict):
    """A tool gate's entry in ``state["decisions"][gate_name]``: one verdict per call key
    (``tool_call_id:call_hash``, see ``clef_agents.graph.tools.call_key``).

    Example:
        >>> entry: ToolGateEntry = {"gate": "tool_gate", "kind": "tool_gate", "calls": {}}
        >>> entry["kind"]
        'tool_gate'
    """

    gate: str
    kind: Literal["tool_gate"]
    calls: dict[str, ToolCallVerdict]


def input_hash(state_input: Any, questions: Mapping[str, wire.TextQuestion]) -> str:
    """A stable hash of what a gate sends to the model: the rendered state and the questions.

    Example:
        >>> from langchain_core.decisions import Noul
        >>> len(input_hash("hi", {"q": Noul(instructions="Greeting?")}))
        24
    """
    body = wire.request_to_wire(state_input, questions)
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def response_to_state(response: ClassifierResponse) -> dict[str, Any]:
    """A response as JSON for state (System One wire form, ``x_`` extensions kept).

    Example:
        >>> from langchain_core.decisions import NoulAnswer
        >>> r = ClassifierResponse(model="m", answers={"q": NoulAnswer(type="noul", noul=0.5)})
        >>> response_to_state(r)["answers"]["q"]
        {'type': 'noul', 'noul': 0.5}
    """
    return wire.response_to_wire(response)


def response_from_state(body: Mapping[str, Any]) -> wire.DecisionResponse:
    """Re-hydrate a response stored by ``response_to_state``.

    Example:
        >>> response_from_state({"model": "m", "answers": {"q": {"type": "noul", "noul": 0.2}}}).nouls["q"].noul
        0.2
    """
    return wire.response_from_wire(body)


def questions_to_state(questions: Mapping[str, wire.TextQuestion]) -> dict[str, Any]:
    """Questions as System One JSON objects."""
    return {qid: wire.question_to_wire(q) for qid, q in questions.items()}


def questions_from_state(body: Mapping[str, Any]) -> dict[str, wire.TextQuestion]:
    """Typed questions from their stored JSON."""
    return wire.validate_questions(dict(body))


def canonical_label(question: wire.TextQuestion, label: Any) -> bool | str | int:
    """A label in decision-record form: noul → bool, choice → option name, score → int level.

    Raises ``ValueError`` naming the allowed labels when the label is illegal.

    Example:
        >>> from langchain_core.decisions import Noul
        >>> canonical_label(Noul(instructions="Spam?"), "yes")
        True
    """
    index = wire.label_index(question, label)
    if isinstance(question, wire.Noul):
        return index == 0
    if isinstance(question, wire.Score):
        return index
    return wire.option_names(question)[index]


def answer_label(question: wire.TextQuestion, answer: Answer) -> bool | str | int:
    """The label an answer decides, in decision-record form."""
    return canonical_label(question, wire.decided_label(answer))


def gate_entry(state: Mapping[str, Any], gate: str) -> dict[str, Any]:
    """The stored entry of a gate; raises ``KeyError`` naming the gates present when missing.

    Example:
        >>> gate_entry({"decisions": {"triage": {"final": {}}}}, "triage")
        {'final': {}}
    """
    decisions = state.get(DECISIONS_KEY) or {}
    if gate not in decisions:
        present = ", ".join(sorted(decisions)) or "none"
        raise KeyError(f"no decision of gate {gate!r} in state['{DECISIONS_KEY}'] (gates present: {present})")
    return decisions[gate]


def final_labels(state: Mapping[str, Any], gate: str) -> dict[str, Any]:
    """Question id → final label of a gate (only the questions decided so far).

    Example:
        >>> final_labels({"decisions": {"g": {"final": {"q": {"label": True, "source": "auto"}}}}}, "g")
        {'q': True}
    """
    return {qid: item["label"] for qid, item in gate_entry(state, gate).get("final", {}).items()}


def pending_questions(entry: Mapping[str, Any]) -> list[str]:
    """Question ids of an entry that have no final label yet."""
    final = entry.get("final", {})
    return [qid for qid in entry["questions"] if qid not in final]


def state_excerpt(state_input: Any, limit: int = 600) -> str:
    """The first ``limit`` characters of the rendered state (for reviewers and traces)."""
    text = wire.state_text(state_input)
    return text if len(text) <= limit else text[: limit - 1] + "…"
