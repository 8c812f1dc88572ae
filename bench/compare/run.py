"""Issue 6: the decision model vs what a user would pick instead, in one run on the same requests.

Contenders: the clef_agents model ("mini" when shipped, else an UNTRAINED head on MiniLM, marked
as such), (a) SmolLM2-135M-Instruct writing JSON, (b) one MiniLM pass per option, (c)
sparrow-decider, (d) MiniLM embedding routing, (e) MiniLM embeddings + logistic regression.
Sets: seeded samples of the test splits of banking77, clinc150, sms_spam, sst5, bfcl_relevance.

Run:   make bench-setup && .venv/bin/python bench/compare/run.py
Writes bench/compare/results/{results.json,scaling.png,accuracy.png} and docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.baselines.data import BENCH_DATASETS, sample_items  # noqa: E402
from bench.compare.harness import compare, scaling  # noqa: E402
from bench.reports import log  # noqa: E402
from clef_agents.train.datasets import load_records  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
HEAVY = {"smollm_json", "per_option"}
"""Methods that answer only the shared subset (their cost per request is seconds)."""


def build_methods(args: argparse.Namespace) -> tuple[list[Any], Any, dict[str, Any]]:
    from bench.baselines.methods import (
        BareBackboneMethod,
        DecisionModelMethod,
        EmbeddingRouteMethod,
        LogRegMethod,
        PerOptionMethod,
        SparrowMethod,
    )
    from bench.baselines.minilm import MiniLM
    from bench.baselines.smollm import SmolLMJsonMethod
    from clef_agents.model import ClefDecisionModel

    description = args.model or "mini"
    minilm = MiniLM.load()
    methods = [DecisionModelMethod(ClefDecisionModel.from_pretrained(description), title="clef_agents (mini)")]
    if "smollm_json" not in args.skip:
        methods.append(SmolLMJsonMethod.load())
    methods += [
        PerOptionMethod(minilm),
        SparrowMethod(),
        EmbeddingRouteMethod(minilm),
        LogRegMethod(minilm, train_limit=args.train_limit),
    ]
    methods = [m for m in methods if m.key not in args.skip]
    return methods, BareBackboneMethod(minilm), {"description": description}


# --------------------------------------------------------------------------- scaling sweeps


def option_pool() -> dict[str, Any]:
    """255 real option descriptions (banking77 + clinc150 intents, then numbered fillers)."""
    pool: dict[str, Any] = {}
    for name in ("banking77", "clinc150"):
        pool.update(load_records(name, "test")[0]["questions"]["intent"]["criteria"])
    for i in range(len(pool), 255):
        pool[f"other_{i}"] = f"Another request, number {i}, that fits none of the above."
    return dict(list(pool.items())[:255])


def long_text(words: int) -> str:
    texts = [r["state"] for r in load_records("banking77", "test")[:400]]
    pool = " ".join(texts).split()
    return " ".join(pool[:words])


def build_sweeps(quick: bool = False) -> dict[str, list[tuple[int, dict[str, Any]]]]:
    pool = option_pool()
    names = list(pool)

    def choice(n: int, tag: str = "") -> dict[str, Any]:
        return {
            "type": "choice",
            "instructions": f"Which request is the customer making?{tag}",
            "criteria": {k: pool[k] for k in names[:n]},
        }

    state = long_text(48)
    questions = [1, 2, 4, 8] if quick else [1, 2, 4, 8, 16]
    options = [2, 8, 32] if quick else [2, 8, 32, 77, 151, 255]
    lengths = [16, 64] if quick else [16, 64, 128, 256, 512]
    return {
        "questions": [
            (q, {"state": state, "questions": {f"q{i}": choice(10, f" (aspect {i})") for i in range(q)}})
            for q in questions
        ],
        "options": [(n, {"state": state, "questions": {"intent": choice(n)}}) for n in options],
        "state_words": [(w, {"state": long_text(w), "questions": {"intent": choice(10)}}) for w in lengths],
    }


# --------------------------------------------------------------------------- plots


def plot_scaling(result: dict[str, Any], titles: dict[str, str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {
        "questions": "number of questions",
        "options": "number of options (one choice)",
        "state_words": "state length (words)",
    }
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for ax, (sweep, by_method) in zip(axes, result.items()):
        for key, points in by_method.items():
            xs = [p["x"] for p in points if not p["skipped"]]
            ys = [p["median_ms"] for p in points if not p["skipped"]]
            ax.plot(xs, ys, marker="o", label=titles.get(key, key), linestyle="--" if key == "bare_backbone" else "-")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(labels[sweep])
        ax.set_ylabel("median latency per request (ms)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Cost growth, CPU (bench/compare/run.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_accuracy(result: dict[str, Any], titles: dict[str, str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(result["per_dataset"])
    keys = list(result["methods"])
    fig, ax = plt.subplots(figsize=(12, 4.5))
    width = 0.8 / len(keys)
    for j, key in enumerate(keys):
        values = [result["per_dataset"][d]["methods"][key]["shared"]["accuracy"] for d in datasets]
        ax.bar([i + j * width for i in range(len(datasets))], values, width, label=titles.get(key, key))
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(datasets))], datasets)
    ax.set_ylabel("accuracy (shared subset)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="sampled test requests per set (fast methods)")
    parser.add_argument(
        "--n-shared", type=int, default=25, help="subset per set that every method answers, (a) and (b) included"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--datasets", nargs="+", default=list(BENCH_DATASETS))
    parser.add_argument("--model", default=None, help="checkpoint name or folder (default: mini)")
    parser.add_argument("--train-limit", type=int, default=None, help="cap on train records for (e) (default: all)")
    parser.add_argument("--skip", nargs="*", default=[], help="method keys to leave out, e.g. smollm_json")
    parser.add_argument("--scaling-reps", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="short sweeps (for a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads for every method (1 is stable on a shared machine; more threads spin-wait under contention)",
    )
    args = parser.parse_args(argv)
    args.skip = set(args.skip)
    started = time.time()
    import torch

    torch.set_num_threads(args.threads)
    methods, floor, model_info = build_methods(args)
    log(f"model: {model_info['description']}; methods: {[m.key for m in methods]}")
    items = {d: sample_items(d, args.n, args.seed) for d in args.datasets}
    heavy = HEAVY & {m.key for m in methods}
    result = compare(items, methods, heavy=heavy, n_shared=args.n_shared, seed=args.seed, log=log)
    log("scaling sweeps")
    result["scaling"] = scaling(
        [*methods[:1], floor, *[m for m in methods[1:] if m.key != "logreg"]],
        build_sweeps(args.quick),
        reps=args.scaling_reps,
        heavy=heavy,
        log=log,
    )
    argv_text = " ".join(argv if argv is not None else sys.argv[1:])
    result["run"] = {
        "command": (".venv/bin/python bench/compare/run.py " + argv_text).strip(),
        "model": model_info,
        "records": "clef_agents.train.datasets",
        "datasets": args.datasets,
        "n_per_set": args.n,
        "n_shared_per_set": args.n_shared,
        "heavy_methods": sorted(heavy),
        "seed": args.seed,
        "scaling_reps": args.scaling_reps,
        "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}",
        "wall_seconds": round(time.time() - started, 1),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    result["methods"]["bare_backbone"] = floor.info()
    titles = {k: v["title"] for k, v in result["methods"].items()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    plot_scaling(result["scaling"], titles, args.out / "scaling.png")
    plot_accuracy(
        {
            "per_dataset": result["per_dataset"],
            "methods": {k: v for k, v in result["methods"].items() if k != "bare_backbone"},
        },
        titles,
        args.out / "accuracy.png",
    )
    log(f"wrote {args.out} in {result['run']['wall_seconds']} s")
    if not args.no_report:
        from bench.compare.report import main as report_main

        report_main([])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
