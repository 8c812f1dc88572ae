"""The untaught-question benchmark's markdown page and plots, from its ``results.json``.

Run on a results file alone (no model needed): ``.venv/bin/python bench/general/report.py``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.general.tasks import WORDINGS  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"

TARGETS = [
    ("yes/no AUROC, mean over tasks and wordings", "noul", "auroc_mean", ">=", 0.90),
    ("yes/no AUROC, worst wording of any task", "noul", "auroc_worst_wording", ">=", 0.80),
    ("yes/no ECE of p(yes), mean", "noul", "ece_mean", "<=", 0.05),
    (
        "negation: share of items whose p(yes) for Q and for not-Q sum to 1 ± 0.15",
        "noul",
        "negation_share_within",
        ">=",
        0.90,
    ),
    ("yes/no vs the same question as a yes/no choice: same answer", "noul", "yes_no_vs_choice_agreement", ">=", 0.95),
    ("score: Spearman with the gold level, mean", "score", "spearman_mean", ">=", 0.60),
]
"""Issue 24's targets on the summary (the choice targets are relative to label_cosine: see the task table)."""


def fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def render(results: dict[str, Any], out: Path) -> None:
    """Write ``results.md`` and the plots into ``out``."""
    plots = write_plots(results, out)
    (out / "results.md").write_text(markdown(results, plots))


def markdown(results: dict[str, Any], plots: list[str]) -> str:
    meta, methods = results["meta"], results["methods"]
    keys = list(methods)
    lines = [
        "# Untaught questions: the held-out benchmark (issue 23)",
        "",
        f"Command: `{meta['command']}` — {meta['requests_per_method']} requests per method, "
        f"{meta['n_per_task']} rows a task (seed {meta['seed']}), {meta['wall_s']} s on {meta['machine']}, {meta['date']}.",
        f"Wordings: `{meta['tasks_file']}` (frozen before any measurement; sha256 `{meta['tasks_sha256'][:16]}…`).",
        "Every question is asked alone in its own request. Tasks whose data set a model trained on are measured but marked",
        "*seen* and left out of that model's means. The held-out / trainable split of every staged set is at the end.",
        "",
        "## Summary (means over untaught tasks)",
        "",
        "| | " + " | ".join(keys) + " |",
        "|---|" + "---:|" * len(keys),
    ]
    rows = [
        ("yes/no tasks", "noul", "tasks"),
        ("yes/no AUROC, mean of wording means", "noul", "auroc_mean"),
        ("yes/no AUROC, worst wording", "noul", "auroc_worst_wording"),
        ("yes/no wordings below 0.8 / inverted (< 0.5)", "noul", None),
        ("yes/no ECE of p(yes)", "noul", "ece_mean"),
        ("yes/no ECE if these answers were perfectly calibrated (floor)", "noul", "ece_floor_mean"),
        ("yes/no NLL of p(yes)", "noul", "nll_mean"),
        ("negation complement within 0.15", "noul", "negation_share_within"),
        ("yes/no = same question as yes/no choice", "noul", "yes_no_vs_choice_agreement"),
        ("choice tasks", "choice", "tasks"),
        ("choice accuracy, bare option names", "choice", "accuracy_bare"),
        ("choice accuracy, with descriptions", "choice", "accuracy_described"),
        ("choice ECE", "choice", "ece_mean"),
        ("choice ECE if perfectly calibrated (floor)", "choice", "ece_floor_mean"),
        ("score tasks", "score", "tasks"),
        ("score Spearman, mean of wording means", "score", "spearman_mean"),
        ("score Spearman, worst wording", "score", "spearman_worst_wording"),
        ("score complement within 0.15", "score", "complement_share_within"),
    ]
    for title, kind, field in rows:
        cells = []
        for key in keys:
            summary = methods[key]["summary"][kind]
            if field is None:
                cells.append(
                    f"{summary['wordings_below_0.8']} / {summary['wordings_inverted']} of {summary['wordings']}"
                )
            else:
                cells.append(fmt(summary.get(field, float("nan"))))
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    seen = {key: methods[key]["summary"]["seen_tasks"] for key in keys if methods[key]["summary"]["seen_tasks"]}
    if seen:
        lines += [
            "",
            "Seen in training (measured, not in the means): "
            + "; ".join(f"{k}: {', '.join(v)}" for k, v in seen.items())
            + ".",
        ]
    taught = {
        key: methods[key]["info"].get("taught_answers")
        for key in keys
        if methods[key]["info"].get("taught_answers") is not None
    }
    if taught:
        lines += [
            "",
            "Answers that came from a taught question (should be 0): "
            + ", ".join(f"{k} {v}" for k, v in taught.items())
            + ".",
        ]
    lines += ["", "## Issue 24's targets", "", "| target | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
    for title, kind, field, op, bound in TARGETS:
        cells = []
        for key in keys:
            value = methods[key]["summary"][kind][field]
            met = not math.isnan(value) and (value >= bound if op == ">=" else value <= bound)
            cells.append(f"{fmt(value)} {'✓' if met else '✗'}")
        lines.append(f"| {title} {op} {bound} | " + " | ".join(cells) + " |")
    if any("ece_floor_mean" in methods[key]["summary"]["noul"] for key in keys):
        lines += [
            "",
            (
                f"ECE is binned (15 bins) on {meta['n_per_task']} answers per task and wording, and on so few it is biased "
                "upward: the floor row is the mean ECE the same answers would score if they were perfectly calibrated "
                "(outcomes drawn from their own probabilities). Compare an ECE with its floor, and NLL between methods."
            ),
        ]
    lines += lane_table(methods)
    lines += ["", "## Per task", ""] + task_tables(results)
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    lines += [
        "",
        "## Held-out / trainable split (`clef_agents.train.split`)",
        "",
        "| set | role | kinds | shipped model may train | leave-one-out | why |",
        "|---|---|---|---|---|---|",
    ]
    for row in meta["split"]:
        lines.append(
            f"| {row['name']} | {row['role'].replace('_', '-')} | {', '.join(row['kinds'])} | {fmt(row['shippable'])} | "
            f"{row['leave_one_out'] or ''} | {row['reason']} |"
        )
    return "\n".join(lines) + "\n"


LANE_ROWS = [
    ("decided automatically (p ≥ 0.9)", "auto_share"),
    ("accuracy of the automatic answers", "auto_accuracy"),
    ("automatic and wrong, share of all answers", "auto_wrong_share"),
    ("sent to an LLM (0.5 ≤ p < 0.9)", "llm_share"),
    ("sent to a human (p < 0.5)", "human_share"),
    ("AUROC of p for right vs wrong answers", "confidence_auroc"),
]


def lane_table(methods: dict[str, Any]) -> list[str]:
    """Where the graph layer's default lanes would send the untaught answers (results from before stop 41 have
    no lane counts: no table then)."""
    keys = [key for key in methods if "lanes" in methods[key]["summary"]["noul"]]
    if not keys:
        return []
    lines = [
        "",
        "## The gate's default lanes on untaught questions",
        "",
        (
            "What the default lanes make of these answers: act on its own at a decision probability "
            "(the top option's) of 0.9 or more, ask an LLM from 0.5, a human below. Pooled over the untaught tasks and "
            "their five wordings (choices with bare option names). A model that is unsure and says so sends its answers "
            "on; one that is wrong and sure would act wrongly by itself: the third row. (A `DecisionNode` holds answers "
            "the model says are untaught out of the automatic lane unless `untaught_auto=True`; this table scores the "
            "model, not that hold.)"
        ),
        "",
        "| type | lane | " + " | ".join(keys) + " |",
        "|---|---|" + "---:|" * len(keys),
    ]
    for kind, title in (("noul", "yes/no"), ("choice", "choice"), ("score", "score")):
        for label, field in LANE_ROWS:
            cells = [fmt(methods[key]["summary"][kind]["lanes"][field]) for key in keys]
            lines.append(f"| {title} | {label} | " + " | ".join(cells) + " |")
    return lines


def task_tables(results: dict[str, Any]) -> list[str]:
    """One table per question type: the headline metric per wording for every method."""
    methods = results["methods"]
    keys = list(methods)
    first = methods[keys[0]]["tasks"]
    lines: list[str] = []
    for kind, label in (("noul", "AUROC"), ("choice", "accuracy"), ("score", "Spearman")):
        tasks = [t["task"] for t in first if t["type"] == kind]
        if not tasks:
            continue
        columns = (
            list(WORDINGS)
            + (["described mean"] if kind == "choice" else [])
            + ["mean", "spread", "NLL", "ECE", "coherence"]
        )
        lines += [
            f"### {kind}: {label} per wording",
            "",
            "| task | method | " + " | ".join(columns) + " |",
            "|---|---|" + "---:|" * len(columns),
        ]
        for task_id in tasks:
            for key in keys:
                t = next(x for x in methods[key]["tasks"] if x["task"] == task_id)
                metric = t["headline"]
                cells = [fmt(t["variants"][w][metric]) for w in WORDINGS]
                if kind == "choice":
                    cells.append(fmt(t["over_wordings_described"]["mean"]))
                cells += [
                    fmt(t["over_wordings"]["mean"]),
                    fmt(t["over_wordings"]["spread"]),
                    fmt(t.get("nll_over_wordings", {}).get("mean", float("nan"))),
                    fmt(t["ece_over_wordings"]["mean"]),
                    coherence_cell(t),
                ]
                name = f"{task_id} (seen)" if t.get("seen") else task_id
                lines.append(f"| {name} | {key} | " + " | ".join(cells) + " |")
        lines += [""]
    lines += [
        "Coherence: yes/no — share of items whose negation complement gap is within 0.15, and agreement with the same",
        "question as a yes/no choice; score — share within 0.15 of the reversed ladder's complement; choice —",
        "agreement of bare names with described options (plain wording). Coherence is necessary, not sufficient:",
        "label_cosine never reads the question, so it is coherent by construction, and a model that answers every",
        "ladder with the middle level passes the score complement; read it beside the headline metric.",
    ]
    return lines


def coherence_cell(task: dict[str, Any]) -> str:
    c = task["coherence"]
    if "negation" in c:
        return f"neg {fmt(c['negation']['share_within'], 2)}, choice {fmt(c['yes_no_vs_choice_agreement'], 2)}"
    if "score_complement" in c:
        return f"compl {fmt(c['score_complement']['share_within'], 2)}"
    return f"bare=desc {fmt(c['bare_vs_described_agreement'], 2)}"


def write_plots(results: dict[str, Any], out: Path) -> list[str]:
    """headline.png (per task: mean over wordings, bars from worst to best wording) and
    coherence.png (the coherence relations per task); returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = results["methods"]
    keys = list(methods)
    first = methods[keys[0]]["tasks"]
    kinds = [k for k in ("noul", "choice", "score") if any(t["type"] == k for t in first)]
    fig, axes = plt.subplots(1, len(kinds), figsize=(6 * len(kinds), 6), squeeze=False)
    width = 0.8 / len(keys)
    for ax, kind in zip(axes[0], kinds):
        tasks = [t["task"] for t in first if t["type"] == kind]
        for j, key in enumerate(keys):
            rows = [next(x for x in methods[key]["tasks"] if x["task"] == name) for name in tasks]
            means = [r["over_wordings"]["mean"] for r in rows]
            low = [max(0.0, r["over_wordings"]["mean"] - r["over_wordings"]["min"]) for r in rows]
            high = [max(0.0, r["over_wordings"]["max"] - r["over_wordings"]["mean"]) for r in rows]
            ys = [i + (j - (len(keys) - 1) / 2) * width for i in range(len(tasks))]
            ax.barh(ys, means, height=width, xerr=[low, high], capsize=2, label=key)
        ax.set_yticks(
            range(len(tasks)),
            [
                f"{t}*" if any(x["task"] == t and x.get("seen") for m in keys for x in methods[m]["tasks"]) else t
                for t in tasks
            ],
        )
        ax.invert_yaxis()
        metric = {"noul": "AUROC", "choice": "accuracy (bare names)", "score": "Spearman"}[kind]
        ax.set_xlabel(f"{metric}: mean over 5 wordings, bar = worst..best")
        if kind == "noul":
            ax.axvline(0.5, color="grey", lw=0.8, ls=":")
        ax.set_title(kind)
    axes[0][0].legend(loc="lower right")
    fig.suptitle("Untaught questions (* = a model trained on this data set)")
    fig.tight_layout()
    fig.savefig(out / "headline.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 5))
    rows_of = []
    for t in first:
        if t["type"] == "noul":
            rows_of += [
                (f"{t['task']} neg", t["task"], ("negation", "share_within")),
                (f"{t['task']} y/n=choice", t["task"], ("yes_no_vs_choice_agreement",)),
            ]
        elif t["type"] == "score":
            rows_of.append((f"{t['task']} compl", t["task"], ("score_complement", "share_within")))
    for j, key in enumerate(keys):
        values = []
        for _, task_id, path in rows_of:
            node: Any = next(x for x in methods[key]["tasks"] if x["task"] == task_id)["coherence"]
            for part in path:
                node = node[part]
            values.append(node)
        ax.bar([i + (j - (len(keys) - 1) / 2) * width for i in range(len(rows_of))], values, width=width, label=key)
    ax.set_xticks(range(len(rows_of)), [r[0] for r in rows_of], rotation=75, ha="right", fontsize=7)
    ax.set_ylabel("share of items coherent")
    ax.axhline(0.9, color="grey", lw=0.8, ls=":")
    ax.legend()
    ax.set_title("Coherence: negation complement, yes/no = yes/no choice, score complement")
    fig.tight_layout()
    fig.savefig(out / "coherence.png", dpi=110)
    plt.close(fig)
    return ["headline.png", "coherence.png"]


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS_DIR
    render(json.loads((folder / "results.json").read_text()), folder)
    print(f"wrote {folder}/results.md and plots")
