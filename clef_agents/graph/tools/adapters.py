"""The gate's LangGraph / LangChain faces: judging and review nodes, the ``ToolNode`` hooks, gated copies of
tools, and agent middleware. Each only asks the gate what to do with a call and does it.

Example:
    >>> from clef_agents.graph.tools import ToolGate
    >>> from clef_agents.testing import FakeDecisionModel
    >>> judging_node(ToolGate(FakeDecisionModel()), []).name
    'tool_gate'
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, Protocol

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.prebuilt import InjectedState
from pydantic import BaseModel, ValidationError, create_model
from typing_extensions import NotRequired

from clef_agents.graph.state import merge_decisions
from clef_agents.graph.tools.ledger import last_ai_message
from clef_agents.graph.tools.review import ReviewDecision

Settled = ToolMessage | ReviewDecision
"""What a tool step does with a call: send the model a refusal, or run it (approved, or as edited)."""


class Gate(Protocol):
    """What the adapters need of a tool gate (``ToolGate`` is one)."""

    @property
    def name(self) -> str: ...
    def guards(self, name: str | None) -> bool: ...
    def settle_call(self, state: Any, tool_call: Mapping[str, Any], tool: BaseTool | None = None) -> Settled: ...
    async def asettle_call(self, state: Any, tool_call: Mapping[str, Any], tool: BaseTool | None = None) -> Settled: ...
    def judge_pending(self, state: Any, tools: Sequence[BaseTool] = ()) -> dict[str, Any]: ...
    async def ajudge_pending(self, state: Any, tools: Sequence[BaseTool] = ()) -> dict[str, Any]: ...
    def review_pending(self, state: Any, tools: Sequence[BaseTool] = ()) -> dict[str, Any]: ...


# --------------------------------------------------------------------------- graph nodes


def judging_node(gate: Gate, tools: Sequence[BaseTool]) -> RunnableLambda:
    """A graph node (named after the gate) that judges the pending calls and stores the verdicts."""
    tools = list(tools)

    def judge_calls(state: Any) -> dict[str, Any]:
        return gate.judge_pending(state, tools)

    async def ajudge_calls(state: Any) -> dict[str, Any]:
        return await gate.ajudge_pending(state, tools)

    return RunnableLambda(judge_calls, afunc=ajudge_calls, name=gate.name)


def review_node(gate: Gate, tools: Sequence[BaseTool]) -> RunnableLambda:
    """A graph node (``<gate>_review``) that asks a person about every held call and keeps the decisions."""
    tools = list(tools)

    def review_calls(state: Any) -> dict[str, Any]:
        return gate.review_pending(state, tools)

    return RunnableLambda(review_calls, name=f"{gate.name}_review")


# --------------------------------------------------------------------------- ToolNode hooks


def wrap_tool_call(gate: Gate, request: Any, handler: Callable[[Any], Any]) -> Any:
    """``ToolNode(wrap_tool_call=...)``: run the call, run it as edited, or return the refusal."""
    call = request.tool_call
    if not gate.guards(call.get("name")):
        return handler(request)
    settled = gate.settle_call(request.state, call, request.tool)
    if isinstance(settled, ToolMessage):
        return settled
    return _noted(handler(_edited(request, settled)), settled)


async def awrap_tool_call(gate: Gate, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
    """Async ``wrap_tool_call``."""
    call = request.tool_call
    if not gate.guards(call.get("name")):
        return await handler(request)
    settled = await gate.asettle_call(request.state, call, request.tool)
    if isinstance(settled, ToolMessage):
        return settled
    return _noted(await handler(_edited(request, settled)), settled)


def _edited(request: Any, decision: ReviewDecision) -> Any:
    if decision.type != "edit" or decision.args is None:
        return request
    return request.override(tool_call={**request.tool_call, "args": decision.args})


def _noted(result: Any, decision: ReviewDecision) -> Any:
    """A tool result with a note that a reviewer edited the call (so the agent knows what ran)."""
    if decision.type != "edit" or not isinstance(result, ToolMessage) or not isinstance(result.content, str):
        return result
    note = f"A reviewer edited this call before it ran; it ran with arguments {json.dumps(decision.args, default=str)}."
    return result.model_copy(update={"content": f"{note}\n{result.content}"})


# --------------------------------------------------------------------------- gated copies of tools


def gated_tool(gate: Gate, tool: BaseTool) -> BaseTool:
    """A copy of ``tool`` (same name, description, arguments and metadata) that asks ``gate`` first;
    inside a ``ToolNode`` it reads the graph state (``InjectedState``)."""
    schema = (
        tool.args_schema if isinstance(tool.args_schema, type) and issubclass(tool.args_schema, BaseModel) else None
    )
    if schema is None:
        raise TypeError(
            f"wrap_tools needs tools with a pydantic args_schema; {tool.name!r} has {type(tool.args_schema).__name__}"
        )
    gated_schema = create_model(
        f"{schema.__name__}Gated", __base__=schema, clef_gate_state=(Annotated[Any, InjectedState], None)
    )

    def run(clef_gate_state: Any = None, **kwargs: Any) -> Any:
        state = clef_gate_state or {}
        settled = gate.settle_call(state, _matching_call(state, tool, kwargs), tool)
        if isinstance(settled, ToolMessage):
            return settled.content
        return tool.invoke(settled.args if settled.type == "edit" and settled.args is not None else kwargs)

    return StructuredTool.from_function(
        func=run, name=tool.name, description=tool.description, args_schema=gated_schema, metadata=tool.metadata
    )


def _matching_call(state: Any, tool: BaseTool, args: Mapping[str, Any]) -> dict[str, Any]:
    """The last AI message's call to ``tool`` whose arguments validate to ``args`` (for its id and
    its arguments as proposed), else an id-less call."""
    last = last_ai_message(state)
    wanted = _validated(tool, args)
    for candidate in last.tool_calls if last is not None else []:
        if candidate.get("name") == tool.name and _validated(tool, candidate.get("args", {})) == wanted:
            return dict(candidate)
    return {"name": tool.name, "args": dict(args), "id": None}


def _validated(tool: BaseTool, args: Mapping[str, Any]) -> Any:
    schema = tool.tool_call_schema
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return dict(args)
    try:
        return schema.model_validate(dict(args)).model_dump()
    except ValidationError:
        return None


# --------------------------------------------------------------------------- agent middleware


def gate_middleware(gate: Gate) -> Any:
    """``gate`` as LangChain 1.x agent middleware: judges in ``after_model``, reviews in ``wrap_tool_call``."""
    agent_middleware, agent_state = _agent_framework()

    class ToolGateState(agent_state):  # type: ignore[misc,valid-type]
        decisions: NotRequired[Annotated[dict[str, Any], merge_decisions]]

    class ClefToolGateMiddleware(agent_middleware):  # type: ignore[misc,valid-type]
        """Judges each proposed tool call with a clef_agents ToolGate."""

        state_schema = ToolGateState

        @property
        def name(self) -> str:
            return f"ClefToolGate[{gate.name}]"

        def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            return gate.judge_pending(state) or None

        async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            return await gate.ajudge_pending(state) or None

        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            return wrap_tool_call(gate, request, handler)

        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            return await awrap_tool_call(gate, request, handler)

    return ClefToolGateMiddleware()


def _agent_framework() -> tuple[type, type]:
    """LangChain's ``AgentMiddleware`` and ``AgentState``, or an ImportError that names the wiring without them."""
    try:
        # imported here: langchain's agent framework is an optional extra (clef-agents[agents])
        from langchain.agents.middleware import AgentMiddleware, AgentState
    except ImportError as exc:
        raise ImportError(
            "ToolGate.middleware() needs LangChain's agent framework: pip install 'clef-agents[agents]'. "
            "Without it, wire the gate into a StateGraph (docs/graph.md, 'Wiring'): agent -> "
            "gate.node(tools) -> gate.review_node(tools) -> ToolNode(tools, wrap_tool_call=gate.wrap_tool_call, "
            "awrap_tool_call=gate.awrap_tool_call), with a checkpointer; a ToolNode alone refuses every call "
            "the gate would hold"
        ) from exc
    return AgentMiddleware, AgentState
