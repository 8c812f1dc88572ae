"""bench/reader/ensembles.py: the knobs' questions, their averaging and the parts they are judged on (a scripted
reader; no model is read)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.reader.ensembles import parts, read, reversed_choice
from clef_agents import wire

CHOICE = wire.Choice(instructions="Which team?", criteria={"billing": "Charges.", "tech": None, "sales": "Quotes."})
NOUL = wire.Noul(instructions="Is this urgent?")


class ScriptedReader:
    """Scores the first-listed option 2 higher than the rest (a position bias) and gives a noul the margin 1; a
    ``yes`` / ``no`` choice scores yes 3, no 0."""

    def logits(self, items):
        out = []
        for _, question in items:
            if isinstance(question, wire.Noul):
                out.append(torch.tensor([1.0]))
            elif list(question.criteria) in (["yes", "no"], ["no", "yes"]):
                out.append(torch.tensor([3.0 if name == "yes" else 0.0 for name in question.criteria]))
            else:
                out.append(torch.tensor([2.0] + [0.0] * (len(question.criteria) - 1)))
        return out


def test_the_knobs_ask_the_same_question_another_way():
    assert list(reversed_choice(CHOICE).criteria.items()) == [("sales", "Quotes."), ("tech", None), ("billing", "Charges.")]
    asked = wire.yes_no_choice(NOUL)
    assert asked.instructions == NOUL.instructions and list(asked.criteria) == ["yes", "no"]


def test_option_order_averages_away_a_position_bias_and_both_forms_average_the_log_odds():
    items = [("s", CHOICE, 1, {"dataset": "d", "form": "f"}), ("s", NOUL, 0, {"dataset": "e", "form": "f"})]
    scores = read(ScriptedReader(), items)
    single, knob = scores["single"][0], scores["knob"][0]
    assert max(range(3), key=single.__getitem__) == 0  # one reading: the first-listed option wins
    assert knob[0] == pytest.approx(knob[2]) and knob[0] > knob[1]  # both ends of the list get the bias once
    assert math.fsum(math.exp(v) for v in single) == pytest.approx(1.0)
    assert scores["single"][1] == [1.0] and scores["knob"][1] == pytest.approx([(1.0 + 3.0) / 2])


def test_the_parts_are_means_over_sets_with_enough_items():
    items, scores = [], []
    for n in range(40):  # set "a": choices, right half the time; set "b": nouls ranked perfectly
        items.append(("s", CHOICE, n % 2, {"dataset": "a", "form": "own"}))
        scores.append([1.0, 0.0, -1.0])
        items.append(("s", NOUL, n % 2, {"dataset": "b", "form": "own_negated" if n < 20 else "own"}))
        scores.append([1.0 if n % 2 == 0 else -1.0])
    items.append(("s", CHOICE, 0, {"dataset": "tiny", "form": "own"}))
    scores.append([0.0, 1.0, 0.0])
    got = parts(items, scores, list(range(len(items))))
    assert got["choice accuracy"] == pytest.approx(0.5) and set(got["choice sets"]) == {"a"}
    assert got["yes/no AUROC"] == pytest.approx(1.0) and got["negated AUROC"] == pytest.approx(1.0)
