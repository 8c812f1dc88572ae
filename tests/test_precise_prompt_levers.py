"""bench/precise/demonstrations.py and logit_lens.py: the rule's verdict on probe rows, the check that the judged
items are the recorded ones, and the logit lens's margins (synthetic rows and weights; no LM is read)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.precise.demonstrations import (
    lever_fields,
    load_examples,
    recorded_rows,
    replicate,
    report,
    verdict,
    yes_margin,
)
from bench.precise.logit_lens import LogitLens


def lever_rows(lever_reads: bool, seed: int = 0) -> list[dict]:
    """Rows whose shipped margin reads the concept (it inverts on negated forms); the lever's margin follows the
    gold answer when ``lever_reads``, else it is noise."""
    rng = random.Random(seed)
    rows = []
    for n in range(180):
        negated = n % 3 == 0
        concept = rng.random() < 0.5
        yes = int(concept != negated)
        lever = (1.5 if yes else -1.5) + rng.gauss(0, 1) if lever_reads else rng.gauss(0, 1)
        rows.append({"shipped_raw": (1.0 if concept else -1.0) + rng.gauss(0, 1), "shipped_prior": rng.gauss(0, 0.1),
                     "lever_raw": lever, "lever_prior": rng.gauss(0, 0.1), "yes": yes, "dataset": ("a", "b", "c")[n % 3],
                     "form": "own_negated" if negated else "own"})
    return rows


@pytest.mark.parametrize("lever", ["examples", "questions-first", "both-forms"])
def test_a_lever_that_reads_the_wording_is_adopted_and_one_that_reads_nothing_is_not(lever):
    result = verdict(lever_rows(lever_reads=True), lever)
    assert result["adopted"] and result["negated_items"] == 60
    assert result["table"][f"{lever} (raw − 0.5 prior)"]["negated"] > 0.8 > 0.3 > result["table"]["shipped (raw − 0.5 prior)"]["negated"]
    text = report({**result, "command": "c", "lever": lever, "title": "T", "rule": "r.md", "examples": 8, "head_tokens": 9,
                   "items": 180, "seconds": 1})
    assert "**yes**" in text and f"| {lever} (raw − 0.5 prior) |" in text
    assert not verdict(lever_rows(lever_reads=False), lever)["adopted"]


def test_the_judged_items_must_be_the_recorded_ones_in_order(tmp_path):
    items = [("s1", None, 0, {"dataset": "a", "form": "own"}), ("s2", None, 1, {"dataset": "b", "form": "own_negated"})]
    recorded = tmp_path / "recorded.json"
    rows = [{"dataset": "a", "form": "own", "yes": 1, "raw": 0.1, "prior": 0.0},
            {"dataset": "b", "form": "own_negated", "yes": 0, "raw": 0.2, "prior": 0.0}]
    recorded.write_text(json.dumps({"rows": rows}))
    assert recorded_rows(items, recorded) == rows
    recorded.write_text(json.dumps({"rows": rows[::-1]}))
    with pytest.raises(SystemExit, match="differ from those recorded in recorded.json \\(item 0"):
        recorded_rows(items, recorded)


def test_the_frozen_examples_are_valid_and_balanced():
    examples = load_examples()
    yes_no = [e.answer for e in examples if e.question.type == "noul"]
    assert len(examples) == 8 and sorted(yes_no) == ["no"] * 3 + ["yes"] * 3
    assert {e.question.type for e in examples} == {"noul", "choice", "score"}


def test_the_logit_lens_normalises_earlier_layers_and_reads_the_last_as_stored(tmp_path):
    from safetensors.torch import save_file
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["[UNK]", "yes", "Yes", "YES", "no", "No", "NO", "maybe"])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]").save_pretrained(tmp_path)
    torch.manual_seed(0)
    norm, head = torch.rand(4) + 0.5, torch.randn(len(vocab), 4)
    save_file({"model.norm.weight": norm, "lm_head.weight": head}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"rms_norm_eps": 1e-6, "tie_word_embeddings": False}))
    lens = LogitLens(tmp_path)
    states = torch.randn(3, 4)

    def margin(x):
        log_p = torch.log_softmax(x @ head.T, -1)
        return torch.logsumexp(log_p[:, [1, 2, 3]], -1) - torch.logsumexp(log_p[:, [4, 5, 6]], -1)

    normed = states * torch.rsqrt(states.pow(2).mean(-1, keepdim=True) + 1e-6) * norm
    assert lens.margins(states) == pytest.approx(margin(normed).tolist(), abs=1e-5)
    assert lens.margins(normed, normed=True) == pytest.approx(margin(normed).tolist(), abs=1e-5)
    assert lens.margins(states, normed=True) != pytest.approx(lens.margins(states), abs=1e-3)


def test_both_forms_average_the_yes_no_form_and_the_choice_form_each_corrected_as_shipped():
    class Shipped:
        prior_correction = {"noul": 0.5, "choice": 0.75}

    noul = {"raw": 1.0, "prior": 0.4}
    choice = {"raw": yes_margin(torch.tensor([-0.5, -2.5])), "prior": yes_margin(torch.tensor([-1.0, -0.2]))}
    assert (choice["raw"], yes_margin(torch.tensor([0.7]))) == (pytest.approx(2.0), pytest.approx(0.7))
    fields = lever_fields("both-forms", noul, choice, Shipped())
    expected = ((1.0 - 0.5 * 0.4) + (2.0 - 0.75 * -0.8)) / 2
    assert fields["lever_raw"] - 0.5 * fields["lever_prior"] == pytest.approx(expected)
    assert fields["lever_raw"] == pytest.approx((1.0 + 2.0) / 2)
    assert lever_fields("examples", noul, choice, Shipped()) == {"lever_raw": 2.0, "lever_prior": choice["prior"]}


def test_only_the_both_forms_comparison_is_replicated():
    import argparse

    with pytest.raises(SystemExit, match="--replicate repeats the both-forms comparison only"):
        replicate(argparse.Namespace(lever="examples"), [], None, 0.0)



def test_the_both_forms_setting_answers_what_the_judged_lever_scored(tmp_path):
    """``PrefillLM(noul_both_forms=True)`` gives each yes/no question the margin ``lever_fields`` scored in the judge."""
    from langchain_core.decisions import Noul

    from bench.precise.demonstrations import read_forms
    from clef_agents import wire
    from clef_agents.model.precise import LMSettings, PrefillLM, load_causal_lm
    from tests.tiny_models import tiny_causal_lm

    model, tokenizer = load_causal_lm(tiny_causal_lm(tmp_path / "lm"))
    shipped = LMSettings(answer="name", prior_correction={"noul": 0.5, "choice": 0.75})
    plain = PrefillLM(model, tokenizer, answer="name")
    items = [("my card is lost", Noul(instructions="urgent ?"), 0, {}), ("my card is lost", Noul(instructions="calm ?"), 1, {}),
             ("thanks a lot", Noul(instructions="urgent ?"), 1, {})]
    reads = read_forms(plain, items, [None, wire.yes_no_choice], "test")
    both = PrefillLM(model, tokenizer, answer="name", prior_correction=shipped.prior_correction, noul_both_forms=True)
    for (state, question, _, _), (noul, choice) in zip(items, reads):
        fields = lever_fields("both-forms", noul, choice, shipped)
        expected = fields["lever_raw"] - 0.5 * fields["lever_prior"]
        assert both.logits(state, [question])[0][0].item() == pytest.approx(expected, abs=1e-4)


def synthetic_both_forms_rows(seed: int, n: int = 60) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        yes = int(rng.random() < 0.5)
        rows.append({"shipped_raw": (1.0 if yes else -1.0) + rng.gauss(0, 1.5), "shipped_prior": rng.gauss(0, 0.3),
                     "choice_raw": (1.0 if yes else -1.0) + rng.gauss(0, 1.5), "choice_prior": rng.gauss(0, 0.3), "yes": yes})
    return rows


def test_the_both_forms_platt_is_fitted_checked_across_files_and_written_as_settings(tmp_path):
    from bench.precise.both_forms_calibration import main, margins
    from clef_agents.model.precise import LMSettings, settings_path

    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"rows": synthetic_both_forms_rows(0)}))
    second.write_text(json.dumps({"rows": synthetic_both_forms_rows(1)}))
    row = synthetic_both_forms_rows(2, 1)[0]
    both = margins([row], {"noul": 0.5, "choice": 0.75}, True)[0]
    assert both == pytest.approx(((row["shipped_raw"] - 0.5 * row["shipped_prior"]) + (row["choice_raw"] - 0.75 * row["choice_prior"])) / 2)
    assert margins([row], {"noul": 0.5}, False)[0] == pytest.approx(row["shipped_raw"] - 0.5 * row["shipped_prior"])
    out = tmp_path / "settings.json"
    assert main(["--rows", str(first), str(second), "--settings-out", str(out), "--out", str(tmp_path / "report")]) == 0
    written = LMSettings.model_validate_json(out.read_text())
    shipped = LMSettings.model_validate_json(settings_path("precise").read_text())
    assert written.noul_both_forms and written.calibration.noul_a > 0 and written.calibration.fitted_on["nouls"] == 120
    assert written.model_dump(exclude={"noul_both_forms", "calibration"}) == shipped.model_dump(exclude={"noul_both_forms", "calibration"})
    assert written.calibration.choice_temperature == shipped.calibration.choice_temperature
    report = json.loads((tmp_path / "report.json").read_text())
    assert [c["fitted_on"] for c in report["checks"]] == ["a", "b"] and "| a → b | both forms" in (tmp_path / "report.md").read_text()
    second.write_text(json.dumps({"rows": [{"shipped_raw": 0.1, "yes": 1}]}))
    with pytest.raises(SystemExit, match="b.json has no shipped_prior, choice_raw, choice_prior"):
        main(["--rows", str(first), str(second)])


def test_the_union_platt_is_fitted_on_both_probes_and_changes_only_the_yes_no_platt(tmp_path):
    from bench.precise.both_forms_calibration import fit, margins
    from bench.precise.union_calibration import main
    from clef_agents.model.precise import LMSettings, settings_path

    def probe_rows(seed: int, n: int, separation: float) -> list[dict]:
        rng = random.Random(seed)
        rows = []
        for _ in range(n):
            yes = rng.random() < 0.5
            rows.append({"shipped_raw": (separation if yes else -separation) + rng.gauss(0, 1.0),
                         "shipped_prior": rng.gauss(0, 0.3), "choice_raw": 0.0, "choice_prior": 0.0, "yes": yes})
        return rows

    wide, reader = probe_rows(0, 80, 2.0), probe_rows(1, 60, 0.3)
    wide_file, first, second = tmp_path / "wide.json", tmp_path / "a.json", tmp_path / "b.json"
    wide_file.write_text(json.dumps({"rows": wide}))
    first.write_text(json.dumps({"rows": reader[:30]}))
    second.write_text(json.dumps({"rows": reader[30:]}))
    out = tmp_path / "settings.json"
    assert main(["fit", "--wide-rows", str(wide_file), "--reader-rows", str(first), str(second),
                 "--settings-out", str(out), "--out", str(tmp_path / "report")]) == 0
    shipped = LMSettings.model_validate_json(settings_path("precise").read_text())
    written = LMSettings.model_validate_json(out.read_text())
    assert written.model_dump(exclude={"calibration"}) == shipped.model_dump(exclude={"calibration"})
    assert written.calibration.model_dump(exclude={"noul_a", "noul_b", "fitted_on"}) == \
        shipped.calibration.model_dump(exclude={"noul_a", "noul_b", "fitted_on"})
    assert written.calibration.fitted_on["nouls"] == 140
    union = wide + reader
    expected = fit(margins(union, shipped.prior_correction, both=False), union)
    assert (written.calibration.noul_a, written.calibration.noul_b) == pytest.approx((expected.noul_a, expected.noul_b), abs=1e-6)
    report = json.loads((tmp_path / "report.json").read_text())
    alone = report["refitted_alone"]
    assert alone["reader"]["a"] < report["candidate_platt"]["a"] < alone["wide"]["a"]
    assert report["items"] == {"wide": 80, "reader": 60}
    assert "| reader | fitted on wide alone |" in (tmp_path / "report.md").read_text()


def _general_results(key: str, auroc: float, ece: float, nll: float, negation: float, agreement: float) -> dict:
    from bench.general.tasks import WORDINGS

    task = {"task": "toy", "type": "noul", "variants": {w: {"auroc": auroc} for w in WORDINGS},
            "nll_over_wordings": {"mean": nll}}
    summary = {"auroc_mean": auroc, "ece_mean": ece, "negation_share_within": negation, "yes_no_vs_choice_agreement": agreement}
    return {"methods": {key: {"tasks": [task], "summary": {"noul": summary}}}, "meta": {"n_per_task": 20}}


@pytest.mark.parametrize(("candidate", "ships", "comparable"), [
    ((0.6, 0.10, 0.68, 0.60, 0.80), True, True),
    ((0.6, 0.10, 0.70, 0.60, 0.80), False, True),   # flatter ECE but a worse NLL
    ((0.6, 0.10, 0.68, 0.50, 0.80), False, True),   # negation coherence fell
    ((0.6, 0.10, 0.68, 0.60, 0.70), False, True),   # yes/no = choice fell
    ((0.7, 0.10, 0.68, 0.60, 0.80), False, False),  # a ranking moved: not the same margins
])
def test_the_calibration_probe_verdict_applies_the_rule_as_written(tmp_path, candidate, ships, comparable):
    from bench.precise.calibration_probe_verdict import main

    shipped_file, candidate_file = tmp_path / "s.json", tmp_path / "c.json"
    shipped_file.write_text(json.dumps(_general_results("precise", 0.6, 0.2, 0.69, 0.55, 0.75)))
    candidate_file.write_text(json.dumps(_general_results("union", *candidate)))
    assert main(["--shipped", str(shipped_file), "--candidate", str(candidate_file), "--candidate-key", "union",
                 "--out", str(tmp_path / "verdict")]) == 0
    found = json.loads((tmp_path / "verdict.json").read_text())["verdict"]
    assert (found["ships"], found["comparable"]) == (ships, comparable)
    with pytest.raises(SystemExit, match="has no method 'nope'"):
        main(["--shipped", str(shipped_file), "--candidate", str(candidate_file), "--candidate-key", "nope"])
