"""How well question readers answer what they were taught: validation rows of their own training sets.

A diagnostic beside the probe (untaught sets, which chooses) and bench/general (untaught tasks, which
measures): if a reader is weak here too, it has not learnt its own recipe yet and more training is the
cheap lever; if it is strong here and weak there, it has learnt the recipe without learning to read.
Never used to choose a checkpoint.

Run:   OMP_NUM_THREADS=1 CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/reader/validation.py \\
           --readers clef_agents/checkpoints/mini runs/reader_p3/step3000 --names shipped p3
Writes bench/reader/validation.json and bench/reader/validation.md (uncalibrated logits: AUROC and accuracy
do not depend on calibration).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from clef_agents.train.metrics import auroc
from clef_agents.train.reader import typed_items
from clef_agents.train.reader_data import reader_left_out_sets, reader_records

HERE = Path(__file__).resolve().parent


def per_set_scores(reader: Any, records: list[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    """Yes/no AUROC and choice accuracy per (set, type) of one reader's uncalibrated answers."""
    items = typed_items(records)
    logits = reader.logits([(s, q) for s, q, _ in items])
    groups: dict[str, list[tuple[Any, int, str]]] = defaultdict(list)
    for record, (_, question, gold), z in zip(records, items, logits):
        groups[record["meta"]["dataset"]].append((z, gold, question.type))
    out: dict[str, dict[str, float | int]] = {}
    for name, rows in sorted(groups.items()):
        nouls = [(float(z[0]), 1 if g == 0 else 0) for z, g, t in rows if t == "noul"]
        choices = [int(z.argmax()) == g for z, g, t in rows if t != "noul"]
        entry: dict[str, float | int] = {"nouls": len(nouls), "choices": len(choices)}
        if len({y for _, y in nouls}) == 2:
            entry["noul_auroc"] = round(auroc([s for s, _ in nouls], [y for _, y in nouls]), 4)
        if choices:
            entry["choice_accuracy"] = round(sum(choices) / len(choices), 4)
        out[name] = entry
    return out


def render(results: dict[str, Any]) -> str:
    names = list(results["readers"])
    sets = sorted({s for r in results["readers"].values() for s in r["sets"]})
    lines = ["# Question readers on validation rows of their own training sets (a diagnostic)", "",
             (f"Command: `{results['command']}`; {results['records']} records ({results['per_set']} rows a set, seed {results['seed']}, "
              f"recipe {results['data_version']}), {results['seconds']} s. Uncalibrated answers; never used to choose."), "",
             "| set | " + " | ".join(f"{n} yes/no AUROC | {n} choice acc." for n in names) + " |",
             "|---|" + ("---:|---:|" * len(names))]
    for s in sets:
        cells = []
        for n in names:
            e = results["readers"][n]["sets"].get(s, {})
            cells += [f"{e['noul_auroc']:.3f}" if "noul_auroc" in e else "–", f"{e['choice_accuracy']:.3f}" if "choice_accuracy" in e else "–"]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    cells = []
    for n in names:
        m = results["readers"][n]["mean"]
        cells += [f"**{m['noul_auroc']:.3f}**", f"**{m['choice_accuracy']:.3f}**"]
    lines.append("| mean over sets | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readers", nargs="+", required=True, help="reader folders (a checkpoint with reader.json, or a train-reader step)")
    parser.add_argument("--names", nargs="*", default=None, help="a short name per reader (default: the folder names)")
    parser.add_argument("--per-set", type=int, default=40, help="validation rows drawn per set (default 40)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the draw (default 7)")
    parser.add_argument("--data-version", type=int, default=3, choices=[1, 2, 3], help="recipe of the draw (default 3: with the written questions)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--out", default=str(HERE / "validation"), help="output stem (default bench/reader/validation)")
    args = parser.parse_args(argv)
    names = args.names or [Path(r).name for r in args.readers]
    if len(names) != len(args.readers):
        parser.error(f"--names gives {len(names)} names for {len(args.readers)} readers")
    import torch

    from clef_agents.model.reader import QuestionReader

    torch.set_num_threads(args.threads)
    started = time.time()
    records = reader_records("valid", per_set=args.per_set, seed=args.seed, exclude=reader_left_out_sets(), version=args.data_version)
    readers: dict[str, Any] = {}
    for name, folder in zip(names, args.readers):
        sets = per_set_scores(QuestionReader.load(folder), records)
        readers[name] = {"folder": folder, "sets": sets,
                         "mean": {"noul_auroc": _mean([e["noul_auroc"] for e in sets.values() if "noul_auroc" in e]),
                                  "choice_accuracy": _mean([e["choice_accuracy"] for e in sets.values() if "choice_accuracy" in e])}}
        print(name, readers[name]["mean"], flush=True)
    results = {"command": "python bench/reader/validation.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "records": len(records), "per_set": args.per_set, "seed": args.seed, "data_version": args.data_version,
               "seconds": round(time.time() - started, 1), "readers": readers}
    Path(args.out + ".json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    Path(args.out + ".md").write_text(render(results), encoding="utf-8")
    print(f"wrote {args.out}.json and {args.out}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
