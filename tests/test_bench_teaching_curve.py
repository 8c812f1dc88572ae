"""bench/teaching/curve.py: records in the teach format, gold indices, and the report from a result."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.teaching.curve import QUESTIONS, TeachTask, render  # noqa: E402
from clef_agents import wire  # noqa: E402
from clef_agents.train.split import HELD_OUT  # noqa: E402


def test_records_are_valid_decision_records_with_the_frozen_question() -> None:
    stance = next(t for t in QUESTIONS if t.dataset == "tweeteval_stance")
    row = {"text": "Life begins at conception #SemST", "label": "against", "target": "legalization of abortion"}
    record = stance.record(row)
    assert record["state"] == "Target: legalization of abortion\nLife begins at conception #SemST"
    assert record["labels"] == {"tweeteval_stance": "against"}
    wire.validate_questions(record["questions"])
    assert stance.gold_index(row) == 1  # favor, against, none


def test_a_yes_no_question_puts_yes_first() -> None:
    task = TeachTask("x", {"type": "noul", "instructions": "Offensive?"}, {"offensive": True, "fine": False})
    assert task.gold_index({"text": "t", "label": "offensive"}) == 0
    assert task.gold_index({"text": "t", "label": "fine"}) == 1
    assert task.record({"text": "t", "label": "fine"})["labels"] == {"x": False}


def test_no_curve_set_is_a_held_out_set() -> None:
    assert not {t.dataset for t in QUESTIONS} & set(HELD_OUT)


def test_the_report_has_one_row_per_set_and_metric_and_the_lane_table() -> None:
    lanes = {"n": 4, "auto": 2, "auto_wrong": 1, "llm": 2, "human": 0, "confidence_auroc": 0.5}
    result = {
        "command": "test",
        "wall_s": 1.0,
        "machine": "test",
        "questions": [
            {"dataset": "xstest", "question": {"type": "noul", "instructions": "Refuse?"}, "state_fields": []}
        ],
        "results": [
            {
                "dataset": "xstest",
                "type": "noul",
                "records": 0,
                "seed": 0,
                "auroc": 0.5,
                "accuracy": 0.5,
                "nll": 0.69,
                "lanes": lanes,
            },
            {
                "dataset": "xstest",
                "type": "noul",
                "records": 50,
                "seed": 0,
                "auroc": 0.7,
                "accuracy": 0.6,
                "nll": 0.9,
                "lanes": lanes,
                "teach_s": 8.0,
            },
            {
                "dataset": "xstest",
                "type": "noul",
                "records": 50,
                "seed": 1,
                "auroc": 0.9,
                "accuracy": 0.8,
                "nll": 0.5,
                "lanes": lanes,
                "teach_s": 9.0,
            },
        ],
    }
    page = render(result)
    assert "| xstest | Refuse? | auroc | 0.500 | 0.800 |" in page  # N = 50: the mean of its two seeds
    assert "| xstest | 50 % / 25.0 % | 50 % / 25.0 % |" in page
    assert "took 8–9 s a run" in page
