"""The autopilot benchmark: replay labelled streams through the gate's learning loop and count the teacher
calls it saves at the promised agreement, beside baselines in the same run.

Methods (all on the same streams, orders and teachers):
- ``always_teacher``: every item to the teacher;
- ``gate_no_learning``: today's gate on mini's untaught answer (automatic at p >= 0.9, the rest to the teacher);
- ``teach_once``: the autopilot's learner, fitted until 500 labels and then frozen;
- ``online_cascade``: logistic regression on MiniLM sentence vectors, refit every 100 labels, 30 % of labels
  kept for certification, fixed-sequence thresholds, 5 % audits (after Nie et al., ICML 2024);
- ``autopilot``: ``clef_agents.autopilot`` with its defaults.

Teachers: the gold label (``perfect``), and the gold label replaced by a random option on 10 % of items
(``noisy``; fixed per item and seed).

    .venv/bin/python bench/autopilot/cache.py --threads 1      # once: mini's answers and MiniLM vectors
    .venv/bin/python bench/autopilot/run.py --workers 2         # results/ (json, md, png)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.autopilot.tasks import MAIN_TASKS, SEEDS, TASKS  # noqa: E402

CACHE = Path("runs/autopilot_cache")
OUT = Path(__file__).resolve().parent / "results"
METHODS = ("always_teacher", "gate_no_learning", "teach_once", "online_cascade", "autopilot")
NOISE = 0.10
BIN = 100
TARGET = 0.95
SETTINGS_ENV = "BENCH_AUTOPILOT_SET"


def load(task: str) -> Any:
    from clef_agents.autopilot.replay import Stream

    data = np.load(CACHE / f"{task}.npz")
    return Stream(
        [str(t) for t in data["texts"]],
        data["model_probs"].astype(np.float64),
        data["gold"].astype(np.int64),
        data["embeddings"],
    )


def order_of(task: str, n: int, seed: int) -> np.ndarray:
    """A seeded order; a drift stream is shuffled within each side of its change."""
    rng = np.random.default_rng(seed)
    drift = TASKS[task].drift_at
    if drift is None:
        return rng.permutation(n)
    return np.concatenate([rng.permutation(drift), drift + rng.permutation(n - drift)])


def teacher_answers(gold: np.ndarray, n_options: int, kind: str, seed: int) -> np.ndarray:
    if kind == "perfect":
        return gold.copy()
    rng = np.random.default_rng(10_000 + seed)
    noisy = rng.random(len(gold)) < NOISE
    return np.where(noisy, rng.integers(0, n_options, len(gold)), gold)


def setting(text: str) -> tuple[str, Any]:
    """``--set NAME=VALUE`` as (name, JSON value)."""
    name, sep, value = text.partition("=")
    try:
        if not sep or not name:
            raise ValueError("no NAME=")
        return name, json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with a JSON value (audit=0.1), got {text!r}") from exc


def config_of(method: str) -> dict[str, Any]:
    """The method's AutopilotConfig settings, with the run's ``--set`` overrides (they reach the pool's workers
    through the environment)."""
    overrides = json.loads(os.environ.get(SETTINGS_ENV, "{}"))
    if method == "teach_once":
        return {"stop_learning_after": 500, **overrides}
    if method == "online_cascade":
        return {
            "learner_kinds": ("embedding",),
            "retrain_every": 100,
            "first_retrain": 100,
            "warm_share": 0.3,
            **overrides,
        }
    return overrides


def hindsight_share(probs: np.ndarray, agree: np.ndarray, target: float, audit: float) -> float:
    """The teacher share a threshold chosen on these very items would leave (plus the audit share)."""
    order = np.argsort(-probs)
    ok = np.cumsum(agree[order]) / np.arange(1, len(order) + 1)
    good = np.nonzero(ok >= target)[0]
    covered = (good.max() + 1) / len(order) if len(good) else 0.0
    return float(min(1.0, 1.0 - covered + audit * covered))


def curves(result: Any) -> dict[str, list]:
    n = len(result.lanes)
    calls, agree = [], []
    auto = result.lanes == "auto"
    for start in range(0, n, BIN):
        part = slice(start, start + BIN)
        calls.append(round(float(result.teacher_calls[part].mean()), 4))
        a = auto[part]
        agree.append(round(float((result.answers[part] == result.teacher[part])[a].mean()), 4) if a.any() else None)
    return {"teacher_share": calls, "automatic_agreement": agree}


def run_job(job: tuple[str, int, str, str]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from clef_agents.autopilot.pilot import Autopilot
    from clef_agents.autopilot.replay import ReplayResult, replay

    task_name, seed, teacher_kind, method = job
    task = TASKS[task_name]
    stream = load(task_name)
    stream = stream.ordered(order_of(task_name, len(stream), seed))
    n_options = stream.model_probs.shape[1]
    said = teacher_answers(stream.gold, n_options, teacher_kind, seed)
    question = task.question()
    if task_name == "banking77":
        options = [str(o) for o in np.load(CACHE / f"{task_name}.npz")["options"]]
        question = {**question, "criteria": {name: None for name in options}}
    started = time.perf_counter()
    extra: dict[str, Any] = {}
    if method in ("always_teacher", "gate_no_learning"):
        n = len(stream)
        decided = stream.model_probs.argmax(axis=1)
        auto = (stream.model_probs.max(axis=1) >= 0.9) if method == "gate_no_learning" else np.zeros(n, dtype=bool)
        answers = np.where(auto, decided, said)
        result = ReplayResult(
            np.where(auto, "auto", "teacher"),
            answers,
            ~auto,
            said,
            stream.gold,
            stream.model_probs.max(axis=1),
            decided,
            time.perf_counter() - started,
        )
    else:
        pilot = Autopilot(":memory:", background=False, seed=seed, **config_of(method))
        result = replay(pilot, question, stream, lambda i: int(said[i]))
        key = pilot.store.questions()[0]["question_key"]
        tail = slice(len(stream) - 1000, len(stream))
        extra["hindsight_share_last"] = hindsight_share(
            result.probabilities[tail], result.predictions[tail] == said[tail], TARGET, pilot.config.audit
        )
        events = pilot.store.events(key)
        extra["withdrawn_at"] = [e["detail"]["seq"] for e in events if e["kind"] == "withdrawn"]
        extra["certified_at"] = [e["detail"]["labels"] for e in events if e["kind"] == "certified"]
        extra["retrain_seconds_mean"] = float(np.mean(result.retrain_seconds)) if result.retrain_seconds else None
        extra["certified_at_item"] = [int(v.report["last_seq"]) for v in pilot.store.versions(key) if v.certified]
    summary = result.summary(target=TARGET)
    summary.update(extra)
    return {
        "task": task_name,
        "seed": seed,
        "teacher": teacher_kind,
        "method": method,
        "summary": summary,
        "curves": curves(result),
    }


def jobs_for(
    tasks: list[str], seeds: list[int], noisy_seeds: list[int], methods: tuple[str, ...] = METHODS
) -> list[tuple[str, int, str, str]]:
    jobs = [(t, s, "perfect", m) for t in tasks for s in seeds for m in methods]
    jobs += [
        (t, s, "noisy", m)
        for t in tasks
        if t in MAIN_TASKS
        for s in noisy_seeds
        for m in ("always_teacher", "online_cascade", "autopilot")
        if m in methods
    ]
    # longest first, so two workers finish together
    cost = {"autopilot": 3, "teach_once": 2, "online_cascade": 1}
    return sorted(jobs, key=lambda j: -cost.get(j[3], 0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="*", default=list(TASKS))
    parser.add_argument("--seeds", nargs="*", type=int, default=list(SEEDS))
    parser.add_argument("--noisy-seeds", nargs="*", type=int, default=[0, 1])
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="render the report from the runs already done, running none (missing runs are left out)",
    )
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        type=setting,
        metavar="NAME=VALUE",
        help="AutopilotConfig settings for every learning method, e.g. audit=0.1 (values as JSON)",
    )
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ[SETTINGS_ENV] = json.dumps(dict(args.set))
    jobs = jobs_for(args.tasks, args.seeds, args.noisy_seeds, tuple(args.methods))
    started = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    partial = out / "runs.jsonl"
    done = {}
    if partial.exists():
        for line in partial.read_text().splitlines():
            row = json.loads(line)
            done[(row["task"], row["seed"], row["teacher"], row["method"])] = row
    todo = [] if args.report_only else [j for j in jobs if j not in done]
    print(f"{len(jobs)} runs, {len(todo)} to do", flush=True)
    with Pool(args.workers) as pool, partial.open("a") as fh:
        for k, row in enumerate(pool.imap_unordered(run_job, todo), 1):
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            s = row["summary"]
            print(
                f"[{k}/{len(todo)} {time.perf_counter() - started:.0f}s] {row['task']} seed {row['seed']} "
                f"{row['teacher']} {row['method']}: teacher {s['teacher_share']:.3f} (last {s['teacher_share_last']:.3f})"
                f" acc {s['accuracy']:.3f} auto agree {s['automatic_agreement']}",
                flush=True,
            )
    wanted, rows = set(jobs), {}
    for line in partial.read_text().splitlines():  # the first row of each run (several invocations may share the file)
        row = json.loads(line)
        rows.setdefault((row["task"], row["seed"], row["teacher"], row["method"]), row)
    rows = [row for key, row in rows.items() if key in wanted]
    from bench.autopilot.report import write_report

    write_report(
        rows, out, wall_seconds=time.perf_counter() - started, command=" ".join(sys.argv), report_only=args.report_only
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
