"""The graph side of the autopilot: turn its decisions into lanes, and hand it every teacher answer.

The graph layer knows the autopilot only by its methods (``decide``, ``record_label``, ``record_failure``,
``known_label``, ``teacher_model``); it imports nothing from ``clef_agents.autopilot``, so numpy, scikit-learn
and torch stay out of graphs that do not use it.

Example:
    >>> teacher_source_lane("human_edit"), teacher_source_lane("model")
    ('human', 'llm')
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from clef_agents import wire
from clef_agents.graph.state import answer_label, canonical_label

logger = logging.getLogger(__name__)

AUTOPILOT_KEY = "autopilot"
"""Where a route item keeps its autopilot decision (item key, lane, version, whether it was sampled)."""


def teacher_source_lane(source: str) -> str:
    """The lane a teacher's label belongs to: people in ``human``, LLMs and decision models in ``llm``."""
    return "llm" if source in ("llm", "model", "gold") else "human"


def label_from_index(question: wire.TextQuestion, index: int) -> Any:
    """An option index as a decision-record label (noul → bool, choice → name, score → level).

    Example:
        >>> from langchain_core.decisions import Noul
        >>> label_from_index(Noul(instructions="Spam?"), 1)
        False
    """
    return canonical_label(question, wire.option_names(question)[index])


def autopilot_route(
    autopilot: Any,
    gate: str,
    state_text: str,
    questions: Mapping[str, wire.TextQuestion],
    response: Any,
    route: Mapping[str, Any],
    teacher_lane: str,
) -> dict[str, Any]:
    """The route of a decision with the autopilot's lanes: ``auto`` where it answers alone, the teacher lane where
    it asks, the earlier teacher's lane where that teacher labelled this item before."""
    out = {}
    for qid, question in questions.items():
        probs = [float(p) for p in wire.answer_probabilities(response.answers[qid])]
        decision = autopilot.decide(gate, qid, question, state_text, probs)
        item = dict(route[qid])
        if decision.lane == "auto":
            lane = "auto"
        elif decision.lane == "known":
            lane = teacher_source_lane(decision.source)
        else:
            lane = teacher_lane
        item.update(
            lane=lane,
            label=label_from_index(question, decision.label),
            probability=decision.probability,
            reason=decision.reason,
            **{AUTOPILOT_KEY: decision.as_dict()},
        )
        out[qid] = item
    return out


def ask_teacher_model(
    autopilot: Any, value: Any, questions: Mapping[str, wire.TextQuestion], route: dict[str, Any]
) -> dict[str, Any]:
    """Ask the autopilot's teacher model the questions sent to the teacher; keep its answers as labels and return
    them as final labels (source ``llm``). A failing teacher is recorded and its questions stay open."""
    asked = {qid: q for qid, q in questions.items() if (route[qid].get(AUTOPILOT_KEY) or {}).get("lane") == "teacher"}
    if not asked:
        return {}
    teacher = autopilot.teacher_model
    name = getattr(teacher, "model", type(teacher).__name__)
    try:
        response = teacher.invoke({"state": value, "questions": asked})
        answers = {qid: response.answers[qid] for qid in asked}
    except Exception as exc:  # a teacher that fails never labels; the question goes on to the LLM / a person
        error = f"{type(exc).__name__}: {exc}"
        logger.warning("autopilot: the teacher model %s failed (%s); its questions stay open", name, error)
        for qid in asked:
            autopilot.record_failure(route[qid][AUTOPILOT_KEY]["item_key"], "model", error)
            route[qid]["escalations"] = [
                *route[qid]["escalations"],
                {"to": "model", "model": name, "outcome": "failed", "error": error},
            ]
        return {}
    final = {}
    for qid, question in asked.items():
        label = answer_label(question, answers[qid])
        index = wire.label_index(question, label)
        autopilot.record_label(route[qid][AUTOPILOT_KEY]["item_key"], index, "model")
        route[qid]["escalations"] = [
            *route[qid]["escalations"],
            {"to": "model", "model": name, "outcome": "accepted", "label": label},
        ]
        final[qid] = {"label": label, "source": "llm", "probability": None}
    return final


def record_teacher_label(
    autopilot: Any, route_item: Mapping[str, Any], question: wire.TextQuestion | None, label: Any, source: str
) -> None:
    """Hand a teacher's final label of a question to the gate's autopilot (when the gate has one and the item
    was routed by it)."""
    decision = route_item.get(AUTOPILOT_KEY)
    if autopilot is None or not decision or question is None:
        return
    autopilot.record_label(decision["item_key"], wire.label_index(question, label), source)


def record_teacher_failure(autopilot: Any, route_item: Mapping[str, Any], source: str, error: str) -> None:
    """Tell the gate's autopilot that its teacher failed on an item (never a label)."""
    decision = route_item.get(AUTOPILOT_KEY)
    if autopilot is None or not decision:
        return
    autopilot.record_failure(decision["item_key"], source, error)


def known_teacher_label(
    autopilot: Any, route_item: Mapping[str, Any], question: wire.TextQuestion
) -> tuple[Any, str] | None:
    """The label (and source) the teacher gave this item before, e.g. before a crash; None when it gave none."""
    decision = route_item.get(AUTOPILOT_KEY)
    if autopilot is None or not decision:
        return None
    found = autopilot.known_label(decision["item_key"])
    return None if found is None else (label_from_index(question, found[0]), found[1])
