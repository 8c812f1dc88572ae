"""TieredDecisionModel: taught questions keep the fast tier's answers, the rest go to the precise tier."""

from __future__ import annotations

import pytest
from langchain_core.decisions import Choice, Noul
from pydantic import Field

from clef_agents import wire
from clef_agents.loading import spec_kind
from clef_agents.testing import FakeDecisionModel
from clef_agents.tiered import PRECISE_EXTENSION, TieredDecisionModel

QUESTIONS = {
    "team": Choice(instructions="Which team?", criteria={"billing": None, "tech": None}),
    "urgent": Noul(instructions="Is this urgent?"),
}


class TaughtFake(FakeDecisionModel):
    """A fake fast tier that reports the questions in ``taught`` as taught (``x_taught``), as ``mini`` does."""

    taught: list[str] = Field(default_factory=list)

    def _classify(self, state, questions):
        response = super()._classify(state, questions)
        taught = [qid for qid in response.answers if qid in self.taught]
        return wire.DecisionResponse(
            model=self.model,
            answers=response.answers,
            usage=response.usage,
            extensions={"x_taught": taught} if taught else {},
        )


def tiered(taught=("team",), precise_error=None):
    fast = TaughtFake(model="fast", answers={"team": "billing", "urgent": 0.1}, taught=list(taught))
    precise = FakeDecisionModel(model="precise", answers={"team": "tech", "urgent": 0.9}, error=precise_error)
    return TieredDecisionModel(fast, precise), fast, precise


def test_taught_answers_stay_with_the_fast_tier_and_the_rest_are_asked_of_the_precise_tier():
    model, _, precise = tiered()
    response = model.invoke({"state": "site down", "questions": QUESTIONS})
    assert response.answers["team"].choice == "billing"
    assert response.answers["urgent"].noul == pytest.approx(0.9)
    assert [list(qs) for _, qs in precise.calls] == [["urgent"]]
    assert response.extensions["x_taught"] == ["team"] and response.extensions[PRECISE_EXTENSION] == ["urgent"]
    assert response.model == "fast+precise"
    assert response.usage["input_tokens"] == 4


def test_the_precise_tier_is_not_asked_when_every_question_was_taught():
    model, _, precise = tiered(taught=("team", "urgent"))
    response = model.invoke({"state": "site down", "questions": QUESTIONS})
    assert response.answers["urgent"].noul == pytest.approx(0.1)
    assert precise.calls == []


def test_a_refused_request_spares_the_others_in_a_batch_and_a_precise_failure_is_not_hidden():
    model, _, precise = tiered()
    good, bad = model.batch(
        [{"state": "a", "questions": QUESTIONS}, {"state": "b", "questions": {}}], return_exceptions=True
    )
    assert good.answers["urgent"].noul == pytest.approx(0.9)
    assert isinstance(bad, wire.InvalidRequestError)
    assert len(precise.calls) == 1
    failing, _, _ = tiered(precise_error=TimeoutError("precise tier timed out"))
    (result,) = failing.batch([{"state": "a", "questions": QUESTIONS}], return_exceptions=True)
    assert isinstance(result, TimeoutError)
    with pytest.raises(TimeoutError):
        failing.invoke({"state": "a", "questions": QUESTIONS})


@pytest.mark.asyncio
async def test_ainvoke_answers_like_invoke():
    model, _, _ = tiered()
    response = await model.ainvoke({"state": "site down", "questions": QUESTIONS})
    assert response.answers["urgent"].noul == pytest.approx(0.9)


@pytest.mark.parametrize("spec", ["mini+precise", "fake+fake-keywords", "runs/mini/final+lm:/models/qwen"])
def test_a_plus_joins_two_specs_into_a_tiered_model(spec):
    assert spec_kind(spec) == "tiered"


@pytest.mark.parametrize("spec", ["+precise", "mini+", "mini+lm:"])
def test_a_tiered_spec_needs_both_tiers(spec):
    with pytest.raises(ValueError):
        spec_kind(spec)


def test_load_model_builds_both_tiers():
    from clef_agents.loading import load_model

    model = load_model("fake+fake-keywords")
    assert isinstance(model, TieredDecisionModel)
    assert (model.fast.model, model.precise.model) == ("fake", "fake-keywords")
