"""The neighbour parts of taught questions: the vote of the nearest taught records and the novelty
part on a catch-all option, how teaching adds them where they help, their storage, and the refit of
every part on all records."""

from __future__ import annotations

import json
import random

import pytest
from test_teach import assert_answers_survive_reload, load_without_part, teach_twice_by_cli
from test_training import tiny_records
from tiny_models import WORDS, make_model

torch = pytest.importorskip("torch")


def choice_record(text: str, qid: str, instructions: str, criteria: dict[str, str], label: str, dataset: str) -> dict:
    """One decision record asking a single choice question."""
    return {
        "state": text,
        "questions": {qid: {"type": "choice", "instructions": instructions, "criteria": criteria}},
        "labels": {qid: label},
        "meta": {"dataset": dataset, "split": "train", "source": "test"},
    }


def prototype_records(n: int, seed: int, prototypes: int = 24) -> list[dict]:
    """Repeats of a few fixed random phrases, each with its own arbitrary label: what a neighbour vote
    answers by lookup and a smooth map from features must learn phrase by phrase."""
    phrases = random.Random(99)
    table = [
        (" ".join(phrases.choice(WORDS) for _ in range(6)), phrases.choice(["left", "right", "up"]))
        for _ in range(prototypes)
    ]
    criteria = {"left": "to the left", "right": "to the right", "up": "upwards"}
    rng = random.Random(seed)
    return [
        choice_record(text, "way", "which way", criteria, label, "prototypes")
        for text, label in (rng.choice(table) for _ in range(n))
    ]


def test_the_vote_weights_the_nearest_records_by_similarity():
    from clef_agents.model.neighbours import FLOOR, NeighbourModel

    bank = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]]), dim=-1)
    model = NeighbourModel(torch.zeros(2), torch.eye(2), bank, torch.tensor([0, 0, 1]), k=2, temperature=0.5)
    probabilities = model.logits(torch.tensor([1.0, 0.05]), n=3).exp()
    assert probabilities.shape == (3,)
    assert probabilities[0] == pytest.approx(1.0 - FLOOR + FLOOR / 3, abs=1e-5)  # both nearest say option 0
    assert probabilities[2] == pytest.approx(FLOOR / 3, abs=1e-6)  # no neighbour holds option 2
    wide = NeighbourModel(torch.zeros(2), torch.eye(2), bank, torch.tensor([0, 0, 1]), k=50, temperature=0.5)
    assert wide.logits(torch.tensor([[0.0, 1.0]]), n=3).exp()[0, 1] > 0.4  # k is cut to the bank's size
    with pytest.raises(ValueError, match="k >= 1 and temperature > 0"):
        NeighbourModel(torch.zeros(2), torch.eye(2), bank, torch.tensor([0, 0, 1]), k=0, temperature=0.5)
    with pytest.raises(ValueError, match="does not match labels"):
        NeighbourModel(torch.zeros(2), torch.eye(2), bank, torch.tensor([0, 1]), k=1, temperature=0.5)


def test_banks_store_as_int8_within_half_a_step():
    from clef_agents.model.neighbours import BANK_LEVELS, dequantise_bank, fit_projection, quantise_bank

    features = torch.randn(40, 16)
    mean, projection = fit_projection(features, dims=4)
    assert projection.shape == (16, 4) and mean.shape == (16,)
    again = fit_projection(features, dims=4)[1]
    assert torch.allclose(projection.abs(), again.abs(), atol=1e-5)  # seeded: the same directions every time
    bank = torch.nn.functional.normalize(torch.randn(10, 4), dim=-1)
    codes = quantise_bank(bank)
    assert codes.dtype == torch.int8
    assert (dequantise_bank(codes) - bank).abs().max() <= 0.5 / BANK_LEVELS + 1e-6


@pytest.fixture(scope="module")
def prototype_taught(encoder_dir):
    from clef_agents.train.teach import teach

    model = make_model(encoder_dir)
    reports = teach(model, prototype_records(150, 1), prototype_records(60, 2), lexical=False, progress=False)
    return model, reports


def test_teaching_adds_the_vote_where_it_lowers_held_out_nll(prototype_taught):
    from clef_agents.train.teach import NEIGHBOUR_MIN_GAIN

    model, reports = prototype_taught
    report = reports["which way"]
    neighbours = report["neighbours"]
    assert neighbours["kept"] is True
    assert neighbours["held_out_with_neighbours"]["nll"] <= neighbours["held_out_without_neighbours"]["nll"] * (
        1 - NEIGHBOUR_MIN_GAIN
    )
    assert report["held_out_taught"] == neighbours["held_out_with_neighbours"]
    assert report["held_out_taught"]["accuracy"] == 1.0
    entry = next(iter(model.engine.taught.questions.values()))
    assert entry.neighbours is not None and entry.epsilon > 0
    assert entry.neighbours.bank.shape[0] == 210  # refit: the bank holds the fit and the held-out records
    assert report["blend"]["neighbours"] == pytest.approx(entry.epsilon, abs=1e-4)


def test_the_vote_and_the_novelty_part_are_kept_or_dropped_by_the_stated_rules(encoder_dir):
    from clef_agents.train.teach import NEIGHBOUR_MIN_GAIN, NOVELTY_MIN_GAIN, teach

    model = make_model(encoder_dir)
    reports = teach(model, tiny_records(90, 40), tiny_records(40, 41), catch_all=["sales"], progress=False)
    assert (
        "novelty" in reports["which team"] and "novelty" not in reports["is this urgent"]
    )  # only where "sales" is an option
    for text, report in reports.items():
        neighbours, novelty = report["neighbours"], report.get("novelty", {"kept": False})
        gain_met = neighbours["held_out_with_neighbours"]["nll"] <= neighbours["held_out_without_neighbours"]["nll"] * (
            1 - NEIGHBOUR_MIN_GAIN
        )
        entry = next(e for e in model.engine.taught.questions.values() if e.instructions == text)
        assert (entry.epsilon > 0) is neighbours["kept"]
        assert not neighbours["kept"] or gain_met
        assert (entry.novelty is not None) is novelty["kept"]
        if novelty["kept"]:
            assert novelty["weight"] < 0
            assert novelty["held_out_with_novelty"]["nll"] <= novelty["held_out_without_novelty"]["nll"] * (
                1 - NOVELTY_MIN_GAIN
            )


def test_vote_answers_survive_save_and_load(prototype_taught, tmp_path):
    model, _ = prototype_taught
    entry = assert_answers_survive_reload(model, tmp_path / "neighbours", prototype_records(20, 3), "way")
    assert set(entry["neighbours"]) == {"epsilon", "k", "temperature"}


def test_a_file_missing_the_bank_names_it(prototype_taught, tmp_path):
    model, _ = prototype_taught
    with pytest.raises(ValueError, match="lacks neighbour_bank"):
        load_without_part(model, tmp_path / "partial", "neighbour_bank")


def test_refit_fits_every_part_again_on_all_records(encoder_dir):
    """The refit keeps what held-out chose (features, L2, blend) and learns the held-out records too."""
    from clef_agents.train.teach import teach

    records, held = tiny_records(60, 50), tiny_records(30, 51)
    models, reports = {}, {}
    for refit in (False, True):
        torch.manual_seed(0)
        models[refit] = make_model(encoder_dir)
        reports[refit] = teach(models[refit], records, held, refit=refit, progress=False)
    for text in reports[True]:
        before, after = reports[False][text], reports[True][text]
        assert after["refit"] == {"records": 90} and "refit" not in before
        for same in ("features", "l2", "blend", "held_out_taught"):
            assert after[same] == before[same]
    entries = {refit: {e.instructions: e for e in m.engine.taught.questions.values()} for refit, m in models.items()}
    for text, entry in entries[True].items():
        assert not torch.equal(entry.hidden_weight, entries[False][text].hidden_weight)
    seen = [{"state": r["state"], "questions": r["questions"]} for r in held]
    nll = {}
    for refit, model in models.items():
        answers = model.batch(seen)
        nll[refit] = -sum(
            torch.tensor(a.answers["team"].probabilities[r["labels"]["team"]]).log() for a, r in zip(answers, held)
        )
    assert nll[True] < nll[False]


def test_cli_teaches_without_the_vote_or_the_refit_and_with_a_catch_all(encoder_dir, tmp_path, capsys):
    flags = ["--no-neighbours", "--catch-all", "up", "--no-refit"]
    printed, without, report = teach_twice_by_cli(encoder_dir, tmp_path, prototype_records(160, 5), flags, capsys)
    assert "| which way | 160 | 16 | mean" in printed
    defaults = json.loads((tmp_path / "defaults" / "teach_report.json").read_text())["which way"]
    neighbours = f"k={defaults['neighbours']['k']}" if defaults["neighbours"]["kept"] else "no"
    assert f"| {neighbours} | no | " in printed and "novelty" not in defaults  # no catch-all named: no novelty part
    (entry,) = without.engine.taught.questions.values()
    assert entry.epsilon == 0.0 and (entry.neighbours is None) is (
        entry.novelty is None
    )  # a bank only for the novelty part
    assert report["which way"]["novelty"]["kept"] is (entry.novelty is not None)
    assert without.config.data_card["taught"]["command"].endswith("--no-neighbours --catch-all up --no-refit")
    assert not {"neighbours", "refit"} & set(report["which way"])


def catch_all_records(n: int, seed: int) -> list[dict]:
    """Two intents told by fixed phrases (with a word swapped now and then) and a catch-all "none"
    whose states are fresh random words, unlike every taught phrase: what the novelty part is for."""
    phrases = random.Random(7)
    table = {
        label: [" ".join(phrases.choice(WORDS[:40]) for _ in range(6)) for _ in range(4)]
        for label in ("refund", "delivery")
    }
    criteria = {"refund": "asks for money back", "delivery": "asks where a parcel is", "none": "none of these"}
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        label = rng.choice(["refund", "delivery", "none"])
        if label == "none":
            text = " ".join(rng.choice(WORDS[40:]) for _ in range(6))
        else:
            words = rng.choice(table[label]).split()
            words[rng.randrange(6)] = rng.choice(WORDS[:40])
            text = " ".join(words)
        records.append(choice_record(text, "intent", "which intent", criteria, label, "catch_all"))
    return records


def test_the_novelty_feature_is_the_nearest_record_of_another_option():
    from clef_agents.model.neighbours import NeighbourModel, novelty

    bank = NeighbourModel(
        torch.zeros(2),
        torch.eye(2),
        torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]),
        torch.tensor([0, 1, 1]),
        k=1,
        temperature=0.1,
    )
    similarity = bank.similarity(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
    nearest = bank.nearest_by_label(similarity, n=3)
    torch.testing.assert_close(nearest, torch.tensor([[1.0, 0.6, -1.0], [0.0, 1.0, -1.0]]))  # option 2 holds no record
    assert novelty(nearest, option=2).tolist() == pytest.approx([1.0, 1.0])
    assert novelty(nearest, option=0).tolist() == pytest.approx([0.6, 1.0])


@pytest.fixture(scope="module")
def catch_all_taught(encoder_dir):
    from clef_agents.train.teach import teach

    model = make_model(encoder_dir)
    reports = teach(
        model, catch_all_records(240, 11), catch_all_records(120, 12), lexical=False, catch_all=["none"], progress=False
    )
    return model, reports


def test_teaching_puts_the_novelty_part_on_the_catch_all_option(catch_all_taught):
    from clef_agents.train.teach import NOVELTY_MIN_GAIN

    model, reports = catch_all_taught
    report = reports["which intent"]["novelty"]
    assert report["kept"] is True and report["option"] == "none" and report["weight"] < 0
    assert report["held_out_with_novelty"]["nll"] <= report["held_out_without_novelty"]["nll"] * (1 - NOVELTY_MIN_GAIN)
    assert reports["which intent"]["held_out_taught"] == report["held_out_with_novelty"]
    (entry,) = model.engine.taught.questions.values()
    assert entry.novelty is not None and entry.novelty.option == "none"
    assert entry.neighbours is not None and entry.neighbours.bank.shape[0] == 360  # refit on fit + held-out


def test_novelty_answers_survive_save_and_load(catch_all_taught, tmp_path):
    model, _ = catch_all_taught
    entry = assert_answers_survive_reload(model, tmp_path / "novelty", catch_all_records(30, 13), "intent")
    assert entry["novelty"]["option"] == "none" and entry["novelty"]["weight"] < 0


def test_a_catch_all_option_no_question_has_is_refused(encoder_dir):
    from clef_agents.train.teach import teach

    with pytest.raises(ValueError, match=r"catch-all option \['nowhere'\], which no question"):
        teach(make_model(encoder_dir), catch_all_records(40, 14), catch_all=["nowhere"], progress=False)


def test_novelty_without_a_neighbour_bank_is_refused(catch_all_taught):
    from dataclasses import replace

    model, _ = catch_all_taught
    (entry,) = model.engine.taught.questions.values()
    with pytest.raises(ValueError, match="novelty part on 'none' needs the neighbour bank"):
        replace(entry, neighbours=None)
    with pytest.raises(ValueError, match="one of the options"):
        replace(entry, novelty=replace(entry.novelty, option="elsewhere"))
