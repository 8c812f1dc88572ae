"""The written reading questions: file checks, the train/valid split and the records the reader learns from."""

from __future__ import annotations

import json

import pytest

from clef_agents import wire
from clef_agents.train.reader import typed_items
from clef_agents.train.reader_questions import (
    SOURCE,
    item_split,
    load_written,
    written_files,
    written_records,
)


def write(folder, name, items, family="tests"):
    path = folder / name
    path.write_text(json.dumps({"written_by": "a test", "family": family, "items": items}), encoding="utf-8")
    return path


def item(item_id, **overrides):
    base = {
        "id": item_id,
        "state": "Order 7 will be delivered on Monday. It has not shipped yet.",
        "questions": [
            {"type": "noul", "question": "Has order 7 shipped?", "answer": False},
            {"type": "noul", "question": "Is delivery expected on Monday?", "answer": True},
            {
                "type": "choice",
                "question": "What is the order's status?",
                "options": {"delivered": None, "waiting to ship": "not yet handed to the carrier", "cancelled": None},
                "answer": "waiting to ship",
            },
        ],
    }
    return {**base, **overrides}


def test_items_load_with_their_questions_and_every_answer_kept(tmp_path):
    (loaded,) = load_written(write(tmp_path, "a.json", [item("t1")]))
    assert (loaded.id, loaded.family, [q.type for q in loaded.questions]) == ("t1", "tests", ["noul", "noul", "choice"])
    assert [q.answer for q in loaded.questions] == [False, True, "waiting to ship"]
    assert loaded.questions[2].options == {
        "delivered": None,
        "waiting to ship": "not yet handed to the carrier",
        "cancelled": None,
    }


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"questions": [{"type": "noul", "question": "Shipped?", "answer": "no"}]}, "must be true or false"),
        (
            {
                "questions": [
                    {"type": "choice", "question": "Status?", "options": {"a": None, "b": None}, "answer": "c"}
                ]
            },
            "not one of the options",
        ),
        (
            {"questions": [{"type": "choice", "question": "Status?", "options": {"a": None}, "answer": "a"}]},
            "at least two names",
        ),
        ({"questions": [{"type": "score", "question": "How late?", "answer": 2}]}, "'type' must be 'noul' or 'choice'"),
        ({"questions": [{"type": "noul", "question": " ", "answer": True}]}, "non-empty string"),
        ({"state": ""}, "'state' must be a non-empty string"),
        ({"questions": []}, "non-empty list"),
    ],
)
def test_a_bad_item_is_refused_with_the_file_the_item_and_the_field(tmp_path, bad, message):
    with pytest.raises(ValueError, match=message) as caught:
        load_written(write(tmp_path, "bad.json", [item("t1", **bad)]))
    assert str(caught.value).startswith("bad.json item 0")


def test_duplicate_ids_and_broken_json_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unique"):
        load_written(write(tmp_path, "dup.json", [item("t1"), item("t1")]))
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_written(broken)


def test_the_split_is_a_fixed_tenth_and_records_are_valid_one_question_records(tmp_path):
    ids = [f"t{n:03d}" for n in range(200)]
    write(tmp_path, "a.json", [item(i) for i in ids])
    valid_ids = {i for i in ids if item_split(i) == "valid"}
    assert 8 <= len(valid_ids) <= 35 and all(item_split(i) == "valid" for i in valid_ids)
    train, valid = written_records("train", tmp_path), written_records("valid", tmp_path)
    assert len(train) + len(valid) == 3 * len(ids) and len(valid) == 3 * len(valid_ids)
    assert {r["meta"]["item"] for r in valid} == valid_ids and all(r["meta"]["dataset"] == SOURCE for r in train)
    _, questions, gold = zip(*typed_items(train[:3]))
    assert isinstance(questions[0], wire.Noul) and isinstance(questions[2], wire.Choice)
    assert list(gold) == [1, 0, 1]
    with pytest.raises(ValueError, match="'train' and 'valid'"):
        written_records("test", tmp_path)


def test_every_shipped_file_loads_and_keeps_to_the_brief():
    files = written_files()
    assert files, "clef_agents/train/reader_questions/ holds no question files"
    for path in files:
        items = load_written(path)
        assert len(items) >= 40, path.name
        for it in items:
            answers = [q.answer for q in it.questions if q.type == "noul"]
            assert len(answers) == 4 and sum(answers) == 2, (path.name, it.id)
            assert sum(q.type == "choice" for q in it.questions) == 1, (path.name, it.id)
    records = written_records("train") + written_records("valid")
    assert len(typed_items(records)) == len(records)
