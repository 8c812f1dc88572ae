"""Issue 44: the engine's route table and answering parts, requests validated once, and the default path read
in one pass, invariant to option order, question order and ids (tiny random backbones)."""

from __future__ import annotations

import pytest
from langchain_core.decisions import Choice, Noul, Score
from tiny_models import make_model

from clef_agents import wire
from clef_agents.batched import ValidatedQuestions, prepare_request

pytest.importorskip("torch")

TICKET = "my card is lost and I was charged twice please help"


def typed(raw: dict) -> list[wire.TextQuestion]:
    return list(wire.validate_questions(raw).values())


def test_every_question_routes_to_the_part_that_answers_it(encoder_dir):
    model = make_model(encoder_dir)
    engine = model.engine
    noul = Noul(instructions="is this urgent")
    assert engine.route(noul, None) == ("head",)
    assert set(engine.parts) == {"taught", "head"} and engine.parts["taught"] is engine.parts["head"]
    prediction = engine.predict([(TICKET, [noul])])[0]
    assert prediction.answered_by == ["head"] and prediction.input_tokens == len(engine.tokenize_state(TICKET)[0])


def test_a_node_validates_its_questions_once_and_the_model_trusts_them_after(monkeypatch):
    calls = []
    real = wire.validate_questions
    monkeypatch.setattr(wire, "validate_questions", lambda questions, *a, **k: calls.append(1) or real(questions, *a, **k))
    memo = ValidatedQuestions()
    asked = {"team": Choice(instructions="which team", criteria={"billing": None, "tech": None}), "urgent": Noul(instructions="urgent?")}
    first = memo.validate(dict(asked))
    again = memo.validate(dict(asked))
    assert len(calls) == 1 and memo.hits == 1 and list(first) == list(again) == ["team", "urgent"]
    asked["urgent"].instructions = "\ud800"  # changed in place after validation: checked again, and refused
    with pytest.raises(wire.InvalidRequestError):
        memo.validate(dict(asked))
    assert len(calls) == 2
    assert prepare_request({"state": "x", "questions": {"q": {"type": "noul", "instructions": "ok?"}}})[1] == ["q"]
