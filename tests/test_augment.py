"""Schema augmentation: every rewrite keeps records valid and labels attached to their options."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from clef_agents.records import validate_records
from clef_agents.train import datasets
from clef_agents.train.augment import (
    AugmentConfig,
    augment_record,
    copy_record,
    expand_with_derived_nouls,
    renamed_option,
)
from clef_agents.train.datasets import DATASETS, available_splits, load_records

try:
    datasets.data_root()
    HAVE_DATA = True
except FileNotFoundError:
    HAVE_DATA = False

needs_data = pytest.mark.skipif(not HAVE_DATA, reason="shared data folder not found (set CLEF_AGENTS_DATA)")

EVERYTHING = AugmentConfig(
    shuffle_options=0.9,
    shuffle_questions=0.9,
    option_subset=0.6,
    question_subset=0.5,
    paraphrase=0.7,
    rename_options=0.5,
    description_dropout=0.3,
    derived_nouls=0.6,
    max_derived_nouls=3,
)


def _intent_record():
    return {
        "state": "my card still has not arrived",
        "questions": {
            "intent": {
                "type": "choice",
                "instructions": "Which request is this? Choose other_topic if none fits.",
                "criteria": {
                    "card_arrival": "The customer waits for a new card.",
                    "lost_card": "The card was lost.",
                    "refund": "The customer wants money back.",
                    "other_topic": "None of the others.",
                },
            },
            "urgent": {
                "type": "noul",
                "instructions": "Is it urgent?",
                "criteria": {"true": "Now.", "false": "Later."},
            },
        },
        "labels": {"intent": "card_arrival", "urgent": False},
        "meta": {"dataset": "hand", "split": "train", "source": "hand"},
    }


def _true_description(record, qid="intent"):
    question = record["questions"][qid]
    return question["criteria"][record["labels"][qid]]


def test_label_follows_its_option_through_every_rewrite():
    original = _intent_record()
    for seed in range(300):
        out = augment_record(original, random.Random(seed), EVERYTHING)
        assert validate_records([out]).ok, (seed, validate_records([out]).format_errors())
        if "intent" in out["questions"] and "rename:intent" not in " ".join(out["meta"]["augment"]):
            description = _true_description(out)
            assert description in (None, "The customer waits for a new card.")
            assert out["labels"]["intent"] == "card_arrival"
    assert original == _intent_record()


def test_renaming_keeps_descriptions_and_moves_the_label():
    config = AugmentConfig(0, 0, 0, 0, 0, rename_options=1.0, description_dropout=0.0, derived_nouls=0.0)
    styles = Counter()
    for seed in range(60):
        out = augment_record(_intent_record(), random.Random(seed), config)
        style = out["meta"]["augment"][-1].rsplit(":", 1)[-1]
        styles[style] += 1
        assert _true_description(out) == "The customer waits for a new card."
        assert "other_topic" not in out["questions"]["intent"]["instructions"]
    assert set(styles) == {"title", "kebab", "numbered", "upper"}
    assert renamed_option("card_arrival", "title") == "Card arrival"
    assert renamed_option("card_arrival", "kebab") == "card-arrival"
    assert renamed_option("card_arrival", "numbered", 17) == "option_17"


def test_option_subsets_keep_the_true_option_and_vary_in_size():
    config = AugmentConfig(
        0,
        0,
        option_subset=1.0,
        question_subset=0,
        paraphrase=0,
        rename_options=0,
        description_dropout=0,
        derived_nouls=0,
    )
    sizes = Counter()
    for seed in range(200):
        out = augment_record(_intent_record(), random.Random(seed), config)
        criteria = out["questions"]["intent"]["criteria"]
        assert "card_arrival" in criteria and len(criteria) >= 2
        sizes[len(criteria)] += 1
    assert set(sizes) == {2, 3, 4}


def test_shuffles_change_order_but_not_content():
    config = AugmentConfig(
        shuffle_options=1.0,
        shuffle_questions=1.0,
        option_subset=0,
        question_subset=0,
        paraphrase=0,
        rename_options=0,
        description_dropout=0,
        derived_nouls=0,
    )
    orders, question_orders = set(), set()
    for seed in range(40):
        out = augment_record(_intent_record(), random.Random(seed), config)
        assert out["questions"]["intent"]["criteria"] == _intent_record()["questions"]["intent"]["criteria"]
        orders.add(tuple(out["questions"]["intent"]["criteria"]))
        question_orders.add(tuple(out["questions"]))
        assert list(out["labels"]) == list(out["questions"])
    assert len(orders) > 10 and len(question_orders) == 2


def test_question_subset_keeps_at_least_one_question_with_its_label():
    config = AugmentConfig(
        0, 0, 0, question_subset=1.0, paraphrase=0, rename_options=0, description_dropout=0, derived_nouls=0
    )
    kept = Counter()
    for seed in range(100):
        out = augment_record(_intent_record(), random.Random(seed), config)
        assert out["questions"] and set(out["labels"]) == set(out["questions"])
        kept[len(out["questions"])] += 1
    assert set(kept) == {1, 2}


def test_derived_nouls_are_balanced_and_truthful():
    labels = Counter()
    for seed in range(400):
        out = expand_with_derived_nouls(_intent_record(), random.Random(seed), 1)
        assert validate_records([out]).ok
        derived = [qid for qid in out["questions"] if qid.startswith("check_")]
        assert len(derived) == 1
        instruction = out["questions"][derived[0]]["instructions"]
        is_true = out["labels"][derived[0]]
        assert ("waits for a new card" in instruction) == is_true
        labels[is_true] += 1
    assert 0.4 < labels[True] / 400 < 0.6


def test_derived_nouls_ask_each_option_once_and_at_most_one_is_true():
    for seed in range(100):
        out = expand_with_derived_nouls(_intent_record(), random.Random(seed), 3)
        derived = [qid for qid in out["questions"] if qid.startswith("check_")]
        assert len(derived) == 3
        assert sum(out["labels"][qid] for qid in derived) <= 1
        assert len({out["questions"][qid]["instructions"] for qid in derived}) == 3


def test_records_without_choice_pass_through_derivation_unchanged():
    record = {"state": "x", "questions": {"spam": {"type": "noul", "instructions": "Spam?"}}, "labels": {"spam": True}}
    assert expand_with_derived_nouls(record, random.Random(0), 2) == copy_record(record)


@needs_data
@pytest.mark.parametrize("name", sorted(DATASETS))
def test_augmented_records_of_every_dataset_validate(name):
    records = load_records(name, available_splits(name)[0], limit=30, seed=2)
    rng = random.Random(name)
    out = [augment_record(rng.choice(records), rng, EVERYTHING) for _ in range(300)]
    report = validate_records(out)
    assert report.ok, report.format_errors()
    paraphrased = sum("paraphrase" in " ".join(r["meta"].get("augment", [])) for r in out)
    assert paraphrased > 100
    instructions = {q["instructions"] for r in out for q in r["questions"].values()}
    assert len(instructions) > 3


@needs_data
def test_clinc_subsets_keep_oos_and_instructions_follow_renames():
    records = load_records("clinc150", "train", limit=20, seed=5)
    config = AugmentConfig(
        0,
        0,
        option_subset=1.0,
        question_subset=0,
        paraphrase=0,
        rename_options=1.0,
        description_dropout=0,
        derived_nouls=0,
    )
    for seed, record in enumerate(records * 5):
        out = augment_record(record, random.Random(seed), config)
        criteria = out["questions"]["intent"]["criteria"]
        oos_name = next(n for n, d in criteria.items() if d == DATASETS["clinc150"].criteria["oos"])
        assert f"Choose {oos_name} if none" in out["questions"]["intent"]["instructions"]


@needs_data
def test_copa_never_loses_its_option_texts():
    records = load_records("copa", "valid", limit=20)
    for seed, record in enumerate(records * 10):
        out = augment_record(record, random.Random(seed), EVERYTHING)
        if "alternative" in out["questions"]:
            criteria = out["questions"]["alternative"]["criteria"]
            assert set(criteria) == {"choice1", "choice2"} and all(criteria.values())
