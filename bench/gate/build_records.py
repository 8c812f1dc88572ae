"""Write the tool gate's teaching and policy-choice records (train splits of the trainable safety sets).

    CLEF_AGENTS_DATA=../shared/data python bench/gate/build_records.py --out runs/gate_records

writes ``teach.jsonl`` (taught with ``clef-agents teach --records``) and ``policy.jsonl`` (kept out
of teaching; the lane policy is chosen on it by ``bench/gate/choose_policy.py``). Test splits and
held-out sets are never read (``clef_agents.train.gate_records``).
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from clef_agents.train.gate_records import build_gate_records, write_jsonl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    for part, records in build_gate_records().items():
        path = write_jsonl(records, args.out / f"{part}.jsonl")
        counts = collections.Counter((r["meta"]["dataset"], r["labels"]["needs_approval"]) for r in records)
        print(path, len(records), dict(sorted(counts.items())))


if __name__ == "__main__":
    main()
