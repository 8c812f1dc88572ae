"""The question reader: layout of one pass, multi-pass options, training, calibration, I/O, and the engine's routing."""

from __future__ import annotations

import json
import random
import warnings

import pytest
import torch

from clef_agents import wire
from clef_agents.model.reader import (
    QuestionReader,
    ReaderConfig,
    question_text,
    reader_option_texts,
    truncate_ids,
)
from clef_agents.train.reader import (
    batch_loss,
    fit_calibration,
    length_buckets,
    typed_items,
)
from clef_agents.train.reader_data import QID, label_questions, reader_records
from tests.tiny_models import make_model, tiny_backbone


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return tiny_backbone("encoder", tmp_path_factory.mktemp("tiny_reader_backbone"))


def make_reader(folder, **settings) -> QuestionReader:
    torch.manual_seed(0)
    config = ReaderConfig(backbone=str(folder), max_tokens=64, max_question_tokens=8, max_option_tokens=4, **settings)
    return QuestionReader.create(config)


def model_with_reader(folder):
    """A tiny model with a tiny reader attached, and the reader."""
    model, reader = make_model(folder), make_reader(folder)
    model.engine.attach_reader(reader)
    return model, reader


def team_and_spam_questions() -> tuple[wire.Choice, wire.Noul]:
    """A two-option choice and a yes/no question, as the engine receives them."""
    questions = wire.validate_questions(
        {
            "c": {"type": "choice", "instructions": "which team", "criteria": {"billing": None, "sales": None}},
            "s": {"type": "noul", "instructions": "is this spam"},
        }
    )
    return questions["c"], questions["s"]


def decode(reader: QuestionReader, ids: list[int]) -> str:
    return reader.tokenizer.decode(ids)


def test_a_yes_no_question_is_one_pass_with_the_question_first_and_the_state_second(tiny_folder):
    reader = make_reader(tiny_folder)
    (p,) = reader.layout("my card is lost please help", wire.Noul(instructions="is my card lost"))
    assert decode(reader, p.input_ids) == "[CLS] is my card lost [SEP] my card is lost please help [SEP]"
    first_state = p.input_ids.index(reader.tokenizer.sep_token_id) + 1
    assert p.token_type_ids == [0] * first_state + [1] * (len(p.input_ids) - first_state)
    assert p.option_spans == []
    assert (p.state_tokens, p.state_kept) == (6, 6)


def test_option_spans_cover_exactly_each_option_and_many_options_take_more_passes(tiny_folder):
    reader = make_reader(tiny_folder, max_options_tokens=8)
    question = wire.Choice(
        instructions="which team", criteria={"billing": None, "bug crash": None, "sales": None, "refund money": None}
    )
    passes = reader.layout("refund my money please", question)
    names = [decode(reader, p.input_ids[a:b]) for p in passes for a, b in p.option_spans]
    assert names == ["billing", "bug crash", "sales", "refund money"]
    assert len(passes) == 2
    for p in passes:
        assert decode(reader, p.input_ids).startswith("[CLS] which team [SEP]")
        assert decode(reader, p.input_ids).endswith("refund my money please [SEP]")
    (probs,) = reader.predict([("refund my money please", question)])
    assert len(probs) == 4 and abs(sum(probs) - 1) < 1e-5


def test_a_long_state_keeps_its_head_and_tail_within_the_window(tiny_folder):
    reader = make_reader(tiny_folder)
    state = " ".join(["hello"] * 10 + ["bug"] * 80 + ["thanks"] * 10)
    (p,) = reader.layout(state, wire.Noul(instructions="bug"))
    assert len(p.input_ids) == 64
    assert p.state_tokens == 100 and p.state_kept == 64 - 4
    text = decode(reader, p.input_ids)
    assert "hello" in text and "thanks" in text
    assert truncate_ids(list(range(10)), 4, 0.5) == [0, 1, 8, 9]


def test_the_question_text_carries_a_nouls_criteria_and_options_read_humanised():
    q = wire.validate_questions(
        {"x": {"type": "noul", "instructions": "Spam?", "criteria": {"true": "ads", "false": "a friend"}}}
    )["x"]
    assert question_text(q) == "Spam? (yes: ads; no: a friend)"
    c = wire.Choice(instructions="?", criteria={"lost_card": "The card is gone.", "refund": None})
    assert reader_option_texts(c) == ["lost card: The card is gone.", "refund"]


def toy_records(n: int, seed: int) -> list[dict]:
    """Yes/no and choice questions whose answer is a word of the state, asked both ways round."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        spam = rng.random() < 0.5
        state = " ".join(
            rng.sample(["hello", "thanks", "my", "order", "the"], 3)
            + (["win", "prize"] if spam else ["late", "delivery"])
        )
        negated = rng.random() < 0.5
        out.append(
            {
                "state": state,
                "questions": {QID: {"type": "noul", "instructions": "not spam" if negated else "spam"}},
                "labels": {QID: spam != negated},
            }
        )
        names = ["spam", "delivery"] if rng.random() < 0.5 else ["delivery", "spam"]
        out.append(
            {
                "state": state,
                "questions": {QID: {"type": "choice", "instructions": "which", "criteria": dict.fromkeys(names)}},
                "labels": {QID: "spam" if spam else "delivery"},
            }
        )
    return out


def test_training_steps_lower_the_loss_and_calibration_is_fitted_on_held_out_records(tiny_folder):
    reader = make_reader(tiny_folder)
    train = typed_items(toy_records(64, seed=0))
    params = list(reader.iter_parameters())
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=3e-3)
    reader.train_mode(True)
    losses = []
    for step in range(100):
        batch = train[(step * 16) % len(train) :][:16]
        loss = batch_loss(reader, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    reader.train_mode(False)
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10
    valid = typed_items(toy_records(40, seed=1))
    calibration = fit_calibration(reader, valid)
    assert calibration.fitted_on == {"nouls": 40, "choices": 40, "scores": 0}
    assert calibration.noul_a > 0 and calibration.choice_temperature > 0
    reader.set_calibration(calibration)
    probs = reader.predict(
        [(wire.state_text(r["state"]), wire.validate_questions(r["questions"])[QID]) for r in toy_records(20, 2)]
    )
    gold = [g for _, _, g in typed_items(toy_records(20, 2))]
    accuracy = sum(max(range(len(p)), key=p.__getitem__) == g for p, g in zip(probs, gold)) / len(gold)
    assert accuracy >= 0.9


def test_save_and_load_give_the_same_answers(tiny_folder, tmp_path):
    reader = make_reader(tiny_folder)
    items = [
        ("win a prize", wire.Noul(instructions="spam")),
        ("late delivery", wire.Choice(instructions="which", criteria={"a": None, "b": None})),
    ]
    reader.save(tmp_path / "r", dtype=torch.float32)
    assert QuestionReader.exists(tmp_path / "r") and not QuestionReader.exists(tmp_path)
    again = QuestionReader.load(tmp_path / "r")
    for got, want in zip(again.predict(items), reader.predict(items)):
        assert got == pytest.approx(want, abs=1e-6)
    with pytest.raises(FileNotFoundError, match="no question reader"):
        QuestionReader.load(tmp_path)


def test_length_buckets_cover_every_index_once():
    batches = length_buckets([random.Random(i).randint(1, 90) for i in range(103)], 8, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(103))


def test_the_engine_answers_untaught_questions_with_the_reader_and_saves_it(tiny_folder, tmp_path):
    model = make_model(tiny_folder)
    reader = make_reader(tiny_folder)
    noul = {"type": "noul", "instructions": "is this spam"}
    head_only = model.invoke({"state": "win a prize", "questions": {"s": noul}})
    assert "x_reader" not in head_only.extensions
    model.engine.attach_reader(reader)
    response = model.invoke({"state": "win a prize", "questions": {"s": noul}})
    assert response.extensions["x_reader"] == ["s"]
    expected = reader.predict([("win a prize", wire.validate_questions({"s": noul})["s"])])[0]
    assert wire.answer_probabilities(response.answers["s"]) == pytest.approx(expected, abs=1e-6)
    assert response.usage["input_tokens"] == len(
        reader.layout("win a prize", wire.validate_questions({"s": noul})["s"])[0].input_ids
    )
    model.save_pretrained(tmp_path / "m")
    from clef_agents.model import ClefDecisionModel, UntrainedModelWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedModelWarning)
        loaded = ClefDecisionModel.from_pretrained(tmp_path / "m", reader=True)
        without = ClefDecisionModel.from_pretrained(tmp_path / "m")  # the default: one pass, no reader
    again = loaded.invoke({"state": "win a prize", "questions": {"s": noul}})
    assert again.extensions["x_reader"] == ["s"]
    assert wire.answer_probabilities(again.answers["s"]) == pytest.approx(expected, abs=2e-3)  # saved in half precision
    assert "x_reader" not in without.invoke({"state": "win a prize", "questions": {"s": noul}}).extensions


def test_label_questions_flip_the_gold_answer_exactly_when_negated():
    rng = random.Random(0)
    names = ["lost_card", "refund", "late_delivery"]
    records = label_questions("where is my card", "lost_card", names, {}, "intent", "demo", rng, 200)
    plain = [r for r in records if r["meta"]["form"] == "label_noul"]
    negated = [r for r in records if r["meta"]["form"] == "label_noul_negated"]
    assert plain and negated
    for r in plain + negated:
        text = r["questions"][QID]["instructions"]
        about_gold = "lost card" in text.lower()
        assert r["labels"][QID] == (about_gold != (r in negated)), text


def test_reader_records_refuse_held_out_and_unshippable_sets():
    with pytest.raises(ValueError, match="held-out"):
        reader_records("train", per_set=10, sets=["clickbait"])
    with pytest.raises(ValueError, match="shipped"):
        reader_records("train", per_set=10, sets=["subj"])


def test_attach_reader_writes_a_checkpoint_that_answers_untaught_questions_with_it(tiny_folder, tmp_path):
    from clef_agents.model import ClefDecisionModel, UntrainedModelWarning
    from clef_agents.train.reader import attach_reader

    make_model(tiny_folder).save_pretrained(tmp_path / "base")
    reader = make_reader(tiny_folder)
    reader.config = reader.config.model_copy(update={"trained_on": {"sets": ["demo"], "excluded": ["banking77"]}})
    reader.save(tmp_path / "reader")
    attach_reader(tmp_path / "base", tmp_path / "reader", tmp_path / "with_reader")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedModelWarning)
        model = ClefDecisionModel.from_pretrained(str(tmp_path / "with_reader") + "+reader")
    assert model.config.data_card["reader"] == {"sets": ["demo"], "excluded": ["banking77"]}
    response = model.invoke({"state": "win a prize", "questions": {"s": {"type": "noul", "instructions": "spam"}}})
    assert response.extensions["x_reader"] == ["s"]


def test_calibrate_refits_the_readers_final_temperature_on_the_questions_it_answers(tiny_folder, tmp_path, capsys):
    from clef_agents.cli import main
    from clef_agents.model import ClefDecisionModel, UntrainedModelWarning
    from clef_agents.train.calibration import fit_reader_temperature
    from clef_agents.train.evaluate import summarise_calibration

    model, reader = model_with_reader(tiny_folder)
    reader.set_head_weights({"noul": 0.25})
    reader.set_final_temperature({"noul": 0.05})  # far too sharp for a reader that knows nothing
    records = toy_records(40, seed=9)
    before = summarise_calibration(model, records)["noul"]
    fitted = fit_reader_temperature(model, records, progress=False)
    assert fitted["questions"] == {"noul": 40, "choice": 40, "score": 0}
    assert (
        fitted["temperatures"]["noul"] > 0.05
        and reader.describe()["final_temperature"]["noul"] == fitted["temperatures"]["noul"]
    )
    after = summarise_calibration(model, records)["noul"]
    assert after["nll"] < before["nll"] and after["accuracy"] == before["accuracy"]
    assert fit_reader_temperature(model, records[:10], progress=False)["temperatures"] == {}  # 5 of each: too few

    reader.set_final_temperature({"noul": 0.05})
    model.save_pretrained(tmp_path / "sharp")
    (tmp_path / "labelled.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedModelWarning)
        assert (
            main(
                [
                    "calibrate",
                    "--model",
                    str(tmp_path / "sharp") + "+reader",
                    "--records",
                    str(tmp_path / "labelled.jsonl"),
                    "--out",
                    str(tmp_path / "refitted"),
                ]
            )
            == 0
        )
        report = json.loads(capsys.readouterr().out)
        saved = ClefDecisionModel.from_pretrained(tmp_path / "refitted", reader=True)
    assert report["reader_final_temperature"]["temperatures"]["noul"] > 0.05
    assert (
        saved.engine.reader.describe()["final_temperature"]["noul"]
        == report["reader_final_temperature"]["temperatures"]["noul"]
    )
    assert report["after"]["noul"]["nll"] < report["before"]["noul"]["nll"]


def test_the_cli_parses_train_reader_with_its_defaults():
    from clef_agents.cli import build_parser

    args = build_parser().parse_args(["train-reader", "--out", "runs/r", "--model", "mini"])
    assert (args.steps, args.batch_size, args.exclude, args.max_tokens, args.keep_every) == (
        2300,
        32,
        ["banking77"],
        256,
        None,
    )
    assert args.func.__name__ == "_run_train_reader"
    kept = build_parser().parse_args(
        ["train-reader", "--out", "runs/r", "--keep-every", "300", "--exclude", "banking77", "xstest"]
    )
    assert (kept.keep_every, kept.exclude) == (300, ["banking77", "xstest"])


def test_evaluation_scores_untaught_questions_by_the_readers_answers(tiny_folder):
    from clef_agents.train.evaluate import evaluate_records

    model = make_model(tiny_folder)
    reader = make_reader(tiny_folder)
    model.engine.attach_reader(reader)
    records = toy_records(6, seed=3)
    report = evaluate_records(model, records, progress=False)
    assert report["noul"]["reader_questions"] == 6 and report["choice"]["reader_questions"] == 6
    probs = reader.predict(
        [(wire.state_text(r["state"]), wire.validate_questions(r["questions"])[QID]) for r in records]
    )
    gold = [g for _, _, g in typed_items(records)]
    nouls = [(p, g) for p, g, r in zip(probs, gold, records) if r["questions"][QID]["type"] == "noul"]
    expected = sum(max(range(2), key=p.__getitem__) == g for p, g in nouls) / len(nouls)
    assert report["noul"]["calibrated"]["accuracy"] == pytest.approx(expected)
    assert "head_calibrated" in report["noul"]


def test_choices_with_more_options_than_the_reader_takes_go_to_the_head(tiny_folder):
    model = make_model(tiny_folder)
    model.engine.attach_reader(make_reader(tiny_folder, max_options=3))
    small = {"type": "choice", "instructions": "which team", "criteria": {"billing": None, "sales": None, "bug": None}}
    large = {
        "type": "choice",
        "instructions": "which team",
        "criteria": dict.fromkeys(["billing", "sales", "bug", "login"]),
    }
    noul = {"type": "noul", "instructions": "is this spam"}
    response = model.invoke({"state": "refund my money", "questions": {"small": small, "large": large, "spam": noul}})
    assert response.extensions["x_reader"] == ["small", "spam"]
    alone = model.engine.predict([("refund my money", [wire.validate_questions({"large": large})["large"]])])[0]
    assert alone.answered_by == ["head"]
    assert wire.answer_probabilities(response.answers["large"]) == pytest.approx(alone.probabilities[0], abs=1e-5)


def test_reader_records_name_their_recipe_version():
    with pytest.raises(ValueError, match="version"):
        reader_records("train", per_set=10, sets=["sms_spam"], version=4)


def test_recipe_three_adds_the_written_questions_four_times_in_training_and_once_in_validation():
    from clef_agents.train.reader_data import WRITTEN_COPIES
    from clef_agents.train.reader_questions import SOURCE, written_records

    valid = reader_records("valid", sets=[], version=3)
    assert len(valid) == len(written_records("valid")) > 0 and {r["meta"]["dataset"] for r in valid} == {SOURCE}
    assert len(reader_records("train", sets=[], version=3)) == WRITTEN_COPIES * len(written_records("train"))
    assert reader_records("train", sets=[], version=3, exclude=[SOURCE]) == []
    assert reader_records("train", sets=[], version=2) == []


def test_head_weights_mix_the_heads_answer_into_the_readers_for_their_type_only(tiny_folder, tmp_path):
    model, reader = model_with_reader(tiny_folder)
    choice, noul = team_and_spam_questions()
    state = "refund my money"
    read = reader.predict([(state, choice), (state, noul)])
    model.engine.attach_reader(None)
    head = model.engine.predict([(state, [choice, noul])])[0].probabilities
    model.engine.attach_reader(reader)
    assert model.engine.read_by_head([choice, noul]) == [False, False]
    reader.set_head_weights({"choice": 0.5})
    assert model.engine.read_by_head([choice, noul]) == [True, False]
    mixed = model.engine.predict([(state, [choice, noul])])[0]
    assert mixed.answered_by == ["reader", "reader"]
    assert mixed.probabilities[0] == pytest.approx(
        QuestionReader.mix_with_head(read[0], head[0], 0.5), abs=2e-4
    )  # batched apart
    assert mixed.probabilities[1] == pytest.approx(read[1], abs=2e-4)
    assert mixed.probabilities[0] != pytest.approx(read[0], abs=1e-3)
    reader.save(tmp_path / "r")
    assert QuestionReader.load(tmp_path / "r").head_weight(choice) == 0.5


def test_head_weights_outside_zero_to_one_are_refused(tiny_folder):
    reader = make_reader(tiny_folder)
    for weights in ({"choice": 1.0}, {"noul": -0.1}):
        with pytest.raises(ValueError, match=r"head_weights must lie in \[0, 1\)"):
            reader.set_head_weights(weights)
    with pytest.raises(ValueError):
        reader.set_head_weights({"ranking": 0.5})
    with pytest.raises(ValueError, match="cannot mix 2 reader options with 3"):
        QuestionReader.mix_with_head([0.5, 0.5], [0.2, 0.3, 0.5], 0.5)


def test_the_final_temperature_flattens_the_mixed_answer_of_its_type_without_moving_its_argmax(tiny_folder, tmp_path):
    model, reader = model_with_reader(tiny_folder)
    choice, noul = team_and_spam_questions()
    state = "refund my money"
    reader.set_head_weights({"noul": 0.25, "choice": 0.25})
    before = model.engine.predict([(state, [choice, noul])])[0].probabilities
    reader.set_final_temperature({"noul": 3.0})
    after = model.engine.predict([(state, [choice, noul])])[0].probabilities
    assert after[0] == pytest.approx(before[0], abs=1e-6)
    assert after[1] == pytest.approx(QuestionReader.temper(before[1], 3.0), abs=1e-6)
    assert abs(after[1][0] - 0.5) < abs(before[1][0] - 0.5)
    assert (after[1][0] > 0.5) == (before[1][0] > 0.5)
    reader.save(tmp_path / "r")
    assert QuestionReader.load(tmp_path / "r").describe()["final_temperature"] == {"noul": 3.0}


def test_final_answer_needs_the_heads_answer_where_the_head_is_mixed_in_and_refuses_bad_temperatures(tiny_folder):
    reader = make_reader(tiny_folder)
    _, noul = team_and_spam_questions()
    assert reader.final_answer(noul, [0.7, 0.3]) == [0.7, 0.3]
    reader.set_head_weights({"noul": 0.5})
    with pytest.raises(ValueError, match="mixes the head's answer into noul questions"):
        reader.final_answer(noul, [0.7, 0.3])
    assert reader.final_answer(noul, [0.7, 0.3], [0.3, 0.7]) == pytest.approx([0.5, 0.5])
    for temperatures in ({"noul": 0.0}, {"choice": -1.0}, {"noul": float("nan")}):
        with pytest.raises(ValueError, match="final_temperature must be finite and above 0"):
            reader.set_final_temperature(temperatures)
    with pytest.raises(ValueError):
        reader.set_final_temperature({"ranking": 2.0})
    assert QuestionReader.temper([0.9, 0.05, 0.05], 1.0) == [0.9, 0.05, 0.05]
    sharper = QuestionReader.temper([0.6, 0.3, 0.1], 0.5)
    assert sharper[0] > 0.6 and sum(sharper) == pytest.approx(1.0)


def test_evaluation_scores_the_readers_questions_by_what_the_model_answers(tiny_folder):
    from clef_agents.train.calibration import collect_logits

    model, reader = model_with_reader(tiny_folder)
    reader.set_head_weights({"noul": 0.25, "choice": 0.5})
    reader.set_final_temperature({"noul": 2.0, "choice": 0.7})
    records = toy_records(6, seed=5)
    collected = collect_logits(model, records, progress=False)
    answered = [
        model.engine.predict([(wire.state_text(r["state"]), [wire.validate_questions(r["questions"])[QID]])])[
            0
        ].probabilities[0]
        for r in records
    ]
    assert all(item.read for item in collected)
    for item, expected in zip(collected, answered):
        assert item.answered == pytest.approx(expected, abs=2e-4)  # batched apart


def test_the_probe_report_scores_yes_no_by_auroc_and_choices_by_accuracy_with_enough_items():
    from clef_agents.train.reader_probe import MIN_GROUP, probe_half, probe_report

    noul = wire.Noul(instructions="Spam?")
    choice = wire.Choice(instructions="Which?", criteria={"a": None, "b": None, "c": None})
    items = [(f"s{i}", noul, i % 2, {"dataset": "d", "form": "own"}) for i in range(MIN_GROUP)]
    answers = [[0.9, 0.1] if i % 2 == 0 else [0.2, 0.8] for i in range(MIN_GROUP)]
    items += [(f"c{i}", choice, 0, {"dataset": "e", "form": "choice"}) for i in range(MIN_GROUP)]
    answers += [[0.6, 0.3, 0.1] if i < MIN_GROUP // 2 else [0.1, 0.8, 0.1] for i in range(MIN_GROUP)]
    items.append(("few", choice, 2, {"dataset": "d", "form": "choice"}))
    answers.append([0.0, 0.0, 1.0])
    report = probe_report(items, answers)
    assert report["sets"]["d"]["noul"]["auroc"] == 1.0
    assert report["sets"]["e"]["choice"]["accuracy"] == 0.5
    assert report["summary"]["choice_accuracy"] == 0.5  # set d's single choice is too few to count
    assert report["summary"]["criterion"] == 0.75
    assert {probe_half(item) for item in items} == {0, 1}
    with pytest.raises(ValueError, match="41 probe items but 40 answers"):
        probe_report(items, answers[:-1])


def test_prior_correction_subtracts_the_answer_about_a_content_free_state(tiny_folder, tmp_path):
    reader = make_reader(tiny_folder)
    choice = wire.Choice(instructions="which team", criteria={"billing": None, "sales": None, "bug": None})
    noul = wire.Noul(instructions="is this spam")
    items = [("refund my money", choice), ("win a prize", noul)]
    raw = reader.logits(items)
    priors = reader.prior_logits([choice, noul])
    alone = reader.logits([(state, choice) for state in ("", "N/A")])
    assert priors[0] == pytest.approx((alone[0] + alone[1]) / 2, abs=1e-5)
    assert [z.tolist() for z in reader.corrected_logits(items)] == [z.tolist() for z in raw]
    assert reader.correct([choice], raw[:1], {"choice": 0.5})[0] == pytest.approx(raw[0] - 0.5 * priors[0], abs=1e-5)
    reader.set_prior_correction({"choice": 1.0})
    corrected = reader.corrected_logits(items)
    assert corrected[0] == pytest.approx(raw[0] - priors[0], abs=1e-5)
    assert corrected[1].tolist() == raw[1].tolist()
    expected = torch.softmax(corrected[0] / reader.config.calibration.choice_temperature, -1).tolist()
    assert reader.predict(items[:1])[0] == pytest.approx(expected, abs=1e-5)
    reader.save(tmp_path / "r")
    assert QuestionReader.load(tmp_path / "r").correction(choice) == 1.0
    with pytest.raises(ValueError, match=r"prior_correction must lie in \[0, 1\]"):
        reader.set_prior_correction({"noul": 1.5})


def test_the_wide_probe_asks_every_question_type_on_trainable_sets_only():
    from clef_agents.train.datasets import data_root
    from clef_agents.train.reader_probe import wide_probe_items
    from clef_agents.train.split import HELD_OUT

    try:
        data_root()
    except FileNotFoundError as err:
        pytest.skip(f"shared data not present: {err}")
    items = wide_probe_items(rows_per_set=4)
    assert {type(q) for _, q, _, _ in items} == {wire.Noul, wire.Choice, wire.Score}
    assert not {meta["dataset"] for _, _, _, meta in items} & set(HELD_OUT)
    assert [(s, g) for s, _, g, _ in wide_probe_items(rows_per_set=4)] == [(s, g) for s, _, g, _ in items]


def test_train_reader_learns_from_staged_records_and_keeps_every_checkpoint(tiny_folder, tmp_path):
    from clef_agents.records import read_records, write_records
    from clef_agents.train.reader import train_reader

    write_records(tmp_path / "train.jsonl", [{**r, "meta": {"dataset": "toy"}} for r in toy_records(40, seed=0)])
    staged = read_records(tmp_path / "train.jsonl")
    config = ReaderConfig(backbone=str(tiny_folder), max_tokens=64, max_question_tokens=8, max_option_tokens=4)
    summary = train_reader(
        tmp_path / "run",
        steps=4,
        batch_size=8,
        records=staged,
        valid_records=toy_records(30, seed=5),
        config=config,
        device="cpu",
        progress=False,
        save_every=2,
        keep_every=2,
    )
    assert (summary["staged"], summary["records"], summary["sets"], summary["device"], summary["steps"]) == (
        True,
        80,
        ["toy"],
        "cpu",
        4,
    )
    assert summary["calibration"]["fitted_on"] == {"nouls": 30, "choices": 30, "scores": 0}
    for kept in ("step2", "step4", "last", "final"):
        assert QuestionReader.exists(tmp_path / "run" / kept), kept
    reloaded = QuestionReader.load(tmp_path / "run" / "final")
    assert reloaded.config.trained_on["records"] == 80 and reloaded.config.calibration.fitted_on["nouls"] == 30
    assert (reloaded.config.trained_on["steps"], reloaded.config.trained_on["finished"]) == (4, True)
    early = QuestionReader.load(tmp_path / "run" / "step2").config.trained_on
    assert (early["steps"], early["finished"], early["records"], early["sets"]) == (2, False, 80, ["toy"])
    with pytest.raises(ValueError, match="no training records"):
        train_reader(tmp_path / "empty", steps=1, records=[], config=config, device="cpu", progress=False)


def test_the_cli_parses_staged_reader_training_and_the_staging_command():
    from clef_agents.cli import build_parser

    args = build_parser().parse_args(
        [
            "train-reader",
            "--out",
            "r",
            "--records",
            "a.jsonl",
            "b.jsonl",
            "--valid-records",
            "v.jsonl",
            "--device",
            "cuda",
        ]
    )
    assert (args.records, args.valid_records, args.device) == (["a.jsonl", "b.jsonl"], ["v.jsonl"], "cuda")
    staged = build_parser().parse_args(["reader-records", "--out", "s.jsonl", "--per-set", "10", "--split", "valid"])
    assert (staged.out, staged.per_set, staged.split, staged.exclude, staged.data_version) == (
        "s.jsonl",
        10,
        "valid",
        ["banking77"],
        2,
    )
    assert staged.func.__name__ == "_run_reader_records"


def test_reader_records_writes_a_draw_that_train_reader_reads_back(tmp_path, capsys):
    from clef_agents.cli import main
    from clef_agents.records import read_records
    from clef_agents.train import datasets

    try:
        datasets.data_root()
    except FileNotFoundError:
        pytest.skip("shared data folder not found (set CLEF_AGENTS_DATA)")
    out = tmp_path / "staged" / "valid.jsonl"
    assert (
        main(
            [
                "reader-records",
                "--out",
                str(out),
                "--split",
                "valid",
                "--per-set",
                "4",
                "--exclude",
                "banking77",
                "xstest",
            ]
        )
        == 0
    )
    staged = read_records(out)
    assert staged == reader_records("valid", per_set=4, exclude=["banking77", "xstest"])
    assert f"{len(staged)} one-question records" in capsys.readouterr().out
    assert len(typed_items(staged)) == len(staged) and "xstest" not in {r["meta"]["dataset"] for r in staged}
