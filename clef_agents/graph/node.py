"""The decision node: ask a decision model typed questions about the graph state, pick lanes.

The node reads its input (a state key, a callable, or the message list), asks its questions in one
model call, and writes one JSON entry under ``state["decisions"][name]``: the response in wire form,
the lane of every question under a ``LanePolicy`` (auto / llm / human), the reason for each lane,
and the final labels of the questions decided automatically. It is memoised by (node name, input
hash): run again on the same input (a resume, a loop), it returns no update and calls no model.

Example:
    >>> from langchain_core.decisions import Noul
    >>> from clef_agents.testing import FakeDecisionModel
    >>> node = DecisionNode(FakeDecisionModel(answers={"urgent": 0.97}),
    ...                     {"urgent": Noul(instructions="Is this urgent?")}, name="triage", input="ticket")
    >>> update = node.invoke({"ticket": "site is down"})
    >>> update["decisions"]["triage"]["final"]["urgent"]
    {'label': True, 'source': 'auto', 'probability': 0.97}
"""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from langchain_core.decisions import BaseDecisionModel, ClassifierResponse
from langchain_core.runnables import Runnable, RunnableConfig

from clef_agents import wire
from clef_agents.graph.errors import (
    DecisionModelError,
    GraphInputError,
    UntaughtQuestionWarning,
    untaught_question_ids,
)
from clef_agents.graph.state import (
    DECISIONS_KEY,
    answer_label,
    input_hash,
    questions_to_state,
    response_to_state,
    state_excerpt,
)
from clef_agents.graph.traces import TraceStore
from clef_agents.policy import Band, LanePolicy

InputSpec = str | Callable[[Mapping[str, Any]], Any]
SliceSpec = str | Callable[[Mapping[str, Any]], str | None] | None


def as_policy(policy: LanePolicy | str | Path | Mapping[str, Any] | None) -> LanePolicy:
    """A ``LanePolicy`` from a policy object, a policy file path, a dict, or None (the default).

    Example:
        >>> as_policy({"default": {"auto_at": 0.8, "human_below": 0.3}}).default.auto_at
        0.8
    """
    if policy is None:
        return LanePolicy()
    if isinstance(policy, LanePolicy):
        return policy
    if isinstance(policy, (str, Path)):
        return LanePolicy.load(policy)
    return LanePolicy.model_validate(dict(policy))


def as_trace_store(traces: TraceStore | str | Path | None) -> TraceStore | None:
    """A ``TraceStore`` from a store, a SQLite file path, or None (no traces)."""
    if traces is None or isinstance(traces, TraceStore):
        return traces
    return TraceStore(traces)


def thread_id_of(config: RunnableConfig | None) -> str | None:
    """The LangGraph ``thread_id`` of a run, when there is one."""
    value = ((config or {}).get("configurable") or {}).get("thread_id")
    return None if value is None else str(value)


def lane_route(
    question_id: str, question: wire.TextQuestion, answer: Any, policy: LanePolicy, slice_key: str | None
) -> dict[str, Any]:
    """The route-trace item of one answer: lane, probability, label, band and the reason.

    Example:
        >>> from langchain_core.decisions import Noul, NoulAnswer
        >>> lane_route("q", Noul(instructions="?"), NoulAnswer(type="noul", noul=0.7), LanePolicy(), None)["lane"]
        'llm'
    """
    probability = wire.decision_probability(answer)
    band = policy.band(question_id, slice_key)
    lane = band.lane(probability)
    label = answer_label(question, answer)
    return {
        "lane": lane,
        "probability": probability,
        "label": label,
        "band": {"auto_at": band.auto_at, "human_below": band.human_below},
        "slice": slice_key,
        "reason": _lane_reason(label, probability, band, lane),
        "escalations": [],
    }


def hold_untaught(item: dict[str, Any]) -> None:
    """Keep an untaught answer out of the ``auto`` lane: one that cleared ``auto_at`` goes to the ``llm`` lane.

    Example:
        >>> item = {"lane": "auto", "reason": "model says 'tech' with p=0.950 >= auto_at 0.900: decided automatically"}
        >>> hold_untaught(item); item["lane"]
        'llm'
    """
    if item["lane"] == "auto":
        item["lane"] = "llm"
        item["reason"] += (
            "; but the model was not taught this question, so it does not act alone: ask an LLM "
            "(teach it, give it a band in the lane policy, or set untaught_auto=True)"
        )


def _lane_reason(label: Any, probability: float, band: Band, lane: str) -> str:
    said = f"model says {_shown(label)} with p={probability:.3f}"
    if lane == "auto":
        return f"{said} >= auto_at {band.auto_at:.3f}: decided automatically"
    if lane == "llm":
        return f"{said}, between human_below {band.human_below:.3f} and auto_at {band.auto_at:.3f}: ask an LLM"
    return f"{said} < human_below {band.human_below:.3f}: ask a human"


def _shown(label: Any) -> str:
    if isinstance(label, bool):
        return "yes" if label else "no"
    return repr(label) if isinstance(label, str) else str(label)


class DecisionNode(Runnable[Mapping[str, Any], dict[str, Any]]):
    """A LangGraph node that asks a decision model typed questions about the state (sync and async).

    Args:
        model: any ``BaseDecisionModel`` (local, remote, fake).
        questions: fixed questions (typed or wire dicts); validated here, once.
        name: the node name and the key of its entry in ``state["decisions"]``.
        input: the state key to read (default ``"messages"``) or a callable ``state -> input``.
        questions_key: read the questions from this state key instead (validated on every run).
        policy: a ``LanePolicy``, a policy file path, or None for the default bands.
        slice_key: a state key or callable naming the route that reached the gate (policy slices).
        traces: a ``TraceStore`` or SQLite path: every decision is committed there as it is made.
        autopilot: an ``Autopilot`` (``clef_agents.autopilot``): it decides which questions this node answers
            alone (only those it has certified), sends the rest to the teacher lane (``teacher_lane``), and learns
            from every teacher answer the escalation nodes record. Until a question is certified, nothing is
            automatic. Its ``teacher_model``, when set, is asked here before any LLM or person.
        teacher_lane: where the autopilot's uncertified questions go: ``"llm"`` (default) or ``"human"``.
        untaught_auto: let an answer the model gave without taught weights (it lists the question in
            ``x_untaught``) act alone. By default (False) such an answer goes no further than the ``llm`` lane,
            since untaught answers are close to chance (bench/general); a question with its own band in
            ``policy`` follows that band, and under an autopilot the autopilot decides.

    Example:
        >>> from langchain_core.decisions import Choice
        >>> from clef_agents.testing import FakeDecisionModel
        >>> q = {"dept": Choice(instructions="Team?", criteria={"billing": None, "tech": None})}
        >>> node = DecisionNode(FakeDecisionModel(answers={"dept": "tech"}), q, name="route", input="text")
        >>> node.invoke({"text": "app crashes"})["decisions"]["route"]["route"]["dept"]["lane"]
        'auto'
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
        traces: TraceStore | str | Path | None = None,
        excerpt_chars: int = 600,
        autopilot: Any = None,
        teacher_lane: str = "llm",
        untaught_auto: bool = False,
    ):
        if not isinstance(model, BaseDecisionModel):
            raise TypeError(f"model must be a langchain_core BaseDecisionModel, got {type(model).__name__}")
        if (questions is None) == (questions_key is None):
            raise ValueError("give exactly one of questions= (fixed questions) or questions_key= (read from state)")
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.model = model
        self.name = name
        self.input = input
        self.questions_key = questions_key
        self.questions = None if questions is None else self._validated(questions)
        self.policy = as_policy(policy)
        self.slice_key = slice_key
        self.traces = as_trace_store(traces)
        self.excerpt_chars = excerpt_chars
        self.untaught_auto = bool(untaught_auto)
        if teacher_lane not in ("llm", "human"):
            raise ValueError(f"teacher_lane must be 'llm' or 'human', got {teacher_lane!r}")
        if autopilot is not None and not callable(getattr(autopilot, "decide", None)):
            raise TypeError(f"autopilot must be a clef_agents.autopilot.Autopilot, got {type(autopilot).__name__}")
        self.autopilot = autopilot
        self.teacher_lane = teacher_lane
        self._warned_untaught: set[str] = set()

    def __repr__(self) -> str:
        return f"DecisionNode(name={self.name!r}, model={self.model.model!r})"

    # ------------------------------------------------------------------ reading the state

    def _validated(self, questions: Any) -> dict[str, wire.TextQuestion]:
        try:
            return wire.validate_questions(questions)
        except wire.InvalidRequestError as exc:
            raise wire.InvalidRequestError(
                [{**e, "msg": f"gate {self.name!r}: {e['msg']}"} for e in exc.errors]
            ) from None

    def read_input(self, state: Mapping[str, Any]) -> Any:
        """The value this node sends to the model as the System One ``state``."""
        if not isinstance(state, Mapping):
            raise GraphInputError(
                f"gate {self.name!r} expected the graph state to be a mapping, got {type(state).__name__}"
            )
        if callable(self.input):
            value = self.input(state)
            where = "the input callable"
        else:
            if self.input not in state:
                present = ", ".join(sorted(map(str, state))) or "none"
                raise GraphInputError(
                    f"gate {self.name!r} expected the state key {self.input!r} (its input); keys present: {present}"
                )
            value = state[self.input]
            where = f"state[{self.input!r}]"
        if value is None or (isinstance(value, (str, list, tuple, dict)) and not value):
            raise GraphInputError(
                f"gate {self.name!r} got an empty input from {where}; expected text, an object or messages"
            )
        try:
            wire.check_state(value)
        except wire.InvalidRequestError as exc:
            raise GraphInputError(f"gate {self.name!r}: {where}: {exc.errors[0]['msg']}") from None
        return value

    def read_questions(self, state: Mapping[str, Any]) -> dict[str, wire.TextQuestion]:
        """The questions of this run (fixed, or validated from ``state[questions_key]``)."""
        if self.questions is not None:
            return self.questions
        if self.questions_key not in state:
            present = ", ".join(sorted(map(str, state))) or "none"
            raise GraphInputError(
                f"gate {self.name!r} expected its questions in state key {self.questions_key!r}; keys present: {present}"
            )
        return self._validated(state[self.questions_key])

    def _slice(self, state: Mapping[str, Any]) -> str | None:
        if self.slice_key is None:
            return None
        value = self.slice_key(state) if callable(self.slice_key) else state.get(self.slice_key)
        return None if value is None else str(value)

    def _memoised(self, state: Mapping[str, Any], digest: str) -> bool:
        entry = (state.get(DECISIONS_KEY) or {}).get(self.name)
        return bool(entry) and entry.get("input_hash") == digest

    # ------------------------------------------------------------------ running

    def invoke(self, input: Mapping[str, Any], config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        """Classify (unless memoised) and return the state update ``{"decisions": {name: entry}}``."""
        value, questions, digest = self._prepare(input)
        if self._memoised(input, digest):
            return {}
        try:
            response = self.model.invoke({"state": value, "questions": questions}, config=_child(config))
        except Exception as exc:
            raise self._model_error(exc, questions) from exc
        return self._finish(input, config, value, questions, digest, response)

    async def ainvoke(
        self, input: Mapping[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Async ``invoke``: the model is awaited, the trace write runs in a thread."""
        value, questions, digest = self._prepare(input)
        if self._memoised(input, digest):
            return {}
        try:
            response = await self.model.ainvoke({"state": value, "questions": questions}, config=_child(config))
        except Exception as exc:
            raise self._model_error(exc, questions) from exc
        return await asyncio.to_thread(self._finish, input, config, value, questions, digest, response)

    def _prepare(self, state: Mapping[str, Any]) -> tuple[Any, dict[str, wire.TextQuestion], str]:
        value = self.read_input(state)
        questions = self.read_questions(state)
        return value, questions, input_hash(value, questions)

    def _model_error(self, exc: Exception, questions: Mapping[str, Any]) -> DecisionModelError:
        return DecisionModelError(
            f"gate {self.name!r}: the decision model {type(self.model).__name__}({self.model.model!r}) raised "
            f"{type(exc).__name__}: {exc}; expected a ClassifierResponse answering {', '.join(questions)}. "
            "Nothing was routed."
        )

    def _check_response(self, response: Any, questions: Mapping[str, wire.TextQuestion]) -> ClassifierResponse:
        if not isinstance(response, ClassifierResponse):
            raise DecisionModelError(
                f"gate {self.name!r}: the decision model returned {type(response).__name__}; expected a ClassifierResponse"
            )
        missing = [qid for qid in questions if qid not in response.answers]
        wrong = [
            f"{qid} ({response.answers[qid].type}, expected {q.type})"
            for qid, q in questions.items()
            if qid in response.answers and response.answers[qid].type != q.type
        ]
        if missing or wrong:
            problems = ([f"missing answers: {', '.join(missing)}"] if missing else []) + (
                [f"wrong answer types: {', '.join(wrong)}"] if wrong else []
            )
            raise DecisionModelError(f"gate {self.name!r}: the decision model's response has {'; '.join(problems)}")
        return response

    def _finish(
        self,
        state: Mapping[str, Any],
        config: RunnableConfig | None,
        value: Any,
        questions: dict[str, wire.TextQuestion],
        digest: str,
        response: Any,
    ) -> dict[str, Any]:
        response = self._check_response(response, questions)
        untaught = self.warn_if_untaught(response, questions)
        slice_key = self._slice(state)
        route = {qid: lane_route(qid, q, response.answers[qid], self.policy, slice_key) for qid, q in questions.items()}
        if not self.untaught_auto:
            for qid in untaught:
                if qid not in self.policy.questions:
                    hold_untaught(route[qid])
        if self.autopilot is not None:
            route = self._autopilot_route(value, questions, response, route)
        final = {
            qid: {"label": item["label"], "source": "auto", "probability": item["probability"]}
            for qid, item in route.items()
            if item["lane"] == "auto"
        }
        final.update(_known_finals(route))
        if self.autopilot is not None and self.autopilot.teacher_model is not None:
            final.update(self._ask_teacher_model(value, questions, route))
        entry = {
            "gate": self.name,
            "trace_id": uuid.uuid4().hex,
            "input_hash": digest,
            "questions": questions_to_state(questions),
            "response": response_to_state(response),
            "excerpt": state_excerpt(value, self.excerpt_chars),
            "route": route,
            "final": final,
            "llm": None,
            "human": None,
        }
        self._record(entry, value, questions, thread_id_of(config))
        return {DECISIONS_KEY: {self.name: entry}}

    # ------------------------------------------------------------------ the autopilot

    def _autopilot_route(
        self,
        value: Any,
        questions: Mapping[str, wire.TextQuestion],
        response: ClassifierResponse,
        route: dict[str, Any],
    ) -> dict[str, Any]:
        """Each question's lane as the autopilot decides it (``auto`` only where it is certified)."""
        from clef_agents.graph.autopilot import autopilot_route  # noqa: PLC0415  (keeps numpy off the import)

        return autopilot_route(
            self.autopilot, self.name, wire.state_text(value), questions, response, route, self.teacher_lane
        )

    def _ask_teacher_model(
        self, value: Any, questions: Mapping[str, wire.TextQuestion], route: dict[str, Any]
    ) -> dict[str, Any]:
        from clef_agents.graph.autopilot import ask_teacher_model  # noqa: PLC0415

        return ask_teacher_model(self.autopilot, value, questions, route)

    def warn_if_untaught(self, response: Any, questions: Mapping[str, wire.TextQuestion]) -> list[str]:
        """Warn (``UntaughtQuestionWarning``), once per question of this node, when the model says it answered a
        question without taught weights (``x_untaught``); returns the ids of this response's untaught questions.

        Example:
            >>> import warnings
            >>> from langchain_core.decisions import Noul
            >>> from clef_agents.testing import FakeDecisionModel
            >>> node = DecisionNode(FakeDecisionModel(), {"urgent": Noul(instructions="Is this urgent?")}, input="text")
            >>> said = wire.DecisionResponse(model="m", answers={}, extensions={"x_untaught": ["urgent"]})
            >>> with warnings.catch_warnings(record=True) as seen:
            ...     warnings.simplefilter("always")
            ...     node.warn_if_untaught(said, node.questions), node.warn_if_untaught(said, node.questions)
            (['urgent'], ['urgent'])
            >>> [w.category.__name__ for w in seen]
            ['UntaughtQuestionWarning']
        """
        untaught = [qid for qid in untaught_question_ids(response) if qid in questions]
        new = [qid for qid in untaught if qid not in self._warned_untaught]
        if new:
            self._warned_untaught.update(new)
            asked = "; ".join(f"{qid!r}: {wire.content_text(questions[qid].instructions)!r:.100}" for qid in new)
            hold = (
                ", and this node lets them act alone (untaught_auto=True). "
                if self.untaught_auto
                else ": this node does not let them act alone unless its lane policy gives them a band. "
            )
            warnings.warn(
                f"gate {self.name!r}: model {getattr(response, 'model', '?')!r} was not taught {asked}. It answered "
                f"them untaught, which is close to chance on questions nobody taught (bench/general){hold}Teach the "
                "questions you rely on with labelled examples (clef-agents teach, docs/teaching.md), or ask a stronger "
                "tier (mini+precise, docs/precise.md).",
                UntaughtQuestionWarning,
                stacklevel=4,
            )
        return untaught

    def _record(
        self, entry: Mapping[str, Any], value: Any, questions: Mapping[str, Any], thread_id: str | None
    ) -> None:
        if self.traces is None:
            return
        self.traces.record_decision(
            trace_id=entry["trace_id"],
            gate=self.name,
            input_hash=entry["input_hash"],
            state=value,
            questions=questions,
            response=entry["response"],
            route=entry["route"],
            thread_id=thread_id,
            outcomes={
                qid: {"label": item["label"], "source": "auto", "detail": {"lane": "auto"}}
                for qid, item in entry["final"].items()
            },
        )


def _known_finals(route: Mapping[str, Any]) -> dict[str, Any]:
    """Final labels of questions whose item the autopilot's teacher had labelled before (not asked again)."""
    return {
        qid: {"label": item["label"], "source": item["lane"], "probability": None}
        for qid, item in route.items()
        if (item.get("autopilot") or {}).get("lane") == "known"
    }


def _child(config: RunnableConfig | None) -> RunnableConfig | None:
    """Callbacks and tags flow to the model call; LangGraph's internal keys do not."""
    if not config:
        return None
    return {key: config[key] for key in ("callbacks", "tags", "metadata", "run_name") if key in config}  # type: ignore[return-value]
