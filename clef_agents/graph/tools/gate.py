"""``ToolGate``: judges each proposed tool call before it runs, composed of the package's parts: the policy
(``policy``), the model asked within a time limit (``judging``), verdicts in graph state (``ledger``), decision
traces (``records``), reviews (``review``) and its LangGraph / LangChain faces (``adapters``).

Example:
    >>> from clef_agents.testing import FakeDecisionModel
    >>> ToolGate(FakeDecisionModel(answers={"needs_approval": 0.5})).judge({"name": "pay", "args": {}, "id": "1"}, []).action
    'hold'
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_core.decisions import BaseDecisionModel, Noul
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool

from clef_agents import wire
from clef_agents.graph.node import as_trace_store
from clef_agents.graph.state import ToolGateEntry
from clef_agents.graph.tools import adapters
from clef_agents.graph.tools.autopilot import autopilot_verdict, gate_autopilot, record_review_label
from clef_agents.graph.tools.judging import DEFAULT_TIMEOUT_S, ModelJudge
from clef_agents.graph.tools.ledger import VerdictLedger, messages_of, run_thread_id
from clef_agents.graph.tools.policy import (
    DEFAULT_GATE_QUESTION,
    QUESTION_ID,
    SHIPPED_BLOCK_AT,
    SHIPPED_HOLD_AT,
    GatePolicy,
    GateVerdict,
)
from clef_agents.graph.tools.records import GateRecords
from clef_agents.graph.tools.render import call_state
from clef_agents.graph.tools.review import (
    ReviewDecision,
    ask_reviewer,
    refusal_message,
    rejection_message,
    review_request,
)
from clef_agents.graph.traces import TraceStore

ALLOWED = ReviewDecision("approve")
"""What ``settle_call`` gives a call that runs unreviewed."""


class ToolGate:
    """Judge each proposed tool call before it runs: allow, hold for approval, or block.

    Verdicts are kept in graph state (``state["decisions"][name]``, a ``ToolGateEntry`` keyed by
    ``call_key``), written by a judging step that runs before the tools: ``gate.node(tools)``
    between the agent and a ``ToolNode(tools, wrap_tool_call=gate.wrap_tool_call,
    awrap_tool_call=gate.awrap_tool_call)``; or ``gate.middleware()`` with ``create_agent``
    (judges in ``after_model``); or ``gate.wrap_tools(tools)`` behind ``gate.node(tools)``. The
    tool step reads the stored verdict, so a resumed approval never calls the model. A call with no
    stored verdict is judged where it runs; if that says *hold*, it is refused (a hold needs its
    verdict in state to survive a resume).

    Args:
        model: any ``BaseDecisionModel``; asked ``question`` (p(yes) = needs approval).
        hold_at: p at or above which a call waits for a person (below it runs).
        block_at: p at or above which a call is refused without asking; ``None`` (shipped): never.
        on_hold: ``"interrupt"`` (ask a person; needs a checkpointer) or ``"block"``.
        tools: names (or tools) to guard; ``None`` guards every tool. Tools given here also
            lend their description and metadata to judgements made before the tool step.
        traces: a ``TraceStore`` or path; each judgement and review is recorded there.
        timeout_s: seconds to wait for the model before blocking (``None``: no limit).
        autopilot: an ``Autopilot`` (``clef_agents.autopilot``) or a store path for one with target 0.99: each
            review of a held call becomes a label (approved as proposed: no approval needed; edited or rejected:
            needed), and a call runs without asking only where the autopilot is certified to say it needs no
            approval. Until then every call the model judges is held for a person (``block_at`` still refuses).
            Needs ``on_hold="interrupt"``. Docs: docs/autopilot.md.

    Example:
        >>> from clef_agents.testing import FakeDecisionModel
        >>> ToolGate(FakeDecisionModel(error=RuntimeError("down"))).judge({"name": "pay", "args": {}, "id": "1"}, []).action
        'block'
    """

    def __init__(
        self,
        model: BaseDecisionModel,
        *,
        hold_at: float = SHIPPED_HOLD_AT,
        block_at: float | None = SHIPPED_BLOCK_AT,
        question: Noul = DEFAULT_GATE_QUESTION,
        on_hold: Literal["interrupt", "block"] = "interrupt",
        tools: Sequence[str | BaseTool] | None = None,
        traces: TraceStore | str | Path | None = None,
        name: str = "tool_gate",
        history: int = 12,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        autopilot: Any = None,
    ):
        self.autopilot = gate_autopilot(autopilot, on_hold)
        self.model_judge = ModelJudge(model, question, timeout_s)
        self.policy = GatePolicy(hold_at, block_at, on_hold)
        self.ledger = VerdictLedger(name)
        self.records = GateRecords(as_trace_store(traces), name, self.model_judge.questions)
        self.guarded = None if tools is None else frozenset(t if isinstance(t, str) else t.name for t in tools)
        self.known_tools = {t.name: t for t in tools or () if isinstance(t, BaseTool)}
        self.history = history

    model = property(lambda self: self.model_judge.model, doc="The decision model the gate asks.")
    questions = property(lambda self: self.model_judge.questions, doc="``{QUESTION_ID: question}``, as asked.")
    timeout_s = property(lambda self: self.model_judge.timeout_s, doc="Seconds to wait for the model (None: no limit).")
    hold_at = property(lambda self: self.policy.hold_at, doc="p at or above which a call waits for a person.")
    block_at = property(lambda self: self.policy.block_at, doc="p at or above which a call is refused (None: never).")
    on_hold = property(lambda self: self.policy.on_hold, doc="What a hold does: ``interrupt`` or ``block``.")
    traces = property(lambda self: self.records.store, doc="The trace store, or None.")
    name = property(lambda self: self.ledger.name, doc="The gate's name (its key under ``state['decisions']``).")

    def guards(self, name: str | None) -> bool:
        """Whether calls to this tool are judged."""
        return self.guarded is None or name in self.guarded

    def _tool(self, tool_call: Mapping[str, Any], tool: BaseTool | None) -> BaseTool | None:
        return tool if tool is not None else self.known_tools.get(str(tool_call.get("name")))

    # ------------------------------------------------------------------ judging

    def gate_state(self, tool_call: Mapping[str, Any], messages: Sequence[Any], tool: BaseTool | None = None) -> str:
        """What the model judges: ``call_state`` over the last ``history`` messages."""
        return call_state(tool_call, messages, tool, self.history)

    def verdict_for(self, probability: float) -> GateVerdict:
        """The verdict the thresholds give a valid probability.

        Example:
            >>> from clef_agents.testing import FakeDecisionModel
            >>> ToolGate(FakeDecisionModel(), hold_at=0.2).verdict_for(0.3).action
            'hold'
        """
        return self.policy.verdict_for(probability)

    def metadata_verdict(self, tool: BaseTool | None) -> GateVerdict | None:
        """The verdict the tool's own metadata gives (``{"clef_agents.approval": "always"|"never"}``),
        or None when it says nothing. An unknown value blocks."""
        return self.policy.metadata_verdict(tool)

    def judge(
        self,
        tool_call: Mapping[str, Any],
        messages: Sequence[Any],
        tool: BaseTool | None = None,
        thread_id: str | None = None,
    ) -> GateVerdict:
        """Judge one proposed call now (the model is asked unless the tool's metadata decides).

        Never raises for a model problem: a model that raises, hangs past ``timeout_s``, is
        cancelled or gives no valid probability blocks the call.
        """
        tool = self._tool(tool_call, tool)
        decided = self.metadata_verdict(tool)
        if decided is not None:
            return self._record(tool_call, None, None, decided, thread_id)
        state = self.gate_state(tool_call, messages, tool)
        judged = self.model_judge.judge(state, self.verdict_for)
        if judged.response is None:  # the model failed: the call is blocked, and there is no answer to record
            return judged.verdict
        self.warn_if_untaught(judged.response)
        return self._record(tool_call, state, judged.response, self._with_autopilot(state, judged.verdict), thread_id)

    async def ajudge(
        self,
        tool_call: Mapping[str, Any],
        messages: Sequence[Any],
        tool: BaseTool | None = None,
        thread_id: str | None = None,
    ) -> GateVerdict:
        """Async ``judge`` (the timeout is ``asyncio.wait_for``; cancelling the caller still cancels)."""
        tool = self._tool(tool_call, tool)
        decided = self.metadata_verdict(tool)
        if decided is not None:
            return await asyncio.to_thread(self._record, tool_call, None, None, decided, thread_id)
        state = self.gate_state(tool_call, messages, tool)
        judged = await self.model_judge.ajudge(state, self.verdict_for)
        if judged.response is None:
            return judged.verdict
        self.warn_if_untaught(judged.response)
        verdict = await asyncio.to_thread(self._with_autopilot, state, judged.verdict)
        return await asyncio.to_thread(self._record, tool_call, state, judged.response, verdict, thread_id)

    def _with_autopilot(self, state: str, verdict: GateVerdict) -> GateVerdict:
        if self.autopilot is None:
            return verdict
        return autopilot_verdict(self.autopilot, self.name, self.questions[QUESTION_ID], state, verdict)

    def warn_if_untaught(self, response: Any) -> bool:
        """Warn once (``UntaughtGateQuestionWarning``) when the model says it answered the gate question with its
        routing head, untaught (``x_untaught`` lists it): the answers are then close to chance, and the shipped
        thresholds were chosen for the taught ``DEFAULT_GATE_QUESTION``. Returns whether this response shows that.

        Example:
            >>> import warnings
            >>> from clef_agents import wire
            >>> from clef_agents.testing import FakeDecisionModel
            >>> gate = ToolGate(FakeDecisionModel())
            >>> with warnings.catch_warnings(record=True) as seen:
            ...     warnings.simplefilter("always")
            ...     gate.warn_if_untaught(wire.DecisionResponse(model="m", answers={}, extensions={"x_untaught": [QUESTION_ID]}))
            True
            >>> [w.category.__name__ for w in seen]
            ['UntaughtGateQuestionWarning']
        """
        return self.model_judge.warn_if_untaught(response, stacklevel=4)  # points at the caller of judge / ajudge

    def _record(
        self,
        tool_call: Mapping[str, Any],
        state: str | None,
        response: Any,
        verdict: GateVerdict,
        thread_id: str | None,
    ) -> GateVerdict:
        return self.records.verdict(tool_call, state, response, verdict, thread_id)

    # ------------------------------------------------------------------ verdicts in graph state

    def stored_verdict(self, state: Any, tool_call: Mapping[str, Any]) -> GateVerdict | None:
        """The verdict kept in graph state for exactly this call, or None."""
        return self.ledger.stored_verdict(state, tool_call)

    def entry(self, state: Any) -> ToolGateEntry:
        """This gate's ``ToolGateEntry`` in a graph state (empty when it has judged nothing yet)."""
        return self.ledger.entry(state)

    def pending_calls(self, state: Any) -> list[Mapping[str, Any]]:
        """Guarded calls of the last AI message that have no stored verdict yet."""
        return self.ledger.unjudged(state, self.guards)

    def judge_pending(self, state: Any, tools: Sequence[BaseTool] = ()) -> dict[str, Any]:
        """Judge the last AI message's calls that have no verdict yet; return the state update."""
        by_name = {t.name: t for t in tools}
        messages, thread_id = messages_of(state), run_thread_id()
        judged = [
            (c, self.judge(c, messages, by_name.get(c.get("name")), thread_id)) for c in self.pending_calls(state)
        ]
        return self.ledger.with_verdicts(state, judged)

    async def ajudge_pending(self, state: Any, tools: Sequence[BaseTool] = ()) -> dict[str, Any]:
        """Async ``judge_pending`` (the calls are judged one after another)."""
        by_name = {t.name: t for t in tools}
        messages, thread_id = messages_of(state), run_thread_id()
        judged = [
            (c, await self.ajudge(c, messages, by_name.get(c.get("name")), thread_id))
            for c in self.pending_calls(state)
        ]
        return self.ledger.with_verdicts(state, judged)

    def node(self, tools: Sequence[BaseTool] = ()) -> RunnableLambda:
        """A graph node that judges the pending calls and stores the verdicts; put it between the
        agent and the ``ToolNode`` (the graph's state needs the ``decisions`` key: ``DecisionState``)."""
        return adapters.judging_node(self, tools)

    def stored_review(self, state: Any, tool_call: Mapping[str, Any]) -> ReviewDecision | None:
        """The reviewer's decision kept in graph state for exactly this call (by ``review_node``), or None."""
        return self.ledger.stored_review(state, tool_call)

    def held_unreviewed(self, state: Any) -> list[Mapping[str, Any]]:
        """Calls of the last AI message whose stored verdict is *hold* and that have no review yet."""
        return self.ledger.held_unreviewed(state)

    def review_pending(self, state: Any, tools: Sequence[BaseTool] = ()) -> dict[str, Any]:
        """Ask a person about every held, unreviewed call of the last AI message (one ``interrupt()``
        each, in call order) and return the state update that keeps the decisions."""
        by_name = {t.name: t for t in tools}
        held = self.ledger.held_for_review(state)
        reviewed = [(call, self.review(call, verdict, by_name.get(str(call.get("name"))))) for call, verdict in held]
        return self.ledger.with_reviews(state, reviewed)

    def review_node(self, tools: Sequence[BaseTool] = ()) -> RunnableLambda:
        """A graph node that asks a person about every held call of the turn *before any tool
        runs*, and keeps the decisions in graph state; put it between ``gate.node(tools)`` and the
        ``ToolNode``. Without it a held call is reviewed at the tool step, where a resume re-runs
        the whole step (and with it the calls allowed beside the held one).

        Example:
            >>> from clef_agents.testing import FakeDecisionModel
            >>> ToolGate(FakeDecisionModel()).review_node().name
            'tool_gate_review'
        """
        return adapters.review_node(self, tools)

    # ------------------------------------------------------------------ the verdict a tool step acts on

    def _settled(
        self, state: Any, tool_call: Mapping[str, Any], tool: BaseTool | None
    ) -> tuple[GateVerdict | None, bool]:
        """(verdict, still to record) from the tool's metadata or graph state; (None, False) when
        the call must be judged now. The tool's metadata wins over a verdict the model gave."""
        return self.policy.settled(
            self.metadata_verdict(self._tool(tool_call, tool)), self.stored_verdict(state, tool_call)
        )

    def verdict_at_tool(self, state: Any, tool_call: Mapping[str, Any], tool: BaseTool | None = None) -> GateVerdict:
        """The verdict a tool step acts on: the tool's metadata, else the stored verdict, else a
        judgement made now (a *hold* made now blocks: it could not survive a resume)."""
        verdict, record = self._settled(state, tool_call, tool)
        if verdict is None:
            return self.policy.judged_at_tool(
                self.judge(tool_call, messages_of(state), self._tool(tool_call, tool), run_thread_id())
            )
        return self._record(tool_call, None, None, verdict, run_thread_id()) if record else verdict

    async def averdict_at_tool(
        self, state: Any, tool_call: Mapping[str, Any], tool: BaseTool | None = None
    ) -> GateVerdict:
        """Async ``verdict_at_tool`` (trace writes run in a thread)."""
        verdict, record = self._settled(state, tool_call, tool)
        if verdict is None:
            judged = await self.ajudge(tool_call, messages_of(state), self._tool(tool_call, tool), run_thread_id())
            return self.policy.judged_at_tool(judged)
        return (
            await asyncio.to_thread(self._record, tool_call, None, None, verdict, run_thread_id())
            if record
            else verdict
        )

    def settle_call(
        self, state: Any, tool_call: Mapping[str, Any], tool: BaseTool | None = None
    ) -> ToolMessage | ReviewDecision:
        """What the tool step does with a call: the refusal the model gets instead of its output, or
        the decision to run it (``ALLOWED``, a reviewer's approval, or an edit). A held call is
        reviewed unless graph state keeps a review of it.

        Example:
            >>> from clef_agents.testing import FakeDecisionModel
            >>> ToolGate(FakeDecisionModel(answers={"needs_approval": 0.01})).settle_call({}, {"name": "pay", "args": {}, "id": "1"})
            ReviewDecision(type='approve', args=None, message=None, name=None)
        """
        verdict = self.verdict_at_tool(state, tool_call, tool)
        if verdict.action != "hold":
            return self._unreviewed(tool_call, verdict)
        decision = self.stored_review(state, tool_call) or self.review(tool_call, verdict, tool)
        return self.rejection(tool_call, decision) if decision.type == "reject" else decision

    async def asettle_call(
        self, state: Any, tool_call: Mapping[str, Any], tool: BaseTool | None = None
    ) -> ToolMessage | ReviewDecision:
        """Async ``settle_call`` (trace writes run in a thread)."""
        verdict = await self.averdict_at_tool(state, tool_call, tool)
        if verdict.action != "hold":
            return self._unreviewed(tool_call, verdict)
        decision = self.stored_review(state, tool_call) or await self.areview(tool_call, verdict, tool)
        return self.rejection(tool_call, decision) if decision.type == "reject" else decision

    def _unreviewed(self, tool_call: Mapping[str, Any], verdict: GateVerdict) -> ToolMessage | ReviewDecision:
        if verdict.action == "allow":
            return ALLOWED
        return self.refusal(tool_call, f"it was blocked by the tool gate ({verdict.reason})")

    # ------------------------------------------------------------------ reviews

    def review_request(
        self, tool_call: Mapping[str, Any], verdict: GateVerdict, error: str | None = None
    ) -> dict[str, Any]:
        """The ``interrupt()`` payload: a ``HumanInTheLoopMiddleware`` ``HITLRequest`` for this one
        call (``action_requests`` / ``review_configs``) plus the gate's own keys."""
        return review_request(self.name, tool_call, verdict, error)

    def review(
        self, tool_call: Mapping[str, Any], verdict: GateVerdict, tool: BaseTool | None = None
    ) -> ReviewDecision:
        """Ask a person through ``interrupt()`` and record the decision in the trace store."""
        decision = self.ask(tool_call, verdict, tool)
        self.record_review(verdict, decision)
        return decision

    async def areview(
        self, tool_call: Mapping[str, Any], verdict: GateVerdict, tool: BaseTool | None = None
    ) -> ReviewDecision:
        """Async ``review`` (the trace write runs in a thread)."""
        decision = self.ask(tool_call, verdict, tool)
        await asyncio.to_thread(self.record_review, verdict, decision)
        return decision

    def ask(self, tool_call: Mapping[str, Any], verdict: GateVerdict, tool: BaseTool | None = None) -> ReviewDecision:
        """Ask a person through ``interrupt()`` until the answer is a valid decision (an edit's
        arguments must fit the tool's schema); a wrong answer asks again with ``error`` set."""
        return ask_reviewer(self.name, tool_call, verdict, self._tool(tool_call, tool))

    def record_review(self, verdict: GateVerdict, decision: ReviewDecision) -> None:
        """Apply a reviewer's decision: store it as the human outcome of the call's trace (needs
        approval = not approved as proposed) and, for a call the autopilot routed, as its label.
        Every review, sync or async, passes here once."""
        self.records.review(verdict, decision)
        record_review_label(self.autopilot, verdict, decision.type)

    def refusal(self, tool_call: Mapping[str, Any], reason: str) -> ToolMessage:
        """The message the model gets instead of the tool's output."""
        return refusal_message(tool_call, reason)

    def rejection(self, tool_call: Mapping[str, Any], decision: ReviewDecision) -> ToolMessage:
        """The message for a rejected call (the reviewer's message, as LangChain's HITL words it)."""
        return rejection_message(tool_call, decision)

    # ------------------------------------------------------------------ ToolNode, middleware and wrapped tools

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Hook for ``ToolNode(wrap_tool_call=...)`` and ``AgentMiddleware.wrap_tool_call``."""
        return adapters.wrap_tool_call(self, request, handler)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """Async hook for ``ToolNode(awrap_tool_call=...)`` and ``AgentMiddleware.awrap_tool_call``."""
        return await adapters.awrap_tool_call(self, request, handler)

    def middleware(self) -> Any:
        """This gate as LangChain 1.x agent middleware (``create_agent(..., middleware=[gate.middleware()])``):
        it judges each model turn's calls in ``after_model`` and stores the verdicts in the agent's
        state, and reviews held calls in ``wrap_tool_call``."""
        return adapters.gate_middleware(self)

    def wrap_tools(self, tools: Sequence[BaseTool]) -> list[BaseTool]:
        """Gated copies of tools (same name, description and arguments as the model sees them).

        Inside a ``ToolNode`` the copy reads the graph state (``InjectedState``), so verdicts stored
        by ``gate.node(tools)`` are used and held calls are reviewed; called on its own it judges
        the call alone, and a *hold* then blocks."""
        return [adapters.gated_tool(self, tool) if self.guards(tool.name) else tool for tool in tools]

    def describe(self) -> dict[str, Any]:
        """The gate's settings as JSON."""
        return {
            "name": self.name,
            "hold_at": self.hold_at,
            "block_at": self.block_at,
            "on_hold": self.on_hold,
            "timeout_s": self.timeout_s,
            "guarded": None if self.guarded is None else sorted(self.guarded),
            "question": wire.question_to_wire(self.questions[QUESTION_ID]),
            "autopilot": None if self.autopilot is None else repr(self.autopilot),
        }
