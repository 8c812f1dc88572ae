"""bench/reader/mixing.py: a mixing knob is kept only when it raises its part of the probe's criterion out
of fold in both folds (synthetic probe answers on a tiny reader; nothing is read)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.reader.mixing import Knobs, fold, kept
from clef_agents import wire
from clef_agents.model.reader import QuestionReader, ReaderConfig
from clef_agents.train.reader_probe import probe_half
from tests.tiny_models import tiny_backbone

OPTIONS = {"alpha": None, "beta": None, "gamma": None}


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> QuestionReader:
    folder = tiny_backbone("encoder", tmp_path_factory.mktemp("tiny_mixing_backbone"))
    return QuestionReader.create(ReaderConfig(backbone=str(folder), max_tokens=64))


def probe_data(cosine_knows: bool, seed: int = 0) -> dict:
    """Probe inputs on two yes/no and two choice sets. The reader and the head answer at random; the
    choices' cosine logits point at the gold option when ``cosine_knows``, else they are noise too."""
    rng = random.Random(seed)
    data: dict = {"items": [], "logits": [], "head": [], "cosine": []}
    for n in range(480):
        dataset = ("yes_a", "yes_b", "pick_a", "pick_b")[n % 4]
        state = f"state {n} {rng.random():.6f}"
        if dataset.startswith("yes"):
            gold = rng.randrange(2)
            data["items"].append((state, wire.Noul(instructions="Is it so?"), gold, {"dataset": dataset, "form": "own"}))
            data["logits"].append(torch.tensor([rng.gauss(0, 1)]))
            p = rng.random()
            data["head"].append([p, 1 - p])
            data["cosine"].append(None)
            continue
        gold = rng.randrange(3)
        data["items"].append((state, wire.Choice(instructions="Which?", criteria=OPTIONS), gold, {"dataset": dataset, "form": "choice"}))
        data["logits"].append(torch.tensor([rng.gauss(0, 1) for _ in range(3)]))
        raw = [rng.random() for _ in range(3)]
        data["head"].append([r / sum(raw) for r in raw])
        data["cosine"].append([(3.0 if k == gold and cosine_knows else 0.0) + rng.gauss(0, 1) for k in range(3)])
    return data


def judged(reader: QuestionReader, data: dict) -> tuple[list[dict], dict[str, bool]]:
    knobs = Knobs(reader, data)
    halves = [probe_half(item) for item in data["items"]]
    folds = [fold(knobs, halves, h) for h in (0, 1)]
    return folds, kept(folds)


def test_a_cosine_prior_that_knows_the_answer_is_kept_and_raises_choice_accuracy_out_of_fold(reader):
    folds, keep = judged(reader, probe_data(cosine_knows=True))
    assert keep["K2"]
    for f in folds:
        assert f["chosen"]["cosine_weight"] > 0
        assert f["check"]["K2 cosine prior"]["choice_accuracy"] > f["check"]["shipped recipe (refitted)"]["choice_accuracy"] + 0.2
        assert f["check"]["K2 cosine prior"]["noul_auroc"] == f["check"]["shipped recipe (refitted)"]["noul_auroc"]


def test_a_cosine_prior_that_knows_nothing_is_not_kept(reader):
    _, keep = judged(reader, probe_data(cosine_knows=False))
    assert not keep["K2"]


def test_margin_mixing_is_fitted_on_the_fitting_half_and_answers_yes_no_only(reader):
    data = probe_data(cosine_knows=True)
    knobs = Knobs(reader, data)
    fit = [i for i, item in enumerate(data["items"]) if probe_half(item) == 0]
    settings = knobs.fit_margin_mix(fit, 0.5)
    assert settings["sigma_reader"] > 0 and settings["sigma_head"] > 0
    base = knobs.baseline_answers(knobs.baseline(fit), fit)
    mixed = knobs.with_margin_mix(base, fit, settings)
    for (_, question, _, _), before, after in zip(knobs.pick("items", fit), base, mixed):
        assert abs(sum(after) - 1) < 1e-6
        if isinstance(question, wire.Choice):
            assert after == before
