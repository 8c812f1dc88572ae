"""Write the tool gate's teaching and policy-choice records (train splits of the trainable safety sets).

    CLEF_AGENTS_DATA=../shared/data python bench/gate/build_records.py --out runs/gate_records

writes ``teach.jsonl`` (taught with ``clef-agents teach --records``), ``policy.jsonl`` (kept out
of teaching; the lane policy is chosen on it and on check sets 1–4 by ``bench/gate/evaluate.py choose``)
and ``blend.jsonl``: check sets 1–3 in the teaching layout, for ``--valid-records`` (the blend is fitted
on them and, with ``--no-refit``, nothing else is). Test splits and held-out sets are never read
(``clef_agents.train.gate_records``).
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from clef_agents.train.gate_calls import call_records, load_calls
from clef_agents.train.gate_records import build_gate_records, write_jsonl

HERE = Path(__file__).resolve().parent
BLEND_SETS = ("everyday_calls.json", "everyday_calls_2.json", "everyday_calls_3.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    parts = build_gate_records()
    parts["blend"] = [r for name in BLEND_SETS for r in call_records(load_calls(HERE / name), source=name, dataset="everyday_checks")]
    for part, records in parts.items():
        path = write_jsonl(records, args.out / f"{part}.jsonl")
        counts = collections.Counter((r["meta"]["dataset"], r["labels"]["needs_approval"]) for r in records)
        print(path, len(records), dict(sorted(counts.items())))


if __name__ == "__main__":
    main()
