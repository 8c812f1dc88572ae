"""Ready graphs: support triage, tool-call approval for an agent, and a content-moderation gate.

Each builder takes any ``BaseDecisionModel``. ``load_decision_model`` picks one by its spec, with
the meaning ``clef_agents.loading.load_model`` gives it: ``"mini"`` (the default) or a checkpoint
folder load ``ClefDecisionModel`` lazily; ``"fake-keywords"`` gives ``demo_fake_model()``, a
keyword-scripted fake for offline tests and demos; ``"fake"`` the hashed ``FakeDecisionModel``. The
escalation LLM and the agent in these graphs are scripted fakes (``FakeToolCallingChatModel``)
unless you pass a real chat model. The scripted fakes live in ``clef_agents.graph.demo_models`` and
are importable from here.

Example:
    >>> graph = build_support_triage(demo_fake_model())
    >>> sorted(graph.get_graph().nodes)[:3]
    ['__end__', '__start__', 'billing_desk']
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain_core.decisions import BaseDecisionModel, Choice, Noul, NoulCriteria, Score
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from clef_agents import wire
from clef_agents.graph.demo_models import demo_agent_model, demo_escalation_llm, demo_fake_model
from clef_agents.graph.errors import GraphInputError
from clef_agents.graph.routing import DecisionGate, route_by_choice, route_by_noul
from clef_agents.graph.state import DecisionState, final_labels
from clef_agents.graph.tools import APPROVAL_METADATA, SHIPPED_BLOCK_AT, SHIPPED_HOLD_AT, ToolGate
from clef_agents.graph.traces import TraceStore
from clef_agents.loading import DEFAULT_SPEC, load_model
from clef_agents.policy import LanePolicy

MODEL_ENV = "CLEF_AGENTS_MODEL"
POLICY_ENV = "CLEF_AGENTS_POLICY"
TRACES_ENV = "CLEF_AGENTS_TRACES"

SUPPORT_QUESTIONS: dict[str, Any] = {
    "urgent": Noul(
        instructions="Does this support message need a response within the hour?",
        criteria=NoulCriteria(
            true="An outage, data loss, a security problem, or money at risk now.",
            false="It can wait for the normal queue.",
        ),
    ),
    "department": Choice(
        instructions="Which team should handle this support message?",
        criteria={
            "billing": "Charges, refunds, invoices, payment methods, subscriptions.",
            "technical": "Bugs, errors, crashes, outages, integrations, login problems.",
            "sales": "Pricing, quotes, new plans, more seats, demos.",
            "other": "None of these, or not enough information to tell.",
        },
    ),
    "severity": Score(
        instructions="How severe is the customer's problem?",
        criteria=[
            "Minor: a question or a cosmetic issue.",
            "Moderate: something is impaired but there is a workaround.",
            "Major: a key feature is broken for this customer.",
            "Critical: an outage, data loss, or a security incident.",
        ],
    ),
}

MODERATION_QUESTIONS: dict[str, Any] = {
    "violates": Noul(
        instructions="Does this post break the community rules (harassment, hate, threats, spam, explicit content)?",
        criteria=NoulCriteria(true="It breaks a rule and should not be published.", false="It can be published."),
    ),
    "category": Choice(
        instructions="Which kind of content is this post?",
        criteria={
            "ok": "Ordinary content that breaks no rule.",
            "spam": "Advertising, scams, or repeated unsolicited links.",
            "harassment": "Insults or attacks on a person.",
            "hate": "Attacks on a group for who they are.",
            "threat": "Threatens violence or harm.",
        },
    ),
}

DEMO_MESSAGES: tuple[str, ...] = (
    "I was charged twice for my subscription this month, please refund the duplicate invoice.",
    "The app crashes with error 500 every time I upload a file and production is down!",
    "Could you send me a quote for 50 more seats on the enterprise plan?",
    "My payment failed and now the dashboard shows an error when I open billing.",
    "Hello? Is anyone there?",
)


# --------------------------------------------------------------------------- models


def load_decision_model(spec: str | None = None) -> BaseDecisionModel:
    """The decision model named by ``spec`` (or ``$CLEF_AGENTS_MODEL``, default ``"mini"``), as
    ``clef_agents.loading.load_model`` reads it (torch is imported only for a real checkpoint).

    Example:
        >>> load_decision_model("fake-keywords").model
        'fake-keywords'
    """
    return load_model(spec or os.environ.get(MODEL_ENV) or DEFAULT_SPEC)


# --------------------------------------------------------------------------- support triage


class SupportState(MessagesState, DecisionState, total=False):
    """State of the support-triage graph."""

    destination: str


def _desk(name: str):
    def handle(state: Mapping[str, Any]) -> dict[str, Any]:
        labels = final_labels(state, "triage")
        urgent = "urgent" if labels.get("urgent") else "normal"
        note = f"[{name}] ticket queued ({urgent}, severity {labels.get('severity')})"
        return {"destination": name, "messages": [AIMessage(note, name=name)]}

    handle.__name__ = name
    return handle


def build_support_triage(
    model: BaseDecisionModel,
    *,
    chat_model: BaseChatModel | None = None,
    policy: LanePolicy | str | Path | Mapping[str, Any] | None = None,
    traces: TraceStore | str | Path | None = None,
    checkpointer: Any = None,
    autopilot: Any = None,
) -> Any:
    """Support triage: urgent? / department / severity → billing, technical or sales desk, or a human desk.

    Confident answers route automatically, the middle band goes to ``chat_model`` (when given),
    and the rest to a person through ``interrupt()``. With an ``autopilot`` (``clef_agents.autopilot``) nothing
    is automatic until the autopilot has certified a question from its teacher's answers (docs/autopilot.md).

    Example:
        >>> g = build_support_triage(demo_fake_model())
        >>> g.invoke({"messages": [("user", "please refund my invoice")]})["destination"]
        'billing_desk'
    """
    gate = DecisionGate(
        model,
        SUPPORT_QUESTIONS,
        name="triage",
        input=_last_user_message,
        policy=policy,
        chat_model=chat_model,
        traces=traces,
        autopilot=autopilot,
    )
    builder = StateGraph(SupportState)
    desks = {"billing": "billing_desk", "technical": "technical_desk", "sales": "sales_desk"}
    for node in (*desks.values(), "human_desk"):
        builder.add_node(node, _desk(node))
        builder.add_edge(node, END)
    gate.attach(builder, after=START, then=route_by_choice("triage", "department", desks, default="human_desk"))
    return builder.compile(checkpointer=checkpointer, name="support_triage")


def _last_user_message(state: Mapping[str, Any]) -> str:
    users = [m for m in state.get("messages", []) if isinstance(m, BaseMessage) and m.type == "human"]
    if not users:
        raise GraphInputError("gate 'triage' expected at least one user message in state['messages'], found none")
    return wire.state_text(users[-1].content)


# --------------------------------------------------------------------------- content moderation


class ModerationState(DecisionState, total=False):
    """State of the moderation graph: the post in, the verdict out."""

    post: str
    verdict: str


def build_moderation(
    model: BaseDecisionModel,
    *,
    chat_model: BaseChatModel | None = None,
    policy: LanePolicy | str | Path | Mapping[str, Any] | None = None,
    traces: TraceStore | str | Path | None = None,
    checkpointer: Any = None,
) -> Any:
    """A content-moderation gate: publish or reject a post; unsure cases go to a moderator.

    Example:
        >>> build_moderation(demo_fake_model()).invoke({"post": "lovely weather today"})["verdict"]
        'published'
    """
    gate = DecisionGate(
        model,
        MODERATION_QUESTIONS,
        name="moderation",
        input="post",
        policy=policy,
        chat_model=chat_model,
        traces=traces,
    )
    builder = StateGraph(ModerationState)
    builder.add_node("publish", lambda state: {"verdict": "published"})
    builder.add_node("reject", lambda state: {"verdict": "rejected"})
    builder.add_edge("publish", END)
    builder.add_edge("reject", END)
    gate.attach(builder, after=START, then=route_by_noul("moderation", "violates", yes="reject", no="publish"))
    return builder.compile(checkpointer=checkpointer, name="moderation")


# --------------------------------------------------------------------------- tool-call approval


@tool
def lookup_order(order_id: str) -> str:
    """Look up the status of an order (demo tool: returns a canned status)."""
    return f"order {order_id}: shipped"


@tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund money to the customer for an order (demo tool: nothing is paid)."""
    return f"refunded {amount:.2f} for order {order_id}"


@tool
def delete_account(user_id: str) -> str:
    """Delete a customer account and all its data (demo tool: nothing is deleted)."""
    return f"deleted account {user_id}"


delete_account.metadata = {APPROVAL_METADATA: "always"}  # its author says: a person approves every deletion
DEMO_TOOLS = (lookup_order, issue_refund, delete_account)


class ToolApprovalState(MessagesState, DecisionState, total=False):
    """State of the tool-approval graph: the conversation and the gate's verdicts (``decisions``)."""


def build_tool_approval(
    model: BaseDecisionModel,
    *,
    agent_model: BaseChatModel | None = None,
    tools: tuple[Any, ...] = DEMO_TOOLS,
    traces: TraceStore | str | Path | None = None,
    hold_at: float = SHIPPED_HOLD_AT,
    block_at: float | None = SHIPPED_BLOCK_AT,
    checkpointer: Any = None,
) -> Any:
    """An agent whose every tool call is judged first: run, wait for approval, or refuse.

    Input: ``{"messages": [...]}``. The ``tool_gate`` node judges each proposed call and keeps the
    verdict in ``state["decisions"]["tool_gate"]``; ``tool_gate_review`` asks a person about each
    held call (``interrupt()`` with a ``HumanInTheLoopMiddleware``-shaped request) before any tool
    runs; the ``tools`` node then runs, runs as edited, or refuses each call.

    Example:
        >>> g = build_tool_approval(demo_fake_model())
        >>> g.invoke({"messages": [("user", "where is order 12?")]})["messages"][-1].content
        'Result: order 12: shipped'
    """
    agent = (agent_model or demo_agent_model()).bind_tools(list(tools))
    gate = ToolGate(model, hold_at=hold_at, block_at=block_at, traces=traces, name="tool_gate", tools=list(tools))

    def call_agent(state: ToolApprovalState) -> dict[str, Any]:
        return {"messages": [agent.invoke(state["messages"])]}

    def after_agent(state: ToolApprovalState) -> str:
        last = state["messages"][-1]
        return gate.name if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(ToolApprovalState)
    builder.add_node("agent", call_agent)
    builder.add_node(gate.name, gate.node(list(tools)))
    review = gate.review_node(list(tools))
    builder.add_node(review.name, review)
    builder.add_node(
        "tools", ToolNode(list(tools), wrap_tool_call=gate.wrap_tool_call, awrap_tool_call=gate.awrap_tool_call)
    )
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", after_agent, [gate.name, END])
    builder.add_edge(gate.name, review.name)
    builder.add_edge(review.name, "tools")
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer, name="tool_approval")


__all__ = [
    "DEMO_MESSAGES",
    "DEMO_TOOLS",
    "MODERATION_QUESTIONS",
    "SUPPORT_QUESTIONS",
    "build_moderation",
    "build_support_triage",
    "build_tool_approval",
    "demo_agent_model",
    "demo_escalation_llm",
    "demo_fake_model",
    "load_decision_model",
    "served_settings",
]


# --------------------------------------------------------------------------- served by `langgraph dev`


def served_settings() -> dict[str, Any]:
    """Model, policy and traces for graphs served by ``langgraph dev`` (read from the environment)."""
    return {
        "model": load_decision_model(),
        "policy": os.environ.get(POLICY_ENV) or None,
        "traces": os.environ.get(TRACES_ENV) or Path.home() / ".cache" / "clef_agents" / "traces.sqlite",
    }
