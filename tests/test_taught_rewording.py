"""A taught question asked in other words: which rewordings reach the taught weights.

Unit checks of the candidate rule (type, option set, negation) need no model; the integration checks ask the
shipped ``mini`` the frozen rewordings of tests/fixtures/taught_paraphrases.json (written before the tolerance
was chosen; bench/quality/taught_rewording.py measures all of them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

FROZEN = Path(__file__).parent / "fixtures" / "taught_paraphrases.json"
SMS = "Is this SMS message spam?"
BANKING = "Which banking request is the customer making in this message?"
STATE = "WINNER!! You have won a £1000 prize. Call 09061701461 now to claim."


def _frozen(instructions: str) -> dict:
    return next(q for q in json.loads(FROZEN.read_text())["questions"] if q["instructions"] == instructions)


def _taught(kind: str, instructions: str, names: list[str]):
    import torch

    from clef_agents.model.taught import TaughtQuestion

    n, d, h = len(names), 2, 3
    return TaughtQuestion(
        kind,
        instructions,
        names,
        torch.zeros(d, h),
        torch.zeros(d),
        torch.zeros(n, d),
        torch.zeros(n),
        torch.zeros(n, h),
        torch.zeros(n),
        1.0,
        1.0,
        1.0,
    )


def test_only_a_choice_with_the_taught_option_set_is_a_rewording_candidate():
    from langchain_core.decisions import Choice, Noul, Score

    from clef_agents.model.taught import TaughtQuestions, taught_key

    spam = _taught("noul", SMS, ["yes", "no"])
    intents = _taught("choice", "Which intent?", ["a", "b", "c"])
    levels = _taught("score", "How positive?", ["0", "1", "2"])
    taught = TaughtQuestions({"s": spam, "i": intents, "l": levels})
    # yes/no and score options name no subject: an opposite question has them too, so only the wording counts
    assert taught.rewording_candidates(Noul(instructions="SMS spam?")) == []
    assert taught.rewording_candidates(Score(instructions="How good?", criteria=["x", "y", "z"])) == []
    assert taught.rewording_candidates(Choice(instructions="Intent?", criteria={"a": None, "b": None, "c": None})) == [
        intents
    ]
    assert taught.rewording_candidates(Choice(instructions="Intent?", criteria={"c": None, "a": None, "b": None})) == [
        intents
    ]
    assert taught.rewording_candidates(Choice(instructions="Intent?", criteria={"a": None, "b": None})) == []
    assert taught.rewording_candidates(Choice(instructions="Intent?", criteria={"a": None, "b": None, "d": None})) == []
    # the exact lookup is as before: a subset of taught names still finds its entry by wording
    assert taught_key(Noul(instructions=SMS)) != taught_key(Noul(instructions="SMS spam?"))


@pytest.fixture(scope="module")
def mini():
    from clef_agents.model import ClefDecisionModel

    return ClefDecisionModel.from_pretrained("mini")


def _ask(model, question: dict) -> tuple[str, dict]:
    """The decided option of ``question`` about ``STATE``, and the response's extensions."""
    from clef_agents import wire

    response = model.batch([{"state": STATE, "questions": {"q": question}}])[0]
    return wire.decided_label(response.answers["q"]), response.extensions or {}


def _banking(instructions: str, drop: int = 0) -> dict:
    from clef_agents.train.datasets import canonical_question

    question = canonical_question("banking77")
    criteria = dict(list(question["criteria"].items())[drop:])
    return {**question, "instructions": instructions, "criteria": criteria}


@pytest.mark.integration
def test_the_exact_wording_is_taught_as_before(mini):
    from clef_agents import wire

    engine = mini.engine
    exact = wire.validate_questions({"q": {"type": "noul", "instructions": "  is this sms MESSAGE spam? "}})["q"]
    assert engine.taught_entry(exact).instructions == SMS
    _, extensions = _ask(mini, {"type": "noul", "instructions": SMS})
    assert extensions.get("x_taught") == ["q"] and "x_untaught" not in extensions
    # a subset of the taught options in the taught wording still uses it; an option never taught does not
    assert engine.taught_entry(wire.validate_questions({"q": _banking(BANKING, drop=1)})["q"]) is not None
    unknown = _banking(BANKING)
    unknown["criteria"]["new_option"] = None
    assert engine.taught_entry(wire.validate_questions({"q": unknown})["q"]) is None


@pytest.mark.integration
def test_a_frozen_choice_paraphrase_uses_the_taught_weights(mini):
    from clef_agents import wire
    from clef_agents.model.taught import REWORDED_TOLERANCE

    banking = _frozen(BANKING)["paraphrases"][0]
    question = wire.validate_questions({"q": _banking(banking)})["q"]
    entry, cosine = mini.engine.closest_taught(question)
    assert entry.instructions == BANKING and cosine >= REWORDED_TOLERANCE
    assert mini.engine.taught_entry(question).instructions == BANKING
    exact_label, _ = _ask(mini, _banking(BANKING))
    label, extensions = _ask(mini, _banking(banking))
    assert extensions.get("x_taught") == ["q"] and "x_untaught" not in extensions
    assert label == exact_label


@pytest.mark.integration
def test_a_yes_no_question_is_taught_in_its_own_wording_only(mini):
    # bench/general's inverted wording embeds at 0.818 from the taught tool question, above the tolerance
    for text in (_frozen(SMS)["paraphrases"][1], "Are all of the listed tools irrelevant to the user's request?"):
        _, extensions = _ask(mini, {"type": "noul", "instructions": text})
        assert extensions.get("x_untaught") == ["q"] and "x_taught" not in extensions, text


@pytest.mark.integration
def test_a_different_question_with_the_same_options_is_not_taught(mini):
    from clef_agents import wire

    # Not every frozen different question stays out: some reach the tolerance (bench/quality/results/
    # taught_rewording/measure.md); these guard the ones that did not.
    for text in _frozen(SMS)["negatives"] + _frozen(BANKING)["negatives"]:
        question = {"type": "noul", "instructions": text} if "SMS" in text else _banking(text)
        assert mini.engine.taught_entry(wire.validate_questions({"q": question})["q"]) is None, text
    _, extensions = _ask(mini, {"type": "noul", "instructions": "Is this SMS not spam?"})
    assert extensions.get("x_untaught") == ["q"]


@pytest.mark.integration
def test_a_reworded_choice_with_another_option_set_is_not_taught(mini):
    from clef_agents import wire

    reworded = _frozen(BANKING)["paraphrases"][0]
    for question in (_banking(reworded, drop=1), {**_banking(reworded), "criteria": {"card": None, "loan": None}}):
        assert mini.engine.taught_entry(wire.validate_questions({"q": question})["q"]) is None
