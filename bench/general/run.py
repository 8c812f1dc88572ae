"""Issue 23: the held-out benchmark of untaught questions.

Every task of the frozen ``tasks.yaml`` reads a data set no evaluated model trained on (the
held-out sets of ``clef_agents.train.split``) or a leave-one-out target, and asks each of its
wordings (plain, formal, terse, paraphrase, negated; choice tasks with bare option names and with
descriptions; yes/no tasks also as a two-option yes/no choice) as a question alone in its own
request. A task whose data set a model trained on is still measured, but marked ``seen`` and left
out of that model's untaught means.

Run:   make bench-setup && .venv/bin/python bench/general/run.py          # default sample: 120 rows a task
       .venv/bin/python bench/general/run.py --full                        # every row (hours)
       .venv/bin/python bench/general/run.py --model new=runs/x/final       # add a model to compare
       .venv/bin/python bench/general/run.py --methods precise --lm-variant both=my_settings.json
                                                   # precise again under other answer settings, on the same loaded LM
Writes bench/general/results/{results.json,results.md,*.png}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.general import metrics as M
from bench.general.methods import Answerer
from bench.general.tasks import (
    WORDINGS,
    Item,
    Task,
    load_tasks,
    sample_items,
    tasks_sha256,
)
from bench.reports import log

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_METHODS = ("mini", "mini+reader", "label_cosine", "sparrow")


# --------------------------------------------------------------------------- scoring one task


def evaluate_task(task: Task, items: list[Item], answerer: Answerer, progress: Any = None) -> dict[str, Any]:
    """Every variant of ``task`` answered by ``answerer``: per-variant metrics, the headline metric
    over wordings, and the coherence relations."""
    started = time.perf_counter()
    probabilities: dict[str, list[list[float]]] = {}
    per_variant: dict[str, dict[str, Any]] = {}
    for variant in task.variants():
        probs = answerer.answer(task, variant, items)
        gold = [variant.gold(item.label) for item in items]
        probabilities[variant.key] = probs
        per_variant[variant.key] = M.variant_metrics(variant.question["type"], probs, gold)
        if progress is not None:
            progress.update(len(items))
    result: dict[str, Any] = {"task": task.id, "type": task.type, "n": len(items), "variants": per_variant}
    headline = M.HEADLINE[task.type]
    result["headline"] = headline
    result["over_wordings"] = M.over_wordings(per_variant, WORDINGS, headline)
    result["ece_over_wordings"] = M.over_wordings(per_variant, WORDINGS, "ece")
    result["ece_floor_over_wordings"] = M.over_wordings(per_variant, WORDINGS, "ece_floor")
    result["nll_over_wordings"] = M.over_wordings(per_variant, WORDINGS, "nll")
    if task.type == "choice":
        described = [f"{w}_described" for w in WORDINGS]
        result["over_wordings_described"] = M.over_wordings(per_variant, described, headline)
    result["coherence"] = coherence(task, probabilities)
    result["seconds"] = round(time.perf_counter() - started, 2)
    return result


def coherence(task: Task, probabilities: dict[str, list[list[float]]]) -> dict[str, Any]:
    """The task's coherence relations between its question forms."""
    if task.type == "noul":
        p_yes = [p[0] for p in probabilities["plain"]]
        p_yes_neg = [p[0] for p in probabilities["negated"]]
        return {
            "negation": M.gap_summary(M.negation_gaps(p_yes, p_yes_neg)),
            "yes_no_vs_choice_agreement": M.agreement(probabilities["plain"], probabilities["plain_as_choice"]),
        }
    if task.type == "score":
        levels = len(task.levels)
        expected, expected_rev = M.expected_levels(probabilities["plain"]), M.expected_levels(probabilities["negated"])
        return {"score_complement": M.gap_summary(M.score_complement_gaps(expected, expected_rev, levels))}
    return {"bare_vs_described_agreement": M.agreement(probabilities["plain"], probabilities["plain_described"])}


# --------------------------------------------------------------------------- summaries


def summarise(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over the untaught tasks of one method, per question type, with the issue's relations."""
    untaught = [t for t in tasks if not t.get("seen")]
    by_type = {kind: [t for t in untaught if t["type"] == kind] for kind in ("noul", "choice", "score")}
    nouls, choices, scores = by_type["noul"], by_type["choice"], by_type["score"]
    noul_wordings = [t["variants"][w]["auroc"] for t in nouls for w in WORDINGS]
    lanes = {
        kind: M.pooled_lanes(t["variants"][w]["lanes"] for t in by_type[kind] for w in WORDINGS) for kind in by_type
    }
    return {
        "tasks": len(untaught),
        "seen_tasks": [t["task"] for t in tasks if t.get("seen")],
        "noul": {
            "tasks": len(nouls),
            "auroc_mean": M.finite_mean(t["over_wordings"]["mean"] for t in nouls),
            "auroc_worst_wording": M.finite_min(noul_wordings),
            "wordings_below_0.8": sum(1 for v in noul_wordings if v < 0.8),
            "wordings_inverted": sum(1 for v in noul_wordings if v < 0.5),
            "wordings": len(noul_wordings),
            "ece_mean": M.finite_mean(t["ece_over_wordings"]["mean"] for t in nouls),
            "ece_floor_mean": M.finite_mean(t["ece_floor_over_wordings"]["mean"] for t in nouls),
            "nll_mean": M.finite_mean(t["nll_over_wordings"]["mean"] for t in nouls),
            "negation_share_within": M.finite_mean(t["coherence"]["negation"]["share_within"] for t in nouls),
            "yes_no_vs_choice_agreement": M.finite_mean(t["coherence"]["yes_no_vs_choice_agreement"] for t in nouls),
            "lanes": lanes["noul"],
        },
        "choice": {
            "tasks": len(choices),
            "accuracy_bare": M.finite_mean(t["over_wordings"]["mean"] for t in choices),
            "accuracy_described": M.finite_mean(t["over_wordings_described"]["mean"] for t in choices),
            "ece_mean": M.finite_mean(t["ece_over_wordings"]["mean"] for t in choices),
            "ece_floor_mean": M.finite_mean(t["ece_floor_over_wordings"]["mean"] for t in choices),
            "lanes": lanes["choice"],
        },
        "score": {
            "tasks": len(scores),
            "spearman_mean": M.finite_mean(t["over_wordings"]["mean"] for t in scores),
            "spearman_worst_wording": M.finite_min(t["variants"][w]["spearman"] for t in scores for w in WORDINGS),
            "complement_share_within": M.finite_mean(
                t["coherence"]["score_complement"]["share_within"] for t in scores
            ),
            "lanes": lanes["score"],
        },
    }


# --------------------------------------------------------------------------- contenders


def build_answerers(names: list[str], models: list[str], variants: Sequence[str] = ()) -> list[Answerer]:
    """The contenders named on the command line (``models`` are extra ``key=name_or_path`` models; ``variants`` are
    ``key=settings.json`` readings of the first local-LM contender's LM)."""
    from bench.general.methods import LabelCosineAnswerer, SparrowAnswerer

    answerers: list[Answerer] = []
    for name in names:
        if name == "label_cosine":
            from bench.baselines.minilm import MiniLM

            answerers.append(LabelCosineAnswerer(MiniLM.load()))
        elif name == "sparrow":
            answerers.append(SparrowAnswerer())
        elif is_lm_spec(name):
            answerers.append(lm_answerer(name, name))
        else:
            answerers.append(model_answerer(name, name))
    for spec in models:
        key, _, where = spec.partition("=")
        if not where:
            raise SystemExit(f"--model takes KEY=NAME_OR_PATH (e.g. new=runs/x/final), got {spec!r}")
        answerers.append(lm_answerer(key, where) if is_lm_spec(where) else model_answerer(key, where))
    for spec in variants:
        answerers.append(lm_variant_answerer(spec, answerers))
    return answerers


def lm_variant_answerer(spec: str, answerers: list[Answerer]) -> Answerer:
    """``key=settings.json``: the first local-LM contender's LM (``precise`` or ``lm:PATH``; its weights and state
    caches) read under the answer settings of the file (``VARIANT_SETTINGS``); every other setting must be the LM's own."""
    from bench.general.methods import ModelAnswerer
    from clef_agents.model.precise import (
        VARIANT_SETTINGS,
        LMSettings,
        PrefillLMDecisionModel,
    )

    key, _, path = spec.partition("=")
    if not key or not path:
        raise SystemExit(f"--lm-variant takes KEY=SETTINGS.json, got {spec!r}")
    base = next((a for a in answerers if isinstance(getattr(a, "model", None), PrefillLMDecisionModel)), None)
    if base is None:
        raise SystemExit("--lm-variant reads a local LM contender's LM: add precise (or --model KEY=lm:PATH) first")
    try:
        wanted = LMSettings.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--lm-variant {key}: cannot read LM settings from {path}: {exc}") from None
    lm = base.model.lm
    own, other = lm.settings().model_dump(), wanted.model_dump()
    differ = sorted(k for k in own if k not in VARIANT_SETTINGS and own[k] != other[k])
    if differ:
        raise SystemExit(
            f"--lm-variant {key}: {path} differs from {base.key}'s settings in {', '.join(differ)}; "
            f"a variant may change only {', '.join(VARIANT_SETTINGS)}"
        )
    changes = {k: getattr(wanted, k) for k in VARIANT_SETTINGS}
    model = PrefillLMDecisionModel(lm.variant(**changes), model=key)
    return ModelAnswerer(key, model, title=f"{base.key} read under {path}", trained_on=[])


def is_lm_spec(spec: str) -> bool:
    """Whether ``spec`` names a local LM (``precise`` or ``lm:PATH``), as ``clef_agents.loading`` reads specs."""
    from clef_agents.loading import spec_kind

    return spec_kind(spec) == "lm"


def lm_answerer(key: str, where: str, states_kept: int = 512) -> Answerer:
    """The precise tier (``precise``) or any local LM (``lm:PATH``), keeping every sampled state's prefix
    cache so that the wordings of a task read each state once. It was trained on none of the sets."""
    from bench.general.methods import ModelAnswerer
    from clef_agents.loading import LM_PREFIX, PRECISE
    from clef_agents.model.precise import PrefillLMDecisionModel

    reference = PRECISE if where == PRECISE else where.removeprefix(LM_PREFIX)
    model = PrefillLMDecisionModel.load(reference, prefix_cache_size=states_kept)
    return ModelAnswerer(key, model, title=f"{where}: a local instruct LM read in one prefill pass", trained_on=[])


def model_answerer(key: str, where: str) -> Answerer:
    """A clef_agents checkpoint (shipped name or folder; ``NAME+reader``: its precise mode), with the data sets its
    data card names."""
    from bench.general.methods import ModelAnswerer
    from clef_agents.model import ClefDecisionModel

    model = ClefDecisionModel.from_pretrained(where)
    title = f"clef_agents model {where}" + (" (precise mode: its question reader)" if where.endswith("+reader") else "")
    card = list((model.config.data_card or {}).get("datasets", []))
    question_reader = model.engine.reader
    reader_sets = list(question_reader.config.trained_on.get("sets", [])) if question_reader is not None else None
    return ModelAnswerer(key, model, title=title, trained_on=card, reader_trained_on=reader_sets)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tqdm import tqdm

    from clef_agents.train.datasets import data_root
    from clef_agents.train.split import split_table

    root = data_root()
    tasks = load_tasks(root, only=args.tasks)
    n = None if args.full else args.n
    items = {task.id: sample_items(task, root, n, args.seed) for task in tasks}
    answerers = build_answerers(args.methods, args.model, args.lm_variant)
    total = sum(len(items[t.id]) * len(t.variants()) for t in tasks)
    results: dict[str, Any] = {"methods": {}}
    for answerer in answerers:
        per_task = []
        with tqdm(total=total, desc=answerer.key, unit="q", file=sys.stderr, mininterval=5) as bar:
            for task in tasks:
                result = evaluate_task(task, items[task.id], answerer, bar)
                result["seen"] = answerer.saw(task)
                per_task.append(result)
                log(
                    f"{answerer.key} {task.id}: {result['headline']} {result['over_wordings']['mean']:.3f} "
                    f"(min {result['over_wordings']['min']:.3f}) in {result['seconds']} s"
                )
        results["methods"][answerer.key] = {"info": answerer.info(), "tasks": per_task, "summary": summarise(per_task)}
    import torch

    results["meta"] = {
        "command": " ".join([".venv/bin/python bench/general/run.py", *sys.argv[1:]]),
        "tasks_file": "bench/general/tasks.yaml",
        "tasks_sha256": tasks_sha256(),
        "n_per_task": "all" if n is None else n,
        "seed": args.seed,
        "items": {t.id: len(items[t.id]) for t in tasks},
        "requests_per_method": total,
        "split": split_table(),
        "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}",
        "date": time.strftime("%Y-%m-%d"),
    }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=120, help="rows sampled per task (default 120)")
    parser.add_argument("--full", action="store_true", help="every row of every task (hours on 2 CPU cores)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--tasks", nargs="*", default=None, help="task ids of tasks.yaml (default: all)")
    parser.add_argument(
        "--methods",
        nargs="*",
        default=list(DEFAULT_METHODS),
        help="mini (or any shipped name / checkpoint path; NAME+reader: its precise mode, the question reader), "
        "label_cosine, sparrow (default: mini, mini+reader, label_cosine, sparrow); "
        "precise or lm:PATH (a local instruct LM, the precise tier)",
    )
    parser.add_argument("--model", action="append", default=[], help="extra model KEY=NAME_OR_PATH, repeatable")
    parser.add_argument(
        "--lm-variant",
        action="append",
        default=[],
        help="KEY=SETTINGS.json: the first local-LM contender's LM again, under the answer settings of the file "
        "(calibration, prior_correction, noul_both_forms), on the same weights and state caches; repeatable",
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="results folder (default bench/general/results)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args(argv)
    if args.n < 2:
        parser.error(f"--n must be at least 2 (AUROC needs both classes), got {args.n}")
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    results = run(args)
    results["meta"]["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, allow_nan=True) + "\n")
    from bench.general.report import render

    render(results, args.out)
    log(f"wrote {args.out}/results.json, results.md and plots in {results['meta']['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
