"""The decision model as a LangChain tool, and a tool gate that judges each proposed call first.

``decision_tool`` lets an agent ask typed questions itself (``content_and_artifact``: a sentence
for the LLM, the full System One response as the artifact). ``ToolGate`` judges every proposed tool
call before it runs: **allow** (p(needs approval) below ``hold_at``), **hold** for a person's
approval through ``interrupt()`` (between), or **block** (at or above ``block_at``, where one is set) with the reason
returned to the model. A tool's own metadata (``{"clef_agents.approval": "always" | "never"}``)
wins over the model. It fails closed: a model that raises, times out, is cancelled, or answers
anything but a finite probability in [0, 1] blocks the call. Verdicts live in graph state, one per
call (``ToolGateEntry``), so a resumed approval never judges again. Reviews take LangChain's
``HumanInTheLoopMiddleware`` decisions: approve, edit (arguments checked against the tool's
schema) or reject with a message. The tool's arguments and earlier tool output go into the model's
*state* as data; the question's instructions never change.

Modules, one job each: ``render`` (what the model reads), ``policy`` (allow / hold / block from the
answer, the thresholds and tool metadata), ``judging`` (asking the model, with a time limit, failing
closed), ``ledger`` (verdicts and reviews in graph state), ``records`` (decision traces), ``review``
(approval requests and reviewers' decisions), ``adapters`` (graph nodes, ``ToolNode`` hooks, wrapped
tools, agent middleware), ``model_tool`` (``decision_tool``) and ``gate`` (``ToolGate``, composed of them).

Example:
    >>> from clef_agents.testing import FakeDecisionModel
    >>> gate = ToolGate(FakeDecisionModel(answers={"needs_approval": 0.02}))
    >>> gate.judge({"name": "search", "args": {"q": "weather"}, "id": "1"}, []).action
    'allow'
"""

from __future__ import annotations

from clef_agents.graph.tools.gate import ALLOWED, ToolGate
from clef_agents.graph.tools.judging import (
    DEFAULT_TIMEOUT_S,
    GateTimeoutError,
    Judgement,
    ModelJudge,
    UntaughtGateQuestionWarning,
    call_with_timeout,
)
from clef_agents.graph.tools.ledger import (
    VerdictLedger,
    call_hash,
    call_key,
    review_entry,
    verdict_entry,
)
from clef_agents.graph.tools.model_tool import decision_tool, summarise
from clef_agents.graph.tools.policy import (
    APPROVAL_METADATA,
    APPROVAL_METADATA_VALUES,
    DEFAULT_GATE_QUESTION,
    QUESTION_ID,
    SHIPPED_BLOCK_AT,
    SHIPPED_HOLD_AT,
    Action,
    GateAnswerError,
    GatePolicy,
    GateVerdict,
    gate_probability,
    verdict_dict,
)
from clef_agents.graph.tools.records import GateRecords
from clef_agents.graph.tools.render import (
    OPENAI_ROLES,
    PROPOSED_CHARS,
    TOOL_RELEVANCE_QUESTION,
    GateTurn,
    Role,
    call_state,
    render_gate_state,
    tools_state,
)
from clef_agents.graph.tools.review import (
    APPROVAL_EXPECTED,
    APPROVAL_KIND,
    DECISIONS,
    ReviewDecision,
    edited_args,
    parse_decision,
)

__all__ = [
    "ALLOWED",
    "APPROVAL_EXPECTED",
    "APPROVAL_KIND",
    "APPROVAL_METADATA",
    "APPROVAL_METADATA_VALUES",
    "DECISIONS",
    "DEFAULT_GATE_QUESTION",
    "DEFAULT_TIMEOUT_S",
    "OPENAI_ROLES",
    "PROPOSED_CHARS",
    "QUESTION_ID",
    "SHIPPED_BLOCK_AT",
    "SHIPPED_HOLD_AT",
    "TOOL_RELEVANCE_QUESTION",
    "Action",
    "GateAnswerError",
    "GatePolicy",
    "GateRecords",
    "GateTimeoutError",
    "GateTurn",
    "GateVerdict",
    "Judgement",
    "ModelJudge",
    "ReviewDecision",
    "Role",
    "ToolGate",
    "UntaughtGateQuestionWarning",
    "VerdictLedger",
    "call_hash",
    "call_key",
    "call_state",
    "call_with_timeout",
    "decision_tool",
    "edited_args",
    "gate_probability",
    "parse_decision",
    "render_gate_state",
    "review_entry",
    "summarise",
    "tools_state",
    "verdict_dict",
    "verdict_entry",
]
