"""The precise tier's yes/no adapter: a LoRA adapter read on the question's tokens of yes/no questions only
(tiny random LM)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from langchain_core.decisions import Choice, Noul, Score

from clef_agents.model.prefill_lm import (
    SETTINGS_FILE,
    LMSettings,
    PrefillLM,
    load_causal_lm,
)
from tests.tiny_models import tiny_causal_lm

STATE = "my card is lost please help"
QUESTIONS = [
    Noul(instructions="urgent ?"),
    Choice(instructions="which team ?", criteria={"billing": None, "bug": "crash", "sales": None}),
    Score(instructions="how bad ?", criteria=["good", "bad", "very bad"]),
    Noul(instructions="is the card not lost ?"),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm_adapter"))


def trained_lm(folder, steps: int = 40) -> PrefillLM:
    """A tiny LM whose fresh yes/no adapter learns to say yes to the first question and no to the last."""
    torch.manual_seed(0)
    lm = PrefillLM(*load_causal_lm(folder), name="tiny")
    lm.add_noul_adapter(rank=4, alpha=8, dropout=0.0)
    optimiser = torch.optim.AdamW(lm.adapter_parameters(), lr=0.01)
    nouls = [QUESTIONS[0], QUESTIONS[3]]
    for _ in range(steps):
        margins = lm.training_margins(STATE, nouls)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(margins, torch.tensor([1.0, 0.0]))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    return lm


def test_a_trained_adapter_moves_yes_no_answers_and_leaves_choices_and_scores_as_they_were(folder):
    plain = PrefillLM(*load_causal_lm(folder), name="tiny")
    before, _, _ = plain.logits(STATE, QUESTIONS)
    lm = trained_lm(folder)
    after, _, _ = lm.logits(STATE, QUESTIONS)
    assert after[0].item() > 0.3 and after[3].item() < -0.3
    assert after[0].item() - before[0].item() > 0.3 and before[3].item() - after[3].item() > 0.3
    torch.testing.assert_close(after[1], before[1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(after[2], before[2], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat([after[0], after[3]]), lm.training_margins(STATE, [QUESTIONS[0], QUESTIONS[3]]).detach(),
                               atol=1e-4, rtol=1e-4)


def test_the_adapter_is_saved_beside_the_settings_and_loaded_back(folder):
    lm = trained_lm(folder, steps=5)
    expected, _, _ = lm.logits(STATE, QUESTIONS)
    lm.save_settings(folder)
    try:
        assert LMSettings.model_validate_json((folder / SETTINGS_FILE).read_text()).noul_adapter == "noul_adapter"
        assert (folder / "noul_adapter" / "adapter_model.safetensors").is_file()
        loaded = PrefillLM.load(folder)
        assert loaded.adapter_names() == ["noul"]
        got, _, _ = loaded.logits(STATE, QUESTIONS)
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    finally:
        (folder / SETTINGS_FILE).unlink()


def test_adapter_settings_name_a_folder_beside_them_and_a_missing_adapter_is_refused(folder):
    with pytest.raises(ValueError, match="beside the settings"):
        LMSettings(noul_adapter="../elsewhere")
    with pytest.raises(ValueError, match="no 'noul' adapter"):
        PrefillLM(*load_causal_lm(folder), noul_adapter="noul_adapter")
    with pytest.raises(ValueError, match="yes/no questions only"):
        PrefillLM(*load_causal_lm(folder)).training_margins(STATE, [QUESTIONS[1]])
