"""Edge helpers that route on calibrated answers, and ``DecisionGate``, which wires the lanes.

Edge helpers read a gate's *final* label when one exists (auto, LLM or human), so the same edge
works before and after escalation. ``DecisionGate.attach`` adds three nodes to a ``StateGraph``
(decide, ``<name>_llm``, ``<name>_human``) and the edges between them: questions in the auto lane are
done, the LLM answers the middle band, and whatever is still open goes to a person.

Example:
    >>> route = route_by_choice("triage", "dept", {"billing": "billing_desk"}, default="human_desk")
    >>> route({"decisions": {"triage": {"final": {"dept": {"label": "billing", "source": "auto"}}}}})
    'billing_desk'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_core.decisions import BaseDecisionModel
from langchain_core.language_models import BaseChatModel
from langgraph.graph import StateGraph

from clef_agents.graph.escalation import HumanEscalationNode, LLMEscalationNode
from clef_agents.graph.node import DecisionNode, InputSpec, SliceSpec
from clef_agents.graph.state import gate_entry, pending_questions, response_from_state
from clef_agents.graph.traces import TraceStore
from clef_agents.lanes import GATE_ACTIONS, LANES, GateAction, Lane
from clef_agents.policy import LanePolicy

__all__ = [
    "GATE_ACTIONS",
    "LANES",
    "DecisionGate",
    "GateAction",
    "Lane",
    "decided_label",
    "gate_lane",
    "next_step",
    "route_by_choice",
    "route_by_noul",
    "route_by_score",
]

Router = Callable[[Mapping[str, Any]], str]


def _typed(fn: Callable[[Mapping[str, Any]], str], destinations: Sequence[str]) -> Router:
    """Annotate an edge function with ``Literal[destinations]`` so LangGraph can draw the graph."""
    unique = tuple(dict.fromkeys(destinations))
    fn.__annotations__ = {"state": Mapping[str, Any], "return": Literal[unique]}  # type: ignore[valid-type]
    fn.destinations = unique  # type: ignore[attr-defined]
    return fn


def decided_label(state: Mapping[str, Any], gate: str, question_id: str) -> Any:
    """The final label of a question, or the model's label when it has no final label yet.

    Example:
        >>> decided_label({"decisions": {"g": {"final": {"q": {"label": 2, "source": "human"}}}}}, "g", "q")
        2
    """
    entry = gate_entry(state, gate)
    final = entry.get("final", {})
    if question_id in final:
        return final[question_id]["label"]
    route = entry.get("route", {})
    if question_id not in route:
        raise KeyError(f"gate {gate!r} asked no question {question_id!r} (asked: {', '.join(route) or 'none'})")
    return route[question_id]["label"]


def route_by_choice(gate: str, question_id: str, routes: Mapping[str, str], *, default: str) -> Router:
    """Route on a choice: option name → node; any other option → ``default``.

    Example:
        >>> route_by_choice("g", "q", {"a": "node_a"}, default="other").destinations
        ('node_a', 'other')
    """

    def route(state: Mapping[str, Any]) -> str:
        return routes.get(decided_label(state, gate, question_id), default)

    return _typed(route, [*routes.values(), default])


def route_by_noul(gate: str, question_id: str, *, yes: str, no: str, threshold: float | None = None) -> Router:
    """Route on a noul. With ``threshold``, the model's p(yes) is compared to it unless a final
    label from an LLM or a human exists; without it, the final (or decided) label is used.

    Example:
        >>> s = {"decisions": {"g": {"final": {}, "route": {"q": {"label": False}}, "response": {"answers": {"q": {"type": "noul", "noul": 0.3}}}}}}
        >>> route_by_noul("g", "q", yes="stop", no="go", threshold=0.2)(s)
        'stop'
    """

    def route(state: Mapping[str, Any]) -> str:
        entry = gate_entry(state, gate)
        final = entry.get("final", {}).get(question_id)
        if threshold is not None and (final is None or final["source"] == "auto"):
            p_yes = response_from_state(entry["response"]).nouls[question_id].noul
            return yes if p_yes >= threshold else no
        return yes if decided_label(state, gate, question_id) else no

    return _typed(route, [yes, no])


def route_by_score(gate: str, question_id: str, bands: Mapping[int, str]) -> Router:
    """Route on a score level: ``bands`` maps the lowest level of each band to its node.

    Example:
        >>> s = {"decisions": {"g": {"final": {"sev": {"label": 3, "source": "auto"}}}}}
        >>> route_by_score("g", "sev", {0: "queue", 2: "pager"})(s)
        'pager'
    """
    if not bands or min(bands) != 0:
        raise ValueError(f"score bands must start at level 0, got lowest levels {sorted(bands)}")
    ordered = sorted(bands.items())

    def route(state: Mapping[str, Any]) -> str:
        level = int(decided_label(state, gate, question_id))
        return [node for lowest, node in ordered if lowest <= level][-1]

    return _typed(route, [node for _, node in ordered])


def next_step(entry: Mapping[str, Any], *, has_llm: bool) -> Literal["done", "llm", "human"]:  # "done" or a lane
    """What a gate needs next: ``done`` (every question has a final label), ``llm`` or ``human``.

    Example:
        >>> next_step({"questions": {"q": {}}, "final": {"q": {}}, "route": {}}, has_llm=True)
        'done'
    """
    open_ids = pending_questions(entry)
    if not open_ids:
        return "done"
    wants_llm = any(entry["route"][qid]["lane"] == "llm" for qid in open_ids)
    if has_llm and wants_llm and entry.get("llm") is None:
        return "llm"
    return "human"


def gate_lane(entry: Mapping[str, Any]) -> Lane:
    """The gate's overall lane: the most escalated lane among its questions (``LANES`` is ordered
    from least to most escalated).

    Example:
        >>> gate_lane({"route": {"a": {"lane": "auto"}, "b": {"lane": "llm"}}})
        'llm'
    """
    lanes = {item["lane"] for item in entry["route"].values()}
    return max(lanes, key=LANES.index) if lanes else LANES[0]


class DecisionGate:
    """A decision node with its LLM and human escalation, attachable to any ``StateGraph``.

    The graph's state schema needs the ``decisions`` key (mix in ``DecisionState``). Without ``chat_model``
    the ``llm`` lane goes to a person too; the gate says so once (``NoChatModelWarning``) and notes
    ``{"to": "llm", "outcome": "no chat model"}`` in the route trace of each such question.

    Example:
        >>> from langchain_core.decisions import Noul
        >>> from langgraph.graph import START, END, StateGraph
        >>> from clef_agents.graph.state import DecisionState
        >>> from clef_agents.testing import FakeDecisionModel
        >>> class S(DecisionState):
        ...     text: str
        >>> gate = DecisionGate(FakeDecisionModel(answers={"spam": 0.99}), {"spam": Noul(instructions="Spam?")},
        ...                     name="mod", input="text")
        >>> builder = StateGraph(S)
        >>> gate.attach(builder, after=START, then=END)
        >>> builder.compile().invoke({"text": "WIN A PRIZE"})["decisions"]["mod"]["final"]["spam"]["label"]
        True
    """

    def __init__(
        self,
        model: BaseDecisionModel,
        questions: Mapping[str, Any] | None = None,
        *,
        name: str = "decide",
        input: InputSpec = "messages",
        questions_key: str | None = None,
        policy: LanePolicy | str | Path | Mapping[str, Any] | None = None,
        slice_key: SliceSpec = None,
        chat_model: BaseChatModel | None = None,
        traces: TraceStore | str | Path | None = None,
        autopilot: Any = None,
        teacher_lane: str = "llm",
        untaught_auto: bool = False,
    ):
        self.node = DecisionNode(
            model,
            questions,
            name=name,
            input=input,
            questions_key=questions_key,
            policy=policy,
            slice_key=slice_key,
            traces=traces,
            autopilot=autopilot,
            teacher_lane=teacher_lane,
            untaught_auto=untaught_auto,
        )
        self.llm = None if chat_model is None else LLMEscalationNode(chat_model, self.node)
        self.human = HumanEscalationNode(self.node, has_llm=self.llm is not None)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def traces(self) -> TraceStore | None:
        return self.node.traces

    def next_node(self, then: str | Router, destinations: Sequence[str]) -> Router:
        """The edge function leaving each of the gate's nodes."""
        llm_name = None if self.llm is None else self.llm.name

        def route(state: Mapping[str, Any]) -> str:
            step = next_step(gate_entry(state, self.name), has_llm=self.llm is not None)
            if step == "llm":
                return llm_name  # type: ignore[return-value]
            if step == "human":
                return self.human.name
            return then(state) if callable(then) else then

        own = [n for n in (llm_name, self.human.name) if n is not None]
        return _typed(route, [*own, *destinations])

    def attach(
        self,
        builder: StateGraph,
        *,
        after: str | None,
        then: str | Router,
        destinations: Sequence[str] | None = None,
    ) -> None:
        """Add the gate's nodes after node ``after`` (or ``START``); when every question is decided
        go to ``then`` (a node name, or a router such as ``route_by_choice(...)``).

        ``destinations`` lists the nodes ``then`` may return; a router made here knows its own.
        """
        if destinations is None:
            destinations = [then] if isinstance(then, str) else list(getattr(then, "destinations", ()))
        if not destinations:
            raise ValueError("pass destinations=[...] naming every node the `then` router may return")
        taken = [n for n in self._node_names() if n in builder.nodes]
        if taken:
            raise ValueError(f"the graph already has nodes {taken}; give this gate another name (now {self.name!r})")
        builder.add_node(self.name, self.node)
        if self.llm is not None:
            builder.add_node(self.llm.name, self.llm)
        builder.add_node(self.human.name, self.human)
        if after is not None:
            builder.add_edge(after, self.name)
        router = self.next_node(then, destinations)
        for node in self._node_names():
            builder.add_conditional_edges(node, router, list(router.destinations))  # type: ignore[attr-defined]

    def _node_names(self) -> list[str]:
        return [self.name, *([self.llm.name] if self.llm else []), self.human.name]
