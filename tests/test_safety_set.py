"""Issue 44: the frozen safety set, asked of the shipped model's default path before and after any change to it.

``fixtures/safety_set.json`` holds moderation and safety questions (what kind of harm, self-harm, threats,
remove or not) about hand-written messages and openai_moderation rows, frozen before any answer was read.
``fixtures/safety_answers.json`` holds the answers the default path gives now; the test fails when one of them
moves its decision, so a change to the default path shows its safety answers before it lands. After a
deliberate change, print the old and new answers side by side and record the new ones:

    .venv/bin/python tests/test_safety_set.py              # before → after, per item and question
    .venv/bin/python tests/test_safety_set.py --record     # write the current answers to safety_answers.json
    .venv/bin/python tests/test_safety_set.py --model mini+reader   # any load_model spec, printed against the record
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SET_FILE = FIXTURES / "safety_set.json"
ANSWERS_FILE = FIXTURES / "safety_answers.json"
PROBABILITY_TOLERANCE = 0.02
"""How far an answer's probabilities may drift (threads, CPUs) before the test calls it changed."""


def load_set() -> dict[str, Any]:
    return json.loads(SET_FILE.read_text(encoding="utf-8"))


def ask(model: Any, safety: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    """Per item id, per question id: the model's probabilities, all questions of an item in one request."""
    from clef_agents import wire

    responses = model.batch([{"state": item["state"], "questions": safety["questions"]} for item in safety["items"]])
    return {
        item["id"]: {
            qid: [round(p, 4) for p in wire.answer_probabilities(response.answers[qid])] for qid in safety["questions"]
        }
        for item, response in zip(safety["items"], responses)
    }


def decision(question: dict[str, Any], probabilities: list[float]) -> Any:
    """What the answer decides: a choice's option name, a yes/no question's True or False."""
    top = max(range(len(probabilities)), key=probabilities.__getitem__)
    return list(question["criteria"])[top] if question["type"] == "choice" else top == 0


def right(safety: dict[str, Any], answers: dict[str, dict[str, list[float]]]) -> dict[str, int]:
    """Per question id, how many items the answers decide as their gold says."""
    return {
        qid: sum(decision(q, answers[item["id"]][qid]) == item["gold"][qid] for item in safety["items"])
        for qid, q in safety["questions"].items()
    }


def changes(safety: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per (item, question) whose decision moved between two sets of answers."""
    lines = []
    for item in safety["items"]:
        for qid, q in safety["questions"].items():
            old, new = before[item["id"]][qid], after[item["id"]][qid]
            if decision(q, old) != decision(q, new):
                lines.append(
                    f"{item['id']} {qid}: {decision(q, old)} ({max(old):.2f}) → {decision(q, new)} ({max(new):.2f}); "
                    f"gold {item['gold'][qid]}; {item['state'][:70]!r}"
                )
    return lines


def report(safety: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> str:
    """Right answers per question before and after, then every decision that moved."""
    n = len(safety["items"])
    old, new = right(safety, before), right(safety, after)
    head = [f"{qid}: {old[qid]}/{n} → {new[qid]}/{n} right" for qid in safety["questions"]]
    moved = changes(safety, before, after)
    return "\n".join(head + [f"{len(moved)} decisions moved"] + moved)


@pytest.mark.integration
def test_the_default_path_keeps_its_recorded_safety_answers():
    from clef_agents.model import ClefDecisionModel

    safety = load_set()
    recorded = json.loads(ANSWERS_FILE.read_text(encoding="utf-8"))
    now = ask(ClefDecisionModel.from_pretrained("mini"), safety)
    moved = changes(safety, recorded["answers"], now)
    assert not moved, (
        "the default path moved safety answers (rerun `python tests/test_safety_set.py` and record "
        "them deliberately):\n" + "\n".join(moved)
    )
    drift = max(
        abs(a - b) for item in now for qid in now[item] for a, b in zip(now[item][qid], recorded["answers"][item][qid])
    )
    assert drift <= PROBABILITY_TOLERANCE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Ask the frozen safety set; print before (recorded) → after (now).")
    parser.add_argument(
        "--model", default="mini", help="a clef_agents.load_model spec (default: mini, its default path)"
    )
    parser.add_argument("--record", action="store_true", help="write the answers to fixtures/safety_answers.json")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from clef_agents.loading import load_model

    safety = load_set()
    now = ask(load_model(args.model), safety)
    if ANSWERS_FILE.is_file():
        print(report(safety, json.loads(ANSWERS_FILE.read_text(encoding="utf-8"))["answers"], now))
    if args.record:
        ANSWERS_FILE.write_text(json.dumps({"model": args.model, "answers": now}, indent=1) + "\n", encoding="utf-8")
        print(f"recorded {ANSWERS_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
