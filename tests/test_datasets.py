"""Converters for the shared data sets: every set, every split, legal records, no test leakage."""

from __future__ import annotations

import pytest

from clef_agents.records import validate_records
from clef_agents.train import datasets
from clef_agents.train.datasets import DATASETS, available_splits, load_records, load_rows

try:
    datasets.data_root()
    HAVE_DATA = True
except FileNotFoundError:
    HAVE_DATA = False

needs_data = pytest.mark.skipif(not HAVE_DATA, reason="shared data folder not found (set CLEF_AGENTS_DATA)")

EXPECTED = {
    "banking77",
    "clinc150",
    "hwu64",
    "sms_spam",
    "youtube_spam",
    "hate_offensive",
    "sst5",
    "bfcl_relevance",
    "when2call",
    "rte",
    "mnli_taxinli",
    "snli_esnli",
    "scitail",
    "qnli",
    "boolq",
    "pubmedqa",
    "conjnli",
    "dnc_recast",
    "tracie",
    "copa",
}


def test_every_shared_set_has_a_spec_with_licence_and_paraphrases():
    assert set(DATASETS) == EXPECTED
    for spec in DATASETS.values():
        assert spec.licence and spec.attribution
        assert spec.kind in ("noul", "choice", "score")
        assert len(spec.instructions) >= 3, spec.name


def test_intent_options_have_written_descriptions():
    for name in ("banking77", "clinc150", "hwu64"):
        criteria = DATASETS[name].criteria
        assert all(isinstance(d, str) and len(d.split()) >= 4 for d in criteria.values()), name
    assert DATASETS["banking77"].criteria["card_arrival"].startswith("The customer is asking when their new card")
    assert "none of the other intents applies" in DATASETS["clinc150"].criteria["oos"]
    assert len(DATASETS["clinc150"].criteria) == 151


@needs_data
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_split_converts_to_valid_records(name):
    for split in available_splits(name):
        records = load_records(name, split, limit=40, seed=1)
        assert records, (name, split)
        report = validate_records(records)
        assert report.ok, report.format_errors()
        spec = DATASETS[name]
        for record in records:
            assert record["meta"]["dataset"] == name and record["meta"]["split"] == split
            assert record["meta"]["source"] == "dataset"
            assert list(record["questions"]) == [spec.question_id]
            assert record["questions"][spec.question_id]["type"] == spec.kind


@needs_data
def test_splits_follow_the_files():
    assert available_splits("banking77") == ["train", "valid", "test"]
    assert available_splits("clinc150") == ["train", "valid", "test"]
    assert available_splits("when2call") == ["test"]
    assert available_splits("snli_esnli") == ["valid", "test"]
    assert available_splits("tracie") == ["train", "valid"]
    with pytest.raises(ValueError, match="when2call has no 'train' split; available: test"):
        load_records("when2call", "train")


@needs_data
def test_carved_valid_is_disjoint_stable_and_about_a_tenth():
    train = load_rows("sms_spam", "train")
    valid = load_rows("sms_spam", "valid")
    train_ids = {i for i, _ in train}
    valid_ids = {i for i, _ in valid}
    assert not train_ids & valid_ids
    assert len(train_ids | valid_ids) == len(train) + len(valid)
    assert 0.07 < len(valid) / (len(train) + len(valid)) < 0.13
    assert valid_ids == {i for i, _ in load_rows("sms_spam", "valid")}
    train_texts = {row["text"] for _, row in train}
    assert not train_texts & {row["text"] for _, row in valid}


@needs_data
def test_limit_is_a_seeded_sample():
    first = load_records("banking77", "train", limit=20, seed=3)
    again = load_records("banking77", "train", limit=20, seed=3)
    other = load_records("banking77", "train", limit=20, seed=4)
    assert first == again
    assert [r["meta"]["row"] for r in first] != [r["meta"]["row"] for r in other]
    assert len({r["labels"]["intent"] for r in first}) > 5


@needs_data
def test_labels_map_to_record_types():
    spam = load_records("sms_spam", "test", limit=200)
    assert {r["labels"]["spam"] for r in spam} == {True, False}
    sst = load_records("sst5", "valid", limit=200)
    assert {r["labels"]["sentiment"] for r in sst} <= {0, 1, 2, 3, 4}
    rte = load_records("rte", "valid", limit=5)
    hypothesis = rte[0]["meta"]["slots"]["hypothesis"]
    assert rte[0]["questions"]["holds"]["instructions"] == f'Based only on the text, is this true: "{hypothesis}"?'
    boolq = load_records("boolq", "valid", limit=3)
    assert boolq[0]["questions"]["holds"]["instructions"].startswith('Does the text say yes to this question: "')
    copa = load_records("copa", "valid", limit=3)
    assert set(copa[0]["questions"]["alternative"]["criteria"]) == {"choice1", "choice2"}
    names = {r["labels"]["intent"] for r in load_records("banking77", "test")}
    assert "refund_not_showing_up" in names and "Refund_not_showing_up" not in names


def test_missing_data_root_names_the_paths_tried(monkeypatch, tmp_path):
    monkeypatch.setenv(datasets.DATA_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="CLEF_AGENTS_DATA points to"):
        datasets.data_root()
    monkeypatch.delenv(datasets.DATA_ENV)
    monkeypatch.setattr(datasets, "_root_candidates", lambda: [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'a'}, {tmp_path / 'b'}"):
        datasets.data_root()


@needs_data
def test_cli_convert_writes_valid_records(tmp_path, capsys):
    from clef_agents.cli import main
    from clef_agents.records import read_records

    out = tmp_path / "spam.jsonl"
    assert main(["data", "convert", "sms_spam", "--split", "valid", "--limit", "25", "--out", str(out)]) == 0
    records = read_records(out)
    assert len(records) == 25 and validate_records(records).ok
    assert records == load_records("sms_spam", "valid", limit=25)
    assert main(["data", "convert", "nope", "--split", "train"]) == 2
    assert "unknown data set 'nope'" in capsys.readouterr().err


@needs_data
def test_no_test_text_reaches_train_or_valid():
    # youtube_spam's source files repeat some test comments in train; they must be dropped.
    for name in ("youtube_spam", "sst5", "clinc150", "sms_spam"):
        held_out = datasets.held_out_keys(name)
        assert held_out
        for split in ("train", "valid"):
            assert not {r["state"] for r in load_records(name, split)} & held_out, (name, split)


def test_canonical_questions_are_legal_with_and_without_descriptions():
    from clef_agents import wire

    for name, spec in DATASETS.items():
        if spec.row_criteria is not None:
            with pytest.raises(ValueError, match="different options on every row"):
                datasets.canonical_question(name)
            continue
        slots = {"hypothesis": "It rained", "question": "Did it rain?"}
        for descriptions in (True, False):
            question = datasets.canonical_question(name, descriptions=descriptions, slots=slots)
            typed = wire.validate_questions({spec.question_id: question})[spec.question_id]
            assert typed.type == spec.kind
    bare = datasets.canonical_question("banking77", descriptions=False)
    assert len(bare["criteria"]) == 77 and set(bare["criteria"].values()) == {None}
