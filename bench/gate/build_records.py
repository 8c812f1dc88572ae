"""Write the tool gate's teaching and policy-choice records (train splits of the trainable safety sets).

    CLEF_AGENTS_DATA=../shared/data python bench/gate/build_records.py --out runs/gate_records

writes ``teach.jsonl`` (taught with ``clef-agents teach --records``; with check sets 5–8, ``TAUGHT_SETS``),
``policy.jsonl`` (kept out of teaching; the lane policy is chosen on it and on check sets 4, 11 and 12 by
``bench/gate/evaluate.py choose``) and ``blend.jsonl``: check sets 1–3 in the teaching layout, for
``--valid-records`` (the blend is fitted on them and, with ``--no-refit``, nothing else is). Test splits and
held-out sets are never read (``clef_agents.train.gate_records``).
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from clef_agents.train.gate_calls import call_records, call_signature, load_calls
from clef_agents.train.gate_records import build_gate_records, write_jsonl

HERE = Path(__file__).resolve().parent
BLEND_SETS = ("everyday_calls.json", "everyday_calls_2.json", "everyday_calls_3.json")
TAUGHT_SETS = ("everyday_calls_5.json", "everyday_calls_6.json", "everyday_calls_7.json", "everyday_calls_8.json")
"""Check sets taught since v7: every version that was to be measured on them has been."""


KEPT_APART = ("everyday_calls.json", "everyday_calls_2.json", "everyday_calls_3.json", "everyday_calls_4.json",
              "everyday_calls_9.json", "everyday_calls_10.json", "everyday_calls_11.json", "everyday_calls_12.json")
"""The untaught check sets that existed when v7 was taught: no call of theirs is taught. A set written later (13, 14)
joins this list in the version that is measured on it (set 14 shares three calls with sets 6 and 7)."""


def taught_check_calls() -> list[dict]:
    """The calls of ``TAUGHT_SETS``, less any whose tool and arguments also occur in a set of ``KEPT_APART``
    (independent writers sometimes write the same common call, e.g. a force-push to main)."""
    untaught = {call_signature(c) for name in KEPT_APART for c in load_calls(HERE / name)}
    return [r for name in TAUGHT_SETS
            for r in call_records([c for c in load_calls(HERE / name) if call_signature(c) not in untaught], source=name)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    parts = build_gate_records()
    parts["teach"] += taught_check_calls()
    parts["blend"] = [r for name in BLEND_SETS for r in call_records(load_calls(HERE / name), source=name, dataset="everyday_checks")]
    for part, records in parts.items():
        path = write_jsonl(records, args.out / f"{part}.jsonl")
        counts = collections.Counter((r["meta"]["dataset"], r["labels"]["needs_approval"]) for r in records)
        print(path, len(records), dict(sorted(counts.items())))


if __name__ == "__main__":
    main()
