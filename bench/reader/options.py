"""How the question reader's choice accuracy falls with the number of options (validation rows of its own
training sets), the measurement behind ``ReaderConfig.max_options``.

For clinc150 and hwu64 (validation splits, 150 rows each, seed 1), each row is asked as a choice among k
options (the gold intent and k-1 others drawn at random, shuffled), with bare names and with descriptions,
under one fixed instruction. Only the reader answers (no head, no taught weights).

Run:   OMP_NUM_THREADS=1 .venv/bin/python bench/reader/options.py --reader runs/reader/final
Writes bench/reader/options.json and bench/reader/options.md.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

HERE = Path(__file__).resolve().parent
SETS = ("clinc150", "hwu64")
SIZES = (2, 5, 10, 20, 40, None)
INSTRUCTION = "Which of these best describes the request?"


def measure(reader_folder: str, rows: int, seed: int) -> dict:
    """Accuracy per (set, number of options, bare or described)."""
    import torch

    from clef_agents import wire
    from clef_agents.model.reader import QuestionReader
    from clef_agents.train import datasets

    torch.set_num_threads(1)
    reader = QuestionReader.load(reader_folder)
    rng = random.Random(seed)
    out: dict = {}
    for name in SETS:
        question = datasets.canonical_question(name)
        names = list(question["criteria"])
        records = datasets.load_records(name, "valid", limit=rows, seed=seed)
        for size in SIZES:
            k = len(names) if size is None else size
            items, gold = [], []
            for record in records:
                (label,) = record["labels"].values()
                options = [*rng.sample([n for n in names if n != label], k - 1), label]
                rng.shuffle(options)
                for described in (False, True):
                    criteria = {n: (question["criteria"][n] if described else None) for n in options}
                    items.append((record["state"], wire.Choice(instructions=INSTRUCTION, criteria=criteria)))
                    gold.append((options.index(label), described))
            probabilities = reader.predict(items)
            for described in (False, True):
                hits = [max(range(len(p)), key=p.__getitem__) == g for p, (g, d) in zip(probabilities, gold) if d == described]
                out.setdefault(name, {}).setdefault(str(k), {})["described" if described else "bare"] = sum(hits) / len(hits)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reader", required=True, help="a reader folder (train-reader's OUT/final) or a checkpoint with one")
    parser.add_argument("--rows", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    accuracy = measure(args.reader, args.rows, args.seed)
    result = {"command": " ".join([".venv/bin/python bench/reader/options.py", *(argv if argv is not None else sys.argv[1:])]),
              "reader": args.reader, "rows": args.rows, "seed": args.seed, "accuracy": accuracy,
              "wall_s": round(time.perf_counter() - started, 1)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "options.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# Question reader: choice accuracy by number of options (validation rows)", "",
             f"Command: `{result['command']}` ({result['wall_s']:.0f} s). Reader: `{args.reader}`.", "",
             "| set | options | bare names | with descriptions |", "|---|---:|---:|---:|"]
    for name, by_size in accuracy.items():
        for size, cell in by_size.items():
            lines.append(f"| {name} | {size} | {100 * cell['bare']:.1f}% | {100 * cell['described']:.1f}% |")
    (args.out / "options.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
