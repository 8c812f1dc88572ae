"""bench/reader/final_temperature.py: a type's temperature after head mixing is kept only when it lowers the
out-of-fold NLL in both folds, and the verdict on bench/general follows its rule (synthetic answers; nothing is read)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.reader.final_temperature import fold, judge, kept, nll, tempered
from clef_agents import wire
from clef_agents.train.reader_probe import probe_half

NOUL = wire.Noul(instructions="Is it so?")
CHOICE = wire.Choice(instructions="Which?", criteria={"a": None, "b": None, "c": None})


def synthetic_probe(confidence_by_half: dict[int, float], accuracy: float = 0.6, seed: int = 0) -> tuple[list, list]:
    """Yes/no and choice items right ``accuracy`` of the time, answering with ``confidence_by_half[probe_half]``."""
    rng = random.Random(seed)
    items, answers = [], []
    for n in range(1200):
        question = NOUL if n % 2 else CHOICE
        width = 2 if question is NOUL else 3
        gold = rng.randrange(width)
        item = (f"state {n} {rng.random():.6f}", question, gold, {"dataset": "yes" if question is NOUL else "pick", "form": "own"})
        right = rng.random() < accuracy
        picked = gold if right else rng.choice([o for o in range(width) if o != gold])
        confidence = confidence_by_half[probe_half(item)]
        rest = (1 - confidence) / (width - 1)
        items.append(item)
        answers.append([confidence if o == picked else rest for o in range(width)])
    return items, answers


def test_overconfident_answers_get_a_temperature_above_one_that_holds_out_of_fold():
    items, answers = synthetic_probe({0: 0.95, 1: 0.95})
    folds = [fold(items, answers, half) for half in (0, 1)]
    assert all(f[kind]["temperature"] > 1.5 for f in folds for kind in ("noul", "choice"))
    assert kept(folds) == {"noul": True, "choice": True}
    assert nll(tempered(answers, folds[0]["noul"]["temperature"]), [i[2] for i in items]) < nll(answers, [i[2] for i in items])


def test_a_temperature_that_does_not_carry_to_the_other_half_is_not_kept():
    items, answers = synthetic_probe({0: 0.95, 1: 0.52})  # over-confident on one half, under-confident on the other
    folds = [fold(items, answers, half) for half in (0, 1)]
    assert folds[0]["noul"]["temperature"] > 1 > folds[1]["noul"]["temperature"]
    assert kept(folds) == {"noul": False, "choice": False}


def run_result(noul_nll: float = 0.70, noul_ece: float = 0.13, negation: float = 0.75, choice_nll: float = 1.2,
               choice_ece: float = 0.14, auroc: float = 0.52) -> dict:
    """A bench/general method result with one yes/no and one choice task."""
    tasks = [
        {"task": "yes", "type": "noul", "variants": {"plain": {"auroc": auroc}, "negated": {"auroc": 1 - auroc},
                                                     "plain_as_choice": {"auroc": None}},
         "coherence": {"yes_no_vs_choice_agreement": 0.6}, "nll_over_wordings": {"mean": noul_nll}},
        {"task": "pick", "type": "choice", "variants": {"plain": {"accuracy": 0.5}, "plain_described": {"accuracy": 0.6}},
         "coherence": {"bare_vs_described_agreement": 0.7}, "nll_over_wordings": {"mean": choice_nll}},
    ]
    summary = {"noul": {"nll_mean": noul_nll, "ece_mean": noul_ece, "ece_floor_mean": 0.07, "negation_share_within": negation,
                        "yes_no_vs_choice_agreement": 0.6, "auroc_mean": auroc},
               "choice": {"ece_mean": choice_ece, "ece_floor_mean": 0.1, "accuracy_bare": 0.5, "accuracy_described": 0.6}}
    return {"tasks": tasks, "summary": summary}


BOTH = {"noul": 1.8, "choice": 1.3}


def test_the_verdict_ships_each_type_on_its_own_checks():
    shipped = run_result()
    assert judge(shipped, run_result(noul_nll=0.69, noul_ece=0.08, negation=0.8, choice_nll=1.1, choice_ece=0.12), BOTH)["ships"] == \
        {"noul": True, "choice": True}
    assert judge(shipped, run_result(noul_nll=0.71, noul_ece=0.08, negation=0.8, choice_nll=1.1, choice_ece=0.12), BOTH)["ships"] == \
        {"noul": False, "choice": True}
    assert judge(shipped, run_result(noul_nll=0.69, noul_ece=0.08, negation=0.7, choice_nll=1.1, choice_ece=0.15), BOTH)["ships"] == \
        {"noul": False, "choice": False}
    assert judge(shipped, run_result(noul_nll=0.69, noul_ece=0.08, negation=0.8, choice_nll=1.1, choice_ece=0.12),
                 {"noul": 1.8})["ships"] == {"noul": True, "choice": False}


def test_runs_whose_rankings_or_agreements_differ_are_not_judged():
    shipped = run_result()
    moved = judge(shipped, run_result(noul_nll=0.69, noul_ece=0.08, negation=0.8, auroc=0.55), BOTH)
    assert not moved["comparable"] and moved["ships"] == {"noul": False, "choice": False}
    assert moved["moved"] == ["yes/plain auroc: 0.52 vs 0.55", "yes/negated auroc: 0.48 vs 0.44999999999999996"]
    disagreeing = run_result(noul_nll=0.69, noul_ece=0.08, negation=0.8)
    disagreeing["tasks"][1]["coherence"]["bare_vs_described_agreement"] = 0.69
    assert judge(shipped, disagreeing, BOTH)["moved"] == ["pick bare_vs_described_agreement: 0.7 vs 0.69"]
