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
    monkeypatch.setattr(
        wire, "validate_questions", lambda questions, *a, **k: calls.append(1) or real(questions, *a, **k)
    )
    memo = ValidatedQuestions()
    asked = {
        "team": Choice(instructions="which team", criteria={"billing": None, "tech": None}),
        "urgent": Noul(instructions="urgent?"),
    }
    first = memo.validate(dict(asked))
    again = memo.validate(dict(asked))
    assert len(calls) == 1 and memo.hits == 1 and list(first) == list(again) == ["team", "urgent"]
    asked["urgent"].instructions = "\ud800"  # changed in place after validation: checked again, and refused
    with pytest.raises(wire.InvalidRequestError):
        memo.validate(dict(asked))
    assert len(calls) == 2
    assert prepare_request({"state": "x", "questions": {"q": {"type": "noul", "instructions": "ok?"}}})[1] == ["q"]


def _invariance_requests() -> tuple[dict, dict, dict[str, str]]:
    """A request with duplicated and near-duplicate options, the same request with its options and questions
    reordered and its ids renamed, and the id map."""
    options = {
        "billing": "money charged twice",
        "card_lost": "card lost or stolen",
        "card lost": "card lost or stolen",
        "card-lost": None,
        "lost card": "card lost or stolen!",
        "tech": None,
        "sales": "price order",
    }
    base = {
        "urgent": Noul(instructions="is this urgent", criteria={"true": "production down", "false": None}),
        "team": Choice(instructions="which team", criteria=dict(options)),
        "anger": Score(instructions="how angry", criteria=["not angry", "angry", "very angry"]),
        "spam": Noul(instructions="is this spam"),
    }
    shuffled = {k: options[k] for k in ["tech", "card lost", "sales", "lost card", "billing", "card-lost", "card_lost"]}
    other = {
        "s p a m": base["spam"],
        "x.team": Choice(instructions="which team", criteria=shuffled),
        "🙂": base["anger"],
        "u": base["urgent"],
    }
    return base, other, {"urgent": "u", "team": "x.team", "anger": "🙂", "spam": "s p a m"}


def assert_invariant(model) -> None:
    base, other, ids = _invariance_requests()
    first = model.invoke({"state": TICKET, "questions": base})
    again = model.invoke({"state": TICKET, "questions": other})
    for qid, renamed in ids.items():
        want, got = first.answers[qid], again.answers[renamed]
        for key, p in _by_name(base[qid], want).items():
            assert _by_name(other[renamed], got)[key] == pytest.approx(p, abs=1e-5), (qid, key)
    team = _by_name(base["team"], first.answers["team"])
    assert team["card_lost"] == pytest.approx(
        team["card lost"], abs=1e-5
    )  # the same option text twice: the same answer


def _by_name(question, answer) -> dict:
    return dict(zip(wire.option_names(question), wire.answer_probabilities(answer)))


def test_the_default_path_answers_alike_whatever_the_option_order_question_order_and_ids(encoder_dir, decoder_dir):
    for folder in (encoder_dir, decoder_dir):
        assert_invariant(make_model(folder))


@pytest.mark.integration
def test_the_shipped_default_path_answers_alike_whatever_the_option_order_question_order_and_ids():
    from clef_agents.model import ClefDecisionModel

    assert_invariant(ClefDecisionModel.from_pretrained("mini"))


def test_the_reader_is_opt_in_and_a_checkpoint_saved_without_it_keeps_it(encoder_dir, tmp_path):
    import warnings

    from clef_agents.loading import load_model
    from clef_agents.model import ClefDecisionModel, UntrainedModelWarning
    from clef_agents.model.reader import QuestionReader, ReaderConfig

    model = make_model(encoder_dir)
    model.engine.attach_reader(
        QuestionReader.create(
            ReaderConfig(backbone=str(encoder_dir), max_tokens=64, max_question_tokens=8, max_option_tokens=4)
        )
    )
    model.save_pretrained(tmp_path / "m")
    request = {"state": TICKET, "questions": {"spam": {"type": "noul", "instructions": "is this spam"}}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedModelWarning)
        default = ClefDecisionModel.from_pretrained(tmp_path / "m")
        assert default.engine.reader is None and default.engine.route(Noul(instructions="is this spam"), None) == (
            "head",
        )
        response = default.invoke(request)
        assert response.extensions["x_untaught"] == ["spam"] and "x_reader" not in response.extensions
        default.save_pretrained(tmp_path / "again")
        precise = load_model(str(tmp_path / "again") + "+reader")
        assert precise.invoke(request).extensions["x_reader"] == ["spam"]
    with pytest.raises(FileNotFoundError, match="no question reader"):
        ClefDecisionModel.from_pretrained(make_model(encoder_dir).save_pretrained(tmp_path / "bare"), reader=True)
