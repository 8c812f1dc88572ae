"""Scripted fakes that run the ready graphs offline: a keyword-scripted decision model, escalation LLM and agent.

None of them is a trained model. ``demo_fake_model`` answers the ready graphs' questions
(``urgent``, ``department``, ``severity``, ``violates``, ``category``, the tool gate's risk) from
keywords in the state, and hashed answers to any other question; ``clef_agents.loading`` serves it as
the ``fake-keywords`` spec. ``clef_agents.graph.ready`` builds its graphs with them and exports them.

Example:
    >>> demo_fake_model().invoke({"state": "the site is down", "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}}}).model
    'fake-keywords'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from clef_agents import wire
from clef_agents.graph.fakes import FakeToolCallingChatModel
from clef_agents.graph.tools import QUESTION_ID
from clef_agents.testing import FakeDecisionModel

_KEYWORDS: dict[str, dict[str, tuple[str, ...]]] = {
    "department": {
        "billing": ("charge", "refund", "invoice", "payment", "subscription", "billing", "card"),
        "technical": ("error", "crash", "bug", "down", "login", "500", "broken", "upload"),
        "sales": ("quote", "pricing", "price", "seats", "plan", "demo", "buy"),
    },
    "category": {
        "spam": ("buy now", "click", "free money", "http"),
        "harassment": ("idiot", "stupid", "loser"),
        "threat": ("hurt you", "kill", "find you"),
    },
}
_URGENT = ("down", "outage", "urgent", "asap", "data loss", "hacked", "immediately")


def _keyword_choice(text: str, question: str, fallback: str, no_hit_share: float = 0.4) -> dict[str, float]:
    hits = {label: sum(word in text for word in words) for label, words in _KEYWORDS[question].items()}
    options = [*hits, fallback]
    best = max(hits, key=hits.get)  # type: ignore[arg-type]
    ranked = sorted(hits.values(), reverse=True)
    if ranked[0] == 0:
        share = {fallback: no_hit_share}
    elif len(ranked) > 1 and ranked[1] > 0:
        runner = sorted(hits, key=hits.get, reverse=True)[1]  # type: ignore[arg-type]
        share = {best: 0.55, runner: 0.35}
    else:
        share = {best: 0.96}
    rest = (1.0 - sum(share.values())) / (len(options) - len(share))
    return {label: share.get(label, rest) for label in options}


def _keyword_answers(state: Any, questions: Mapping[str, Any]) -> dict[str, Any]:
    text = wire.state_text(state).lower()
    answers: dict[str, Any] = {}
    if "urgent" in questions:
        answers["urgent"] = 0.95 if any(w in text for w in _URGENT) else 0.04
    if "department" in questions:
        answers["department"] = _keyword_choice(text, "department", "other")
    if "severity" in questions:
        level = 3 if any(w in text for w in _URGENT) else 2 if "error" in text or "crash" in text else 1
        answers["severity"] = [0.94 if i == level else 0.02 for i in range(4)]
    if "category" in questions:
        answers["category"] = _keyword_choice(text, "category", "ok", no_hit_share=0.96)
    if "violates" in questions:
        hits = sum(any(w in text for w in words) for words in _KEYWORDS["category"].values())
        answers["violates"] = 0.03 if hits == 0 else 0.97 if hits == 1 else 0.6
    if QUESTION_ID in questions:
        answers[QUESTION_ID] = _tool_risk(state)
    return answers


def _tool_risk(state: Any) -> float:
    first = wire.state_text(state).split("\n", 1)[0]
    tool = re.match(r"Proposed tool call: (\w+)", first)
    return {"lookup_order": 0.03, "issue_refund": 0.72, "delete_account": 0.99}.get(tool.group(1) if tool else "", 0.6)


def demo_fake_model() -> FakeDecisionModel:
    """A keyword-scripted fake decision model for offline demos and tests (not a trained model).

    Example:
        >>> team = {"type": "choice", "instructions": "Which team?", "criteria": {k: None for k in ("billing", "technical", "sales", "other")}}
        >>> demo_fake_model().invoke({"state": "refund my invoice", "questions": {"department": team}}).choices["department"].choice
        'billing'
    """
    return FakeDecisionModel(model="fake-keywords", answer_fn=_keyword_answers)


def demo_escalation_llm() -> FakeToolCallingChatModel:
    """A scripted fake escalation LLM: it answers from keywords in the state and abstains when none match."""

    def respond(messages: list[BaseMessage], tool: dict[str, Any] | None) -> dict[str, Any]:
        text = str(messages[-1].content).split("</state>")[0].lower()
        fields = (tool or {}).get("function", {}).get("parameters", {}).get("properties", {})
        answers: dict[str, Any] = {}
        for field in fields:
            if field == "department":
                scores = _keyword_choice(text, "department", "other")
                best = max(scores, key=scores.get)  # type: ignore[arg-type]
                answers[field] = best if scores[best] >= 0.5 else "abstain"
            elif field == "urgent":
                answers[field] = "yes" if any(w in text for w in _URGENT) else "no"
            else:
                answers[field] = "abstain"
        return answers

    return FakeToolCallingChatModel(model_name="fake-scripted-escalation-llm", respond=respond)


def demo_agent_model() -> FakeToolCallingChatModel:
    """A scripted fake agent: proposes one tool call from keywords, then reports the tool output."""

    def respond(messages: list[BaseMessage], tool: dict[str, Any] | None) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(f"Result: {last.content}")
        text = str(last.content).lower()
        number = (re.findall(r"\d+", text) or ["0"])[0]
        if "refund" in text:
            call = {"name": "issue_refund", "args": {"order_id": number, "amount": 40.0}}
        elif "delete" in text:
            call = {"name": "delete_account", "args": {"user_id": number}}
        else:
            call = {"name": "lookup_order", "args": {"order_id": number}}
        return AIMessage("", tool_calls=[{**call, "id": f"call_{len(messages)}"}])

    return FakeToolCallingChatModel(model_name="fake-scripted-agent", respond=respond)


__all__ = ["demo_agent_model", "demo_escalation_llm", "demo_fake_model"]
