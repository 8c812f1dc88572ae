"""The neighbour part of taught questions: the vote of the nearest taught records, how teaching adds
it where it helps, its storage, and the refit of every part on all records."""

from __future__ import annotations

import json
import random

import pytest

from test_teach import assert_answers_survive_reload, load_without_part, teach_twice_by_cli
from test_training import tiny_records
from tiny_models import WORDS, make_model

torch = pytest.importorskip("torch")


def prototype_records(n: int, seed: int, prototypes: int = 24) -> list[dict]:
    """Repeats of a few fixed random phrases, each with its own arbitrary label: what a neighbour vote
    answers by lookup and a smooth map from features must learn phrase by phrase."""
    phrases = random.Random(99)
    table = [(" ".join(phrases.choice(WORDS) for _ in range(6)), phrases.choice(["left", "right", "up"])) for _ in range(prototypes)]
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        text, label = rng.choice(table)
        records.append({"state": text,
                        "questions": {"way": {"type": "choice", "instructions": "which way",
                                              "criteria": {"left": "to the left", "right": "to the right", "up": "upwards"}}},
                        "labels": {"way": label}, "meta": {"dataset": "prototypes", "split": "train", "source": "test"}})
    return records


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
    assert neighbours["held_out_with_neighbours"]["nll"] <= neighbours["held_out_without_neighbours"]["nll"] * (1 - NEIGHBOUR_MIN_GAIN)
    assert report["held_out_taught"] == neighbours["held_out_with_neighbours"]
    assert report["held_out_taught"]["accuracy"] == 1.0
    entry = next(iter(model.engine.taught.questions.values()))
    assert entry.neighbours is not None and entry.epsilon > 0
    assert entry.neighbours.bank.shape[0] == 210  # refit: the bank holds the fit and the held-out records
    assert report["blend"]["neighbours"] == pytest.approx(entry.epsilon, abs=1e-4)


def test_the_vote_is_kept_or_dropped_by_the_stated_rule(encoder_dir):
    from clef_agents.train.teach import NEIGHBOUR_MIN_GAIN, teach

    model = make_model(encoder_dir)
    reports = teach(model, tiny_records(90, 40), tiny_records(40, 41), progress=False)
    for text, report in reports.items():
        neighbours = report["neighbours"]
        gain_met = neighbours["held_out_with_neighbours"]["nll"] <= neighbours["held_out_without_neighbours"]["nll"] * (1 - NEIGHBOUR_MIN_GAIN)
        entry = next(e for e in model.engine.taught.questions.values() if e.instructions == text)
        assert (entry.neighbours is not None) is neighbours["kept"]
        assert not neighbours["kept"] or gain_met


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
        nll[refit] = -sum(torch.tensor(a.answers["team"].probabilities[r["labels"]["team"]]).log() for a, r in zip(answers, held))
    assert nll[True] < nll[False]


def test_cli_teaches_without_the_vote_or_the_refit(encoder_dir, tmp_path, capsys):
    flags = ["--no-neighbours", "--no-refit"]
    printed, without, report = teach_twice_by_cli(encoder_dir, tmp_path, prototype_records(160, 5), flags, capsys)
    assert "| which way | 160 | mean" in printed
    defaults = json.loads((tmp_path / "defaults" / "teach_report.json").read_text())["which way"]["neighbours"]
    assert f"| {'k=' + str(defaults['k']) if defaults['kept'] else 'no'} | " in printed
    assert all(entry.neighbours is None for entry in without.engine.taught.questions.values())
    assert without.config.data_card["taught"]["command"].endswith("--no-neighbours --no-refit")
    assert "neighbours" not in report["which way"] and "refit" not in report["which way"]
