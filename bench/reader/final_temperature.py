"""A temperature per question type after head mixing, fitted on the reader's probe and judged once on
bench/general, by the rule of bench/reader/rule_final_temperature.md (written before any measurement).

``fit``: the shipped mini's answers to the probe (the reader's, calibrated as shipped, with the routing head's
mixed in at the shipped weights); ``T_noul`` and ``T_choice`` fitted by NLL on one half of the probe and checked
on the other, both ways round; a type's T is kept when its out-of-fold NLL falls in both folds; the kept Ts,
refitted on the whole probe, go into a copy of mini written to ``--write`` (never into the package).

``verdict``: the rule's check of the run and its verdict per type, from two bench/general results.

``quality``: reported, not judged: both models on bench/quality's test splits that the reader answers.

Run:   OMP_NUM_THREADS=1 CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/reader/final_temperature.py fit \\
           --threads 2 --cache runs/stop40/probe_answers.json --write runs/mini_final_temperature
       .venv/bin/python bench/reader/final_temperature.py verdict
       OMP_NUM_THREADS=1 CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/reader/final_temperature.py quality --threads 2
Writes bench/reader/final_temperature{,_verdict,_quality}.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from bench.reports import write_report

KINDS = ("noul", "choice")
TOLERANCE = 1e-6
"""How far a ranking or accuracy may differ between the two runs before they are not comparable."""


# --------------------------------------------------------------------------- the probe's answers


def probe_answers(rows: int, model_name: str) -> dict[str, Any]:
    """The shipped model's reader answers (calibrated as shipped) and head answers to the probe's items."""
    from probe import head_probabilities

    from clef_agents.model import ClefDecisionModel
    from clef_agents.train.reader_probe import probe_items

    items = probe_items(rows)
    reader = ClefDecisionModel.from_pretrained(model_name).engine.reader
    if reader is None:
        raise SystemExit(f"{model_name} has no question reader")
    read = reader.predict([(state, q) for state, q, _, _ in items])
    head = head_probabilities(model_name, items)
    return {"rows": rows, "model": model_name, "reader": read, "head": head,
            "head_weights": reader.describe()["head_weights"],
            "final_temperature": reader.describe()["final_temperature"]}


def load_answers(rows: int, model_name: str, cache: Path | None) -> dict[str, Any]:
    """``probe_answers``, read from ``cache`` when it holds the same rows and model, else computed (and stored there)."""
    if cache is not None and cache.is_file():
        stored = json.loads(cache.read_text(encoding="utf-8"))
        if stored["rows"] == rows and stored["model"] == model_name:
            return stored
    answers = probe_answers(rows, model_name)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(answers), encoding="utf-8")
    return answers


# --------------------------------------------------------------------------- fitting


def nll(probabilities: list[list[float]], gold: list[int]) -> float:
    """Mean negative log-probability of the gold option.

    Example:
        >>> round(nll([[0.5, 0.5], [0.9, 0.1]], [0, 0]), 4)
        0.3992
    """
    if not gold:
        return float("nan")
    return -sum(math.log(max(p[g], 1e-12)) for p, g in zip(probabilities, gold)) / len(gold)


def tempered(probabilities: list[list[float]], temperature: float) -> list[list[float]]:
    """Every answer at ``temperature`` (``QuestionReader.temper``)."""
    from clef_agents.model.reader import QuestionReader

    return [QuestionReader.temper(p, temperature) for p in probabilities]


def fit_type_temperature(probabilities: list[list[float]], gold: list[int]) -> float:
    """The temperature that minimises the NLL of ``gold`` under the answers' log-probabilities."""
    import torch

    from clef_agents.train.calibration import fit_temperature

    logits = [torch.tensor([math.log(max(v, 1e-12)) for v in p]) for p in probabilities]
    return fit_temperature(logits, gold)


def by_kind(items: list, answers: list[list[float]], index: list[int], kind: str) -> tuple[list[list[float]], list[int]]:
    """The answers and gold options of ``index``'s items of one question type."""
    from clef_agents import wire

    wanted = [i for i in index if isinstance(items[i][1], wire.Noul) == (kind == "noul")]
    return [answers[i] for i in wanted], [items[i][2] for i in wanted]


def fold(items: list, mixed: list[list[float]], fit_half: int) -> dict[str, Any]:
    """Each type's T fitted on one half of the probe and checked on the other against T = 1."""
    from clef_agents.train.reader_probe import probe_half

    fit = [i for i, item in enumerate(items) if probe_half(item) == fit_half]
    check = [i for i, item in enumerate(items) if probe_half(item) != fit_half]
    out: dict[str, Any] = {"fit_half": fit_half, "fit_items": len(fit), "check_items": len(check)}
    for kind in KINDS:
        temperature = fit_type_temperature(*by_kind(items, mixed, fit, kind))
        probs, gold = by_kind(items, mixed, check, kind)
        out[kind] = {"temperature": round(temperature, 4), "n_check": len(gold),
                     "nll_shipped": round(nll(probs, gold), 4), "nll_tempered": round(nll(tempered(probs, temperature), gold), 4)}
    return out


def kept(folds: list[dict[str, Any]]) -> dict[str, bool]:
    """Per type: whether the fitted T lowers the out-of-fold NLL in every fold."""
    return {kind: all(f[kind]["nll_tempered"] < f[kind]["nll_shipped"] for f in folds) for kind in KINDS}


def per_set_means(items: list, probabilities: list[list[float]]) -> dict[str, dict[str, float | None]]:
    """Per type, the mean over probe sets of the set's NLL and ECE (``probe_report``)."""
    from clef_agents.train.reader_probe import probe_report

    sets = probe_report(items, probabilities)["sets"]
    out: dict[str, dict[str, float | None]] = {}
    for kind in KINDS:
        groups = [g[kind] for g in sets.values() if kind in g]
        out[kind] = {metric: round(sum(g[metric] for g in groups) / len(groups), 4) if groups else None for metric in ("nll", "ece")}
    return out


def write_candidate(model_name: str, temperatures: dict[str, float], folder: Path) -> None:
    """A copy of ``model_name``'s checkpoint whose reader carries ``temperatures`` as its final temperature."""
    from clef_agents.model.decision_model import checkpoint_folder
    from clef_agents.model.reader import QuestionReader

    source = checkpoint_folder(model_name)
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(source, folder)
    reader = QuestionReader.load(folder)
    reader.set_final_temperature(temperatures)
    reader.save(folder)


def run_fit(args: argparse.Namespace) -> int:
    import torch
    from probe import mix

    from clef_agents.model.reader import QuestionReader
    from clef_agents.train.reader_probe import probe_items

    torch.set_num_threads(args.threads)
    started = time.time()
    answers = load_answers(args.rows, args.model, Path(args.cache) if args.cache else None)
    if answers["final_temperature"]:
        raise SystemExit(f"{args.model} already has a final temperature {answers['final_temperature']}; the rule fits it on the shipped mix")
    items = probe_items(args.rows)
    weights = answers["head_weights"]
    mixed = mix(answers["reader"], answers["head"], items, weights)
    folds = [fold(items, mixed, half) for half in (0, 1)]
    keep = kept(folds)
    everything = list(range(len(items)))
    whole = {kind: round(fit_type_temperature(*by_kind(items, mixed, everything, kind)), 4) for kind in KINDS}
    final = {kind: whole[kind] for kind in KINDS if keep[kind]}
    candidate = [QuestionReader.temper(p, final.get(q.type, 1.0)) for (_, q, _, _), p in zip(items, mixed)]
    result = {
        "command": " ".join(["python", "bench/reader/final_temperature.py", *sys.argv[1:]]),
        "rule": "bench/reader/rule_final_temperature.md", "items": len(items), "wall_s": round(time.time() - started, 1),
        "head_weights": weights, "folds": folds, "kept": keep, "whole_probe_fit": whole, "final_temperature": final,
        "whole_probe": {"shipped": per_set_means(items, mixed), "candidate": per_set_means(items, candidate),
                        "pooled_nll": {kind: {"shipped": round(nll(*by_kind(items, mixed, everything, kind)), 4),
                                              "candidate": round(nll(*by_kind(items, candidate, everything, kind)), 4)}
                                       for kind in KINDS}},
    }
    if args.write and final:
        write_candidate(args.model, final, Path(args.write))
        result["written"] = args.write
    write_report(args.out, result, render_fit(result))
    return 0


def render_fit(result: dict[str, Any]) -> str:
    lines = [
        "# A temperature after head mixing, fitted on the reader's probe",
        "",
        (f"Rule: [{Path(result['rule']).name}]({Path(result['rule']).name}), written before this ran. "
         f"Command: `{result['command']}` ({result['items']} probe items, {result['wall_s']:.0f} s)."),
        f"The answers are shipped mini's: the reader's, calibrated as shipped, with the routing head's mixed in at {result['head_weights']}.",
        "",
        "## Fitted on one half of the probe, checked on the other",
        "",
        "| fitted on | type | T | items checked | NLL, shipped mix | NLL, at T |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for f in result["folds"]:
        for kind in KINDS:
            m = f[kind]
            lines.append(f"| half {f['fit_half']} | {kind} | {m['temperature']:.3f} | {m['n_check']} | {m['nll_shipped']:.4f} | {m['nll_tempered']:.4f} |")
    keep = result["kept"]
    lines += ["", "A type's T is kept when it lowers the out-of-fold NLL in both folds: "
              + "; ".join(f"{kind} {'kept' if keep[kind] else 'not kept'}" for kind in KINDS) + ".", "",
              f"Fitted on the whole probe: {result['whole_probe_fit']}. Kept: {result['final_temperature'] or 'nothing'}"
              + (f", written to `{result['written']}`." if result.get("written") else ", written nowhere (no `--write`)."), "",
              "## On the whole probe (in-sample for the candidate)", "",
              "| type | pooled NLL, shipped | pooled NLL, candidate | mean set NLL, shipped | candidate | mean set ECE, shipped | candidate |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    whole = result["whole_probe"]
    for kind in KINDS:
        pooled = whole["pooled_nll"][kind]
        s, c = whole["shipped"][kind], whole["candidate"][kind]
        lines.append(f"| {kind} | {pooled['shipped']:.4f} | {pooled['candidate']:.4f} | {s['nll']:.4f} | {c['nll']:.4f} | {s['ece']:.4f} | {c['ece']:.4f} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the verdict


def task_means(summary_tasks: list[dict[str, Any]], kind: str, key: str) -> float:
    """The mean over untaught tasks of one type of a task's ``key`` (an ``*_over_wordings`` entry's mean)."""
    values = [t[key]["mean"] for t in summary_tasks if t["type"] == kind and not t.get("seen") and key in t]
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return sum(values) / len(values) if values else float("nan")


def unchanged(shipped: dict[str, Any], candidate: dict[str, Any]) -> list[str]:
    """What a temperature cannot move and yet differs between the two runs (empty: comparable)."""
    ranked = {"noul": ("auroc",), "choice": ("accuracy",), "score": ("spearman",)}
    moved: list[str] = []
    by_id = {t["task"]: t for t in candidate["tasks"]}
    for task in shipped["tasks"]:
        other = by_id.get(task["task"])
        if other is None:
            moved.append(f"{task['task']}: missing")
            continue
        for variant, metrics in task["variants"].items():
            for key in ranked[task["type"]]:
                a, b = metrics.get(key), other["variants"][variant].get(key)
                if (a is None and b is None) or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)):
                    continue  # a form without this figure (a yes/no asked as a choice has no AUROC) in both runs
                if a is None or b is None or abs(a - b) > TOLERANCE:
                    moved.append(f"{task['task']}/{variant} {key}: {a} vs {b}")
        for relation in ("yes_no_vs_choice_agreement", "bare_vs_described_agreement"):
            a, b = task["coherence"].get(relation), other["coherence"].get(relation)
            if a is not None and (b is None or abs(a - b) > TOLERANCE):
                moved.append(f"{task['task']} {relation}: {a} vs {b}")
    return moved


def judge(shipped: dict[str, Any], candidate: dict[str, Any], temperatures: dict[str, float]) -> dict[str, Any]:
    """The rule's verdict per type from two bench/general method results (``results.json["methods"][name]``)."""
    figures = {}
    for label, run in (("shipped", shipped), ("candidate", candidate)):
        s = run["summary"]
        figures[label] = {
            "noul_nll": s["noul"]["nll_mean"], "noul_ece": s["noul"]["ece_mean"], "noul_ece_floor": s["noul"].get("ece_floor_mean"),
            "negation_share_within": s["noul"]["negation_share_within"],
            "yes_no_vs_choice_agreement": s["noul"]["yes_no_vs_choice_agreement"], "noul_auroc": s["noul"]["auroc_mean"],
            "choice_nll": task_means(run["tasks"], "choice", "nll_over_wordings"), "choice_ece": s["choice"]["ece_mean"],
            "choice_ece_floor": s["choice"].get("ece_floor_mean"),
            "choice_accuracy_bare": s["choice"]["accuracy_bare"], "choice_accuracy_described": s["choice"]["accuracy_described"],
        }
    moved = unchanged(shipped, candidate)
    a, b = figures["shipped"], figures["candidate"]
    verdict: dict[str, Any] = {"comparable": not moved, "moved": moved, "figures": figures, "ships": {}}
    if moved:
        verdict["ships"] = {kind: False for kind in KINDS}
        verdict["why"] = {kind: "the runs are not comparable" for kind in KINDS}
        return verdict
    reasons = {
        "noul": [("yes/no NLL lower", b["noul_nll"] < a["noul_nll"]), ("yes/no ECE lower", b["noul_ece"] < a["noul_ece"]),
                 ("negation share not lower", b["negation_share_within"] >= a["negation_share_within"])],
        "choice": [("choice NLL lower", b["choice_nll"] < a["choice_nll"]), ("choice ECE lower", b["choice_ece"] < a["choice_ece"])],
    }
    for kind in KINDS:
        if kind not in temperatures:
            verdict["ships"][kind] = False
            reasons[kind] = [("a final temperature was kept on the probe", False)]
        else:
            verdict["ships"][kind] = all(ok for _, ok in reasons[kind])
    verdict["checks"] = {kind: [{"check": name, "holds": ok} for name, ok in reasons[kind]] for kind in KINDS}
    return verdict


def run_verdict(args: argparse.Namespace) -> int:
    shipped = json.loads(Path(args.shipped).read_text(encoding="utf-8"))["methods"][args.shipped_method]
    candidate_file = json.loads(Path(args.candidate).read_text(encoding="utf-8"))
    candidate = candidate_file["methods"][args.candidate_method]
    fitted = json.loads(Path(args.fit).read_text(encoding="utf-8"))["final_temperature"]
    verdict = judge(shipped, candidate, fitted)
    verdict.update({"command": " ".join(["python", "bench/reader/final_temperature.py", *sys.argv[1:]]),
                    "shipped": f"{args.shipped} ({args.shipped_method})", "candidate": f"{args.candidate} ({args.candidate_method})",
                    "candidate_command": candidate_file["meta"]["command"], "final_temperature": fitted})
    write_report(args.out, verdict, render_verdict(verdict))
    return 0


def render_verdict(verdict: dict[str, Any]) -> str:
    a, b = verdict["figures"]["shipped"], verdict["figures"]["candidate"]
    rows = [("yes/no AUROC, mean", "noul_auroc"), ("yes/no NLL, mean", "noul_nll"), ("yes/no ECE, mean", "noul_ece"),
            ("its floor", "noul_ece_floor"), ("negation complement within 0.15", "negation_share_within"),
            ("yes/no = yes/no choice", "yes_no_vs_choice_agreement"), ("choice accuracy, bare", "choice_accuracy_bare"),
            ("choice accuracy, described", "choice_accuracy_described"), ("choice NLL, mean (bare)", "choice_nll"),
            ("choice ECE, mean", "choice_ece"), ("its floor", "choice_ece_floor")]
    def fmt(value: float | None) -> str:
        return "—" if value is None else f"{value:.4f}"

    lines = ["# The final temperature on bench/general: the rule's verdict", "",
             f"Rule: [rule_final_temperature.md](rule_final_temperature.md). Final temperature: {verdict['final_temperature']}.",
             f"Shipped: `{verdict['shipped']}`. Candidate: `{verdict['candidate']}`, run with `{verdict['candidate_command']}`.",
             f"Verdict: `{verdict['command']}`.", "",
             "| untaught questions | shipped mini | candidate |", "|---|---:|---:|"]
    lines += [f"| {name} | {fmt(a[key])} | {fmt(b[key])} |" for name, key in rows]
    lines += ["", ("Check of the run: every ranking, accuracy and agreement equal, so the runs are comparable."
                   if verdict["comparable"] else "Check of the run failed, so nothing is judged: " + "; ".join(verdict["moved"][:10])), ""]
    for kind in KINDS:
        checks = verdict.get("checks", {}).get(kind, [])
        said = "; ".join(f"{c['check']}: {'yes' if c['holds'] else 'no'}" for c in checks)
        lines.append(f"- **{kind}: {'ships' if verdict['ships'][kind] else 'does not ship'}**" + (f" ({said})." if said else "."))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- reported, not judged

READER_TEST_SETS = ("when2call", "mnli_taxinli", "dnc_recast", "pubmedqa")
"""Test splits of bench/quality whose questions mini's reader answers (sets it trained on, or when2call)."""


def quality_rows(model_ref: str, sets: list[str]) -> dict[str, dict[str, Any]]:
    """Per set and question type: the records the reader answered, accuracy, NLL and ECE of what the model answers."""
    from clef_agents.model import ClefDecisionModel
    from clef_agents.train.datasets import load_records
    from clef_agents.train.evaluate import evaluate_records

    model = ClefDecisionModel.from_pretrained(model_ref)
    out: dict[str, dict[str, Any]] = {}
    for name in sets:
        report = evaluate_records(model, load_records(name, "test", seed=0), with_uncalibrated=False, progress=False)
        out[name] = {kind: {"reader_questions": entry.get("reader_questions", 0),
                            **{k: entry["calibrated"][k] for k in ("n", "accuracy", "nll", "ece")}}
                     for kind, entry in report.items()}
    return out


def run_quality(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    started = time.time()
    result = {"command": " ".join(["python", "bench/reader/final_temperature.py", *sys.argv[1:]]),
              "models": {"shipped": args.shipped_model, "candidate": args.candidate_model},
              "shipped": quality_rows(args.shipped_model, args.sets), "candidate": quality_rows(args.candidate_model, args.sets)}
    result["wall_s"] = round(time.time() - started, 1)
    write_report(args.out, result, render_quality(result))
    return 0


def render_quality(result: dict[str, Any]) -> str:
    lines = ["# The final temperature on bench/quality's reader-answered test splits (reported, not judged)", "",
             (f"Command: `{result['command']}` ({result['wall_s']:.0f} s). Shipped: `{result['models']['shipped']}`; "
              f"candidate: `{result['models']['candidate']}`. These sets' questions are not taught, so the reader answers them "
              "(with the head mixed in, as the model answers); the reader trained on other rows of all but when2call."), "",
             "| set | type | n | read by the reader | accuracy | NLL, shipped | NLL, candidate | ECE, shipped | ECE, candidate |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, kinds in result["shipped"].items():
        for kind, a in kinds.items():
            b = result["candidate"][name][kind]
            lines.append(f"| {name} | {kind} | {a['n']} | {a['reader_questions']} | {a['accuracy']:.3f} | {a['nll']:.4f} | "
                         f"{b['nll']:.4f} | {a['ece']:.4f} | {b['ece']:.4f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    fit = sub.add_parser("fit", help="fit the temperatures on the probe and write the candidate")
    fit.add_argument("--model", default="mini", help="the shipped checkpoint (default mini)")
    fit.add_argument("--rows", type=int, default=300, help="rows per probe set (default 300, as the reader's probe)")
    fit.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    fit.add_argument("--cache", default=None, help="JSON file keeping the probe's answers between runs")
    fit.add_argument("--write", default=None, help="write the candidate checkpoint to this folder")
    fit.add_argument("--out", default=str(HERE / "final_temperature"), help="output stem")
    fit.set_defaults(func=run_fit)
    verdict = sub.add_parser("verdict", help="the rule's verdict from two bench/general results")
    verdict.add_argument("--shipped", default=str(ROOT / "bench/general/results_ece_floor/results.json"))
    verdict.add_argument("--shipped-method", default="mini")
    verdict.add_argument("--candidate", default=str(ROOT / "bench/general/results_final_temperature/results.json"))
    verdict.add_argument("--candidate-method", default="mini_final_temperature")
    verdict.add_argument("--fit", default=str(HERE / "final_temperature.json"), help="the fit's report (its final temperature)")
    verdict.add_argument("--out", default=str(HERE / "final_temperature_verdict"), help="output stem")
    verdict.set_defaults(func=run_verdict)
    quality = sub.add_parser("quality", help="reported, not judged: both models on the reader-answered test splits")
    quality.add_argument("--shipped-model", default="mini")
    quality.add_argument("--candidate-model", default="runs/mini_final_temperature")
    quality.add_argument("--sets", nargs="+", default=list(READER_TEST_SETS))
    quality.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    quality.add_argument("--out", default=str(HERE / "final_temperature_quality"), help="output stem")
    quality.set_defaults(func=run_quality)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
