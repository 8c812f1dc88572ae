"""The LangGraph layer: decision nodes, lanes, LLM and human escalation, tool gate, decision traces.

It depends on ``BaseDecisionModel`` only (local, remote or fake models work unchanged) and never
imports torch. Names are imported lazily.

Example:
    >>> from clef_agents.graph import DecisionGate, DecisionState, route_by_choice
    >>> DecisionGate.__name__
    'DecisionGate'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clef_agents.lazy import lazy_attributes

if TYPE_CHECKING:
    from clef_agents.graph.errors import (
        DecisionModelError,
        GraphInputError,
        NoChatModelWarning,
        ReviewInputError,
        UntaughtQuestionWarning,
    )
    from clef_agents.graph.escalation import HumanEscalationNode, LLMEscalationNode, parse_review
    from clef_agents.graph.fakes import FakeToolCallingChatModel
    from clef_agents.graph.node import DecisionNode
    from clef_agents.graph.ready import (
        DEMO_MESSAGES,
        build_moderation,
        build_support_triage,
        build_tool_approval,
        demo_agent_model,
        demo_escalation_llm,
        demo_fake_model,
        load_decision_model,
    )
    from clef_agents.graph.routing import (
        GATE_ACTIONS,
        LANES,
        DecisionGate,
        GateAction,
        Lane,
        decided_label,
        gate_lane,
        next_step,
        route_by_choice,
        route_by_noul,
        route_by_score,
    )
    from clef_agents.graph.state import DecisionState, ToolCallVerdict, ToolGateEntry, final_labels, response_from_state
    from clef_agents.graph.tools import (
        TOOL_RELEVANCE_QUESTION,
        GateTurn,
        GateVerdict,
        ReviewDecision,
        ToolGate,
        UntaughtGateQuestionWarning,
        call_key,
        call_state,
        decision_tool,
        parse_decision,
        render_gate_state,
        tools_state,
    )
    from clef_agents.graph.traces import TraceStore

_dynamic_imports: dict[str, str] = {
    "DecisionModelError": "errors",
    "GraphInputError": "errors",
    "NoChatModelWarning": "errors",
    "ReviewInputError": "errors",
    "UntaughtQuestionWarning": "errors",
    "HumanEscalationNode": "escalation",
    "LLMEscalationNode": "escalation",
    "parse_review": "escalation",
    "FakeToolCallingChatModel": "fakes",
    "DecisionNode": "node",
    "DEMO_MESSAGES": "ready",
    "build_moderation": "ready",
    "build_support_triage": "ready",
    "build_tool_approval": "ready",
    "demo_agent_model": "ready",
    "demo_escalation_llm": "ready",
    "demo_fake_model": "ready",
    "load_decision_model": "ready",
    "DecisionGate": "routing",
    "GATE_ACTIONS": "routing",
    "LANES": "routing",
    "GateAction": "routing",
    "Lane": "routing",
    "decided_label": "routing",
    "gate_lane": "routing",
    "next_step": "routing",
    "route_by_choice": "routing",
    "route_by_noul": "routing",
    "route_by_score": "routing",
    "DecisionState": "state",
    "final_labels": "state",
    "response_from_state": "state",
    "ToolCallVerdict": "state",
    "ToolGateEntry": "state",
    "GateTurn": "tools",
    "GateVerdict": "tools",
    "ReviewDecision": "tools",
    "call_key": "tools",
    "call_state": "tools",
    "parse_decision": "tools",
    "render_gate_state": "tools",
    "ToolGate": "tools",
    "UntaughtGateQuestionWarning": "tools",
    "decision_tool": "tools",
    "TOOL_RELEVANCE_QUESTION": "tools",
    "tools_state": "tools",
    "TraceStore": "traces",
}

__all__ = list(_dynamic_imports)


__getattr__, __dir__ = lazy_attributes(__name__, {n: f"{__name__}.{m}" for n, m in _dynamic_imports.items()}, globals())
