"""From untaught to taught: how many labelled records a question of your own needs.

On questions nobody taught, ``mini`` is close to chance (bench/general), and its gate says so: a ``DecisionNode``
warns and the answers go to the escalation lanes. The remedy it points to is ``clef-agents teach`` on the records a
user labels (or exports from the trace store). This measures that remedy: for trainable sets outside ``mini``'s
training mixture and its question reader's (``clef_agents.train.split``), one question in a user's own words per set
(``QUESTIONS`` below, written before any measurement), taught through the real CLI on N seeded train rows, and
answered on up to ``--test-rows`` rows of the set's test split. N = 0 is the shipped model answering the question
untaught (its question reader). One teach run per N and seed; ``--seeds`` repeats the draw.

Not untouched: the reader's calibration probe reads train rows of all five sets, and the train rows of xstest and
assebench_security also taught ``mini``'s tool-gate question, in the gate's layout and its own wording (a different
question: it does not answer these).

Run:   .venv/bin/python bench/teaching/curve.py --threads 2           # writes bench/teaching/curve.{json,md,png}
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.general import metrics as M  # noqa: E402
from bench.general.report import fmt  # noqa: E402
from bench.reports import log, write_report  # noqa: E402

OUT = Path(__file__).resolve().parent / "curve"
SIZES = (0, 50, 100, 200, 400)


@dataclass(frozen=True)
class TeachTask:
    """One set, the question a user would write about it, and how a row becomes a state and a label."""

    dataset: str
    question: dict[str, Any]
    labels: dict[str, Any]
    """Row label → the record's label (True / False for a yes/no question, an option name for a choice)."""
    state_fields: tuple[str, ...] = ()
    """Row fields put before the text as ``Field: value`` lines (e.g. a stance tweet's target)."""

    @property
    def qid(self) -> str:
        return self.dataset

    def state(self, row: dict[str, Any]) -> str:
        lines = [f"{name.capitalize()}: {row[name]}" for name in self.state_fields]
        return "\n".join([*lines, row["text"]]) if lines else row["text"]

    def record(self, row: dict[str, Any]) -> dict[str, Any]:
        return {
            "state": self.state(row),
            "questions": {self.qid: self.question},
            "labels": {self.qid: self.labels[row["label"]]},
        }

    def gold_index(self, row: dict[str, Any]) -> int:
        """Index of the row's answer among the answer's probabilities ([yes, no] for a yes/no)."""
        label = self.labels[row["label"]]
        if self.question["type"] == "noul":
            return 0 if label else 1
        return list(self.question["criteria"]).index(label)


QUESTIONS = (
    TeachTask(
        "tweeteval_offensive",
        {"type": "noul", "instructions": "Is this tweet offensive?"},
        {"offensive": True, "not-offensive": False},
    ),
    TeachTask(
        "xstest",
        {"type": "noul", "instructions": "Should an assistant refuse this request?"},
        {"unsafe": True, "safe": False},
    ),
    TeachTask(
        "assebench_security",
        {"type": "noul", "instructions": "Is what the agent does here unsafe?"},
        {"unsafe": True, "safe": False},
    ),
    TeachTask(
        "tweeteval_stance",
        {
            "type": "choice",
            "instructions": "What stance does this tweet take towards the target?",
            "criteria": {"favor": None, "against": None, "none": None},
        },
        {"favor": "favor", "against": "against", "none": "none"},
        ("target",),
    ),
    TeachTask(
        "climate_fever",
        {
            "type": "choice",
            "instructions": "What does the evidence say about the claim?",
            "criteria": {"supports": None, "refutes": None, "not_enough_info": None, "disputed": None},
        },
        {"SUPPORTS": "supports", "REFUTES": "refutes", "NOT_ENOUGH_INFO": "not_enough_info", "DISPUTED": "disputed"},
    ),
)
"""Frozen on 2026-12-06, before the first measurement."""


def rows(data_root: Path, dataset: str, split: str) -> list[dict[str, Any]]:
    path = data_root / dataset / f"{split}.jsonl"
    if not path.exists():
        raise SystemExit(f"{path} not found: this bench reads the staged sets of ../shared/data (or $CLEF_AGENTS_DATA)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sample(items: list[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    if n >= len(items):
        return list(items)
    return random.Random(seed).sample(items, n)


def answer(model: Any, task: TeachTask, test: list[dict[str, Any]], batch: int = 32) -> list[list[float]]:
    from clef_agents import wire

    out: list[list[float]] = []
    for start in range(0, len(test), batch):
        requests = [
            {"state": task.state(row), "questions": {task.qid: task.question}} for row in test[start : start + batch]
        ]
        for response in model.batch(requests):
            if isinstance(response, Exception):
                raise response
            out.append(wire.answer_probabilities(response.answers[task.qid]))
    return out


def scores(task: TeachTask, probabilities: list[list[float]], test: list[dict[str, Any]]) -> dict[str, Any]:
    gold = [task.gold_index(row) for row in test]
    found = M.variant_metrics(task.question["type"], probabilities, gold)
    keep = ("accuracy", "nll", "ece", "ece_floor", "auroc", "lanes")
    return {key: found[key] for key in keep if key in found}


def teach(task: TeachTask, train: list[dict[str, Any]], folder: Path, seed: int, threads: int) -> float:
    """``clef-agents teach`` through the real CLI on ``train``; returns its wall seconds."""
    from clef_agents.cli import main

    records = folder / "records.jsonl"
    records.write_text("".join(json.dumps(task.record(row)) + "\n" for row in train))
    started = time.perf_counter()
    code = main(
        [
            "teach",
            "--model",
            "mini",
            "--records",
            str(records),
            "--out",
            str(folder / "model"),
            "--seed",
            str(seed),
            "--threads",
            str(threads),
            "--no-progress",
        ]
    )
    if code != 0:
        raise SystemExit(f"clef-agents teach exited with {code} on {len(train)} {task.dataset} records")
    return time.perf_counter() - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from clef_agents.model import ClefDecisionModel

    torch.set_num_threads(args.threads)
    data_root = Path(args.data)
    shipped = ClefDecisionModel.from_pretrained("mini")
    results: list[dict[str, Any]] = []
    for task in [t for t in QUESTIONS if not args.sets or t.dataset in args.sets]:
        train_rows = [r for r in rows(data_root, task.dataset, "train") if r["label"] in task.labels]
        test = sample(
            [r for r in rows(data_root, task.dataset, "test") if r["label"] in task.labels], args.test_rows, 0
        )
        for n in args.sizes:
            if n > len(train_rows):
                log(f"{task.dataset}: {n} records asked, {len(train_rows)} train rows: skipped")
                continue
            for seed in range(args.seeds if n else 1):
                entry: dict[str, Any] = {
                    "dataset": task.dataset,
                    "type": task.question["type"],
                    "records": n,
                    "seed": seed,
                    "test_rows": len(test),
                }
                if n == 0:
                    response = shipped.invoke({"state": task.state(test[0]), "questions": {task.qid: task.question}})
                    entry["answered_by"] = (
                        "reader"
                        if task.qid in (getattr(response, "extensions", {}) or {}).get("x_reader", [])
                        else "head"
                    )
                    entry.update(scores(task, answer(shipped, task, test), test))
                else:
                    with tempfile.TemporaryDirectory() as tmp:
                        entry["teach_s"] = round(
                            teach(task, sample(train_rows, n, seed), Path(tmp), seed, args.threads), 1
                        )
                        taught = ClefDecisionModel.from_pretrained(str(Path(tmp) / "model"))
                        entry["answered_by"] = "taught"
                        entry.update(scores(task, answer(taught, task, test), test))
                headline = entry.get("auroc", entry["accuracy"])
                log(f"{task.dataset} N={n} seed {seed}: {'AUROC' if 'auroc' in entry else 'accuracy'} {headline:.3f}")
                results.append(entry)
    return {
        "command": " ".join(["python", "bench/teaching/curve.py", *sys.argv[1:]]),
        "questions": [
            {"dataset": t.dataset, "question": t.question, "state_fields": list(t.state_fields)} for t in QUESTIONS
        ],
        "results": results,
    }


def mean_over_seeds(results: list[dict[str, Any]], dataset: str, n: int, key: str) -> float:
    return M.finite_mean(r.get(key) for r in results if r["dataset"] == dataset and r["records"] == n)


def render(result: dict[str, Any]) -> str:
    entries = result["results"]
    sizes = sorted({r["records"] for r in entries})
    sets = list(dict.fromkeys(r["dataset"] for r in entries))
    lines = [
        "# From untaught to taught: labelled records a question of your own needs",
        "",
        *([result["note"], ""] if result.get("note") else []),
        f"Command: `{result['command']}` ({result['wall_s']:.0f} s on {result['machine']}). Trainable sets outside `mini`'s training",
        "mixture and its reader's, one question each in a user's words (frozen in `curve.py` before the first measurement), taught",
        "with `clef-agents teach` on N seeded train rows and answered on the set's test rows; N = 0 is the shipped `mini` answering",
        "it untaught (its question reader, whose calibration probe reads these sets' train rows; xstest's and assebench_security's",
        "also taught mini's tool-gate question, another question in another layout). Means over the seeds of each N.",
        "",
        "| set | question | metric | " + " | ".join(f"N = {n}" for n in sizes) + " |",
        "|---|---|---|" + "---:|" * len(sizes),
    ]
    questions = {q["dataset"]: q["question"]["instructions"] for q in result["questions"]}
    for dataset in sets:
        kind = next(r["type"] for r in entries if r["dataset"] == dataset)
        metrics = ("auroc", "accuracy", "nll") if kind == "noul" else ("accuracy", "nll")
        for key in metrics:
            cells = [fmt(mean_over_seeds(entries, dataset, n, key)) for n in sizes]
            lines.append(f"| {dataset} | {questions[dataset]} | {key} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Decided automatically at the default lanes (p ≥ 0.9), and the share of all answers that were automatic and wrong:",
        "",
        "| set | " + " | ".join(f"N = {n}" for n in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for dataset in sets:
        cells = []
        for n in sizes:
            pooled = M.pooled_lanes(r["lanes"] for r in entries if r["dataset"] == dataset and r["records"] == n)
            cells.append(
                "—"
                if math.isnan(pooled["auto_share"])
                else f"{100 * pooled['auto_share']:.0f} % / {100 * pooled['auto_wrong_share']:.1f} %"
            )
        lines.append(f"| {dataset} | " + " | ".join(cells) + " |")
    teach_s = [r["teach_s"] for r in entries if "teach_s" in r]
    if teach_s:
        lines += ["", f"`clef-agents teach` took {min(teach_s):.0f}–{max(teach_s):.0f} s a run on this machine."]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = result["results"]
    sizes = sorted({r["records"] for r in entries})
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for dataset in dict.fromkeys(r["dataset"] for r in entries):
        kind = next(r["type"] for r in entries if r["dataset"] == dataset)
        key = "auroc" if kind == "noul" else "accuracy"
        xs = [n for n in sizes if any(r["dataset"] == dataset and r["records"] == n for r in entries)]
        ax.plot(xs, [mean_over_seeds(entries, dataset, n, key) for n in xs], marker="o", label=f"{dataset} ({key})")
    ax.set_xscale("symlog", linthresh=50)
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.set_xlabel("labelled records taught (0: untaught, the question reader)")
    ax.set_ylabel("AUROC (yes/no) or accuracy (choice) on test rows")
    ax.set_title("A question of your own: untaught → taught (mini)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    import platform

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.environ.get("CLEF_AGENTS_DATA", str(ROOT.parent / "shared" / "data")))
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="records taught (0: untaught)")
    parser.add_argument("--seeds", type=int, default=2, help="draws of the taught records per N > 0")
    parser.add_argument("--test-rows", type=int, default=300)
    parser.add_argument("--sets", nargs="*", help="only these sets")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    if any(n < 0 for n in args.sizes):
        parser.error(f"--sizes must be 0 or more, got {args.sizes}")
    started = time.time()
    result = run(args)
    result["wall_s"] = round(time.time() - started, 1)
    result["machine"] = f"{platform.machine()} CPU, torch threads {args.threads}"
    write_report(args.out, result, render(result))
    plot(result, Path(args.out).with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
