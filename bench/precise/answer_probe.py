"""A yes/no probe for the precise tier: read the answer from the LM's hidden states, not only its yes/no tokens.

The precise tier answers a yes/no question by the next-token mass of "yes" against "no". On questions
nobody taught it, that answer often ignores the wording: Qwen2.5-Coder-1.5B says "yes" to both "Is this
urgent?" and "Is this not urgent?" about the same outage. A linear probe on the hidden states at the answer
cue (several layers) is trained here on yes/no questions whose answers are known, and checked on
questions about data sets it never saw.

Steps (rules in ``bench/precise/rule_answer_probe.md``, written before any measurement):

- ``features``: hidden states at the answer cue for
  - training: the reader recipe's yes/no questions on trainable sets (the reader probe's sets left out)
    and the written reading questions' training items;
  - the reader probe's yes/no questions (sets never trained on), with the shipped margin and its prior.
- ``fit``: layers and regularisation chosen by leave-one-source-out AUROC on the training items only; the
  chosen probe is then compared once with the shipped margin on the reader probe; ``--write`` saves it
  beside the precise settings.

Run:
    CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/precise/answer_probe.py features --out runs/answer_probe/features.pt
    .venv/bin/python bench/precise/answer_probe.py fit --features runs/answer_probe/features.pt [--write runs/answer_probe/precise]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.reports import write_report

HERE = Path(__file__).resolve().parent
LAYERS = (8, 14, 20, 24, 28)
"""Layers read (Qwen2.5-1.5B has 28; 28 is the last, after its norm, from which the yes/no margin comes)."""
LAYER_SETS = ((28,), (20,), (24,), (20, 24, 28), (14, 20, 24, 28), (8, 14, 20, 24, 28))
L2_GRID = (1e-3, 1e-2, 1e-1, 1.0)
SHIPPED_NOUL_CORRECTION = 0.5
"""precise's yes/no prior correction (clef_lm.json), the margin the probe must beat."""
PROBE_MIN_ITEMS = 20
ADOPT_MARGIN = 0.02


def training_records(per_set: int, seed: int, exclude: Any = None) -> list[dict[str, Any]]:
    """Yes/no training records: the reader recipe's on trainable sets (none of ``exclude``, by default the reader
    probe's sets; no set whose licence keeps it out of a shipped model) and the written reading questions'
    training items."""
    from clef_agents.train.reader_data import READER_SETS, reader_records
    from clef_agents.train.reader_questions import written_records
    from clef_agents.train.split import READER_PROBE, check_trainable

    left_out = set(READER_PROBE if exclude is None else exclude)
    sets = [name for name in READER_SETS if name not in left_out]
    check_trainable(sets, shipped=True)
    records = reader_records("train", per_set=per_set, seed=seed, sets=sets, version=2) + written_records("train")
    return [r for r in records if r["questions"]["q"]["type"] == "noul"]


def by_state(items: list[tuple[str, Any, int, dict[str, str]]]) -> list[list[int]]:
    """Item indices grouped by state (one prefill per state)."""
    groups: dict[str, list[int]] = {}
    for i, (state, _, _, _) in enumerate(items):
        groups.setdefault(state, []).append(i)
    return list(groups.values())


def extract(lm: Any, items: list, groups: list[list[int]], deadline: float, with_prior: bool, desc: str) -> dict[str, Any]:
    """Features of each group's items until ``deadline``: hidden states ``[n, layers, hidden]`` (float16),
    margins, gold (1 = yes), meta, and (``with_prior``) the question's prior margin."""
    import torch
    from tqdm import tqdm

    rows: dict[str, list] = {"features": [], "margin": [], "prior": [], "yes": [], "meta": []}
    last = len(LAYERS) - 1
    for group in tqdm(groups, desc=desc, unit="state", mininterval=30):
        if time.time() > deadline:
            break
        questions = [items[i][1] for i in group]
        hidden = lm.answer_states(items[group[0]][0], questions, LAYERS)
        margins = lm.margins_from_states(hidden[:, last])
        for k, i in enumerate(group):
            rows["features"].append(hidden[k].half())
            rows["margin"].append(float(margins[k]))
            rows["prior"].append(float(lm.prior_logits(items[i][1])[0]) if with_prior else 0.0)
            rows["yes"].append(int(items[i][2] == 0))
            rows["meta"].append(items[i][3])
    rows["features"] = torch.stack(rows["features"]) if rows["features"] else torch.empty(0)
    return rows


def features(args: argparse.Namespace) -> None:
    import torch

    from clef_agents import wire
    from clef_agents.model.config import Calibration
    from clef_agents.model.precise import PrefillLM
    from clef_agents.train.reader import typed_items
    from clef_agents.train.reader_probe import probe_items

    torch.set_num_threads(args.threads)
    started = time.time()
    lm = PrefillLM.load("precise", calibration=Calibration(), answer="name", prior_correction={})
    probe = [item for item in probe_items(rows_per_set=args.probe_rows) if isinstance(item[1], wire.Noul)]
    records = training_records(args.per_set, args.seed)
    train = [(s, q, g, {"dataset": r["meta"]["dataset"], "form": r["meta"]["form"]})
             for (s, q, g), r in zip(typed_items(records), records)]
    groups = by_state(train)
    random.Random(args.seed).shuffle(groups)
    out = {"layers": list(LAYERS), "started": started}
    out["probe"] = extract(lm, probe, by_state(probe), float("inf"), True, "probe")
    out["train"] = extract(lm, train, groups, started + args.seconds, False, "train")
    out["seconds"] = time.time() - started
    out["train_available"] = len(train)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(out, args.out)
    print(f"{len(out['probe']['yes'])} probe and {len(out['train']['yes'])} of {len(train)} training items in "
          f"{out['seconds']:.0f} s -> {args.out}")


def layer_states(states: Any, layers: tuple[int, ...]) -> Any:
    """The extracted states ``[n, len(LAYERS), hidden]`` restricted to ``layers``."""
    return states[:, [LAYERS.index(layer) for layer in layers]].float()


def per_source_auroc(scores: list[float], yes: list[int], sources: list[str], min_items: int) -> dict[str, float]:
    """AUROC of ``scores`` on each source with at least ``min_items`` items and both answers."""
    from clef_agents.train.metrics import auroc

    out = {}
    for source in sorted(set(sources)):
        picked = [i for i, s in enumerate(sources) if s == source]
        value = auroc([scores[i] for i in picked], [yes[i] for i in picked])
        if len(picked) >= min_items and not math.isnan(value):
            out[source] = value
    return out


def auroc_table(scores: dict[str, list[float]], yes: list[int], sources: list[str], negated: list[int],
                min_items: int) -> dict[str, dict[str, Any]]:
    """Per named margin: AUROC on each source (``per_source_auroc``), their mean, and AUROC on the items
    ``negated`` (indices; NaN when there are none)."""
    from clef_agents.train.metrics import auroc

    table = {}
    for name, values in scores.items():
        per_set = per_source_auroc(values, yes, sources, min_items)
        table[name] = {"mean": round(sum(per_set.values()) / len(per_set), 4) if per_set else float("nan"),
                       "sets": {k: round(v, 4) for k, v in per_set.items()},
                       "negated": round(auroc([values[i] for i in negated], [yes[i] for i in negated]), 4) if negated else float("nan")}
    return table


def auroc_table_lines(table: dict[str, dict[str, Any]]) -> list[str]:
    """``auroc_table`` as markdown rows: each margin's mean over sets, negated forms and every set."""
    sets = sorted({s for row in table.values() for s in row["sets"]})
    lines = ["| margin | mean AUROC over sets | negated forms | " + " | ".join(sets) + " |", "|---|---:|---:|" + "---:|" * len(sets)]
    for name, row in table.items():
        lines.append(f"| {name} | {row['mean']:.3f} | {row['negated']:.3f} | "
                     + " | ".join(f"{row['sets'].get(s, math.nan):.3f}" for s in sets) + " |")
    return lines


def leave_one_source_out(states: Any, yes: list[int], sources: list[str], layers: tuple[int, ...], l2: float) -> dict[str, float]:
    """Rule 1: AUROC on each training source of the probe fitted on every other source."""
    import torch

    from clef_agents.model.noul_probe import NoulProbe
    from clef_agents.train.metrics import auroc

    data = layer_states(states, layers)
    target = torch.tensor(yes)
    out = {}
    for source in sorted(set(sources)):
        held = torch.tensor([s == source for s in sources])
        if len(set(target[held].tolist())) < 2 or len(set(target[~held].tolist())) < 2:
            continue
        probe = NoulProbe.fit(data[~held], target[~held], layers, l2=l2, max_iter=100)
        out[source] = auroc(probe.logits(data[held]).tolist(), target[held].tolist())
    return out


def mean(values: Any) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def fit(args: argparse.Namespace) -> None:
    import torch

    from clef_agents.model.noul_probe import NoulProbe

    torch.set_num_threads(args.threads)
    data = torch.load(args.features, weights_only=False)
    train, probe = data["train"], data["probe"]
    sources = [m["dataset"] for m in train["meta"]]
    result: dict[str, Any] = {"features": str(args.features), "train_items": len(train["yes"]),
                              "train_sources": {s: sources.count(s) for s in sorted(set(sources))},
                              "probe_items": len(probe["yes"]), "loso": {}}
    result["train_margin_auroc"] = per_source_auroc(train["margin"], train["yes"], sources, 1)
    for layers in LAYER_SETS:
        for l2 in L2_GRID:
            scores = leave_one_source_out(train["features"], train["yes"], sources, layers, l2)
            result["loso"][f"{layers} {l2}"] = {"layers": list(layers), "l2": l2, "mean": mean(scores.values()), "per_source": scores}
            print(f"layers {layers} l2 {l2}: leave-one-source-out AUROC {mean(scores.values()):.3f}", flush=True)
    best = max(result["loso"].values(), key=lambda r: (round(r["mean"], 6), -len(r["layers"]), r["l2"]))
    layers, l2 = tuple(best["layers"]), best["l2"]
    chosen = NoulProbe.fit(layer_states(train["features"], layers), torch.tensor(train["yes"]), layers, l2=l2)
    probe_sets = [m["dataset"] for m in probe["meta"]]
    probe_logits = chosen.logits(layer_states(probe["features"], layers)).tolist()
    shipped = [m - SHIPPED_NOUL_CORRECTION * b for m, b in zip(probe["margin"], probe["prior"])]
    rows = {"shipped margin (raw - 0.5 prior)": shipped, "raw margin": probe["margin"], "probe": probe_logits}
    result["chosen"] = {"layers": list(layers), "l2": l2, "loso_mean": best["mean"]}
    result["reader_probe"] = {name: per_source_auroc(scores, probe["yes"], probe_sets, PROBE_MIN_ITEMS) for name, scores in rows.items()}
    negated = [i for i, m in enumerate(probe["meta"]) if "negated" in m["form"]]
    result["reader_probe_negated_forms"] = {
        name: per_source_auroc([scores[i] for i in negated], [probe["yes"][i] for i in negated], ["negated"] * len(negated), 1)
        for name, scores in rows.items()}
    means = {name: mean(by_set.values()) for name, by_set in result["reader_probe"].items()}
    result["reader_probe_mean"] = means
    result["adopted"] = means["probe"] >= means["shipped margin (raw - 0.5 prior)"] + ADOPT_MARGIN
    if result["adopted"] and args.write:
        result["written"] = write_probe(chosen, probe_logits, probe["yes"], args.write)
    out = args.out or HERE / "answer_probe"
    write_report(out, result, report(result))


def write_probe(probe: Any, logits: list[float], yes: list[int], folder: Path) -> dict[str, Any]:
    """Rule 4: precise's settings with the probe, written to ``folder`` (``clef_lm.json`` and the probe beside it;
    ``CLEF_AGENTS_LM_SETTINGS=folder/clef_lm.json`` loads them): yes/no Platt calibration fitted on the reader
    probe and no yes/no prior correction (the probe replaces the margin it corrected)."""
    import torch

    from clef_agents import wire
    from clef_agents.model.precise import NOUL_PROBE_FILE, LMSettings, settings_path
    from clef_agents.train.reader import fit_logit_calibration

    settings = LMSettings.model_validate_json(settings_path("precise").read_text())
    path = folder / "clef_lm.json"
    probe.save(folder / NOUL_PROBE_FILE)
    question = wire.Noul(instructions="?")
    fitted = fit_logit_calibration([question] * len(logits), [torch.tensor([z]) for z in logits], [1 - y for y in yes])
    calibration = settings.calibration.model_copy(update={
        "noul_a": fitted.noul_a, "noul_b": fitted.noul_b,
        "fitted_on": {**settings.calibration.fitted_on, "nouls": len(logits), "nouls_on": "reader probe, yes/no probe"}})
    correction = {k: v for k, v in settings.prior_correction.items() if k != "noul"}
    updated = settings.model_copy(update={"noul_probe": NOUL_PROBE_FILE, "calibration": calibration, "prior_correction": correction})
    path.write_text(updated.model_dump_json(indent=1) + "\n")
    return {"settings": str(path), "probe": NOUL_PROBE_FILE, "noul_a": fitted.noul_a, "noul_b": fitted.noul_b}


def report(result: dict[str, Any]) -> str:
    lines = ["# The precise tier's yes/no probe (`bench/precise/answer_probe.py`)", "",
             (f"Rule: `bench/precise/rule_answer_probe.md`. Features: `{result['features']}`; "
              f"{result['train_items']} training questions from {len(result['train_sources'])} sources, "
              f"{result['probe_items']} reader-probe questions."), "",
             "## Rule 1: leave one training source out (mean AUROC over sources)", "",
             "| layers | " + " | ".join(f"L2 {l2}" for l2 in L2_GRID) + " |", "|---|" + "---:|" * len(L2_GRID)]
    for layers in LAYER_SETS:
        lines.append(f"| {', '.join(map(str, layers))} | "
                     + " | ".join(f"{result['loso'][f'{layers} {l2}']['mean']:.3f}" for l2 in L2_GRID) + " |")
    chosen = result["chosen"]
    lines += ["", (f"Chosen: layers {chosen['layers']}, L2 {chosen['l2']}. The shipped margin on the same training "
                   f"sources, for comparison: mean AUROC {mean(result['train_margin_auroc'].values()):.3f}."), "",
              "## Rule 3: the reader probe (sets never trained on), yes/no AUROC", ""]
    sets = sorted({s for by_set in result["reader_probe"].values() for s in by_set})
    lines += ["| | " + " | ".join(sets) + " | mean | negated wordings |", "|---|" + "---:|" * (len(sets) + 2)]
    for name, by_set in result["reader_probe"].items():
        negated = result["reader_probe_negated_forms"][name].get("negated", float("nan"))
        lines.append(f"| {name} | " + " | ".join(f"{by_set.get(s, float('nan')):.3f}" for s in sets)
                     + f" | {result['reader_probe_mean'][name]:.3f} | {negated:.3f} |")
    lines += ["", f"Adopted (probe ≥ shipped + {ADOPT_MARGIN}): **{'yes' if result['adopted'] else 'no'}**."]
    if "written" in result:
        lines.append(f"Written: `{result['written']['probe']}` beside `{result['written']['settings']}`, Platt a = "
                     f"{result['written']['noul_a']:.3f}, b = {result['written']['noul_b']:.3f}.")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", required=True)
    f = sub.add_parser("features", help="hidden states at the answer cue of training and probe questions")
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--per-set", type=int, default=30, help="reader-recipe rows a set (yes/no questions are kept)")
    f.add_argument("--probe-rows", type=int, default=60)
    f.add_argument("--seconds", type=float, default=3600, help="stop reading training items after this long")
    f.add_argument("--seed", type=int, default=1)
    f.add_argument("--threads", type=int, default=2)
    g = sub.add_parser("fit", help="choose and fit the probe on training items, compare on the reader probe")
    g.add_argument("--features", type=Path, required=True)
    g.add_argument("--out", type=Path, default=None, help="report stem (default bench/precise/answer_probe)")
    g.add_argument("--write", type=Path, default=None, metavar="FOLDER",
                   help="if adopted, write precise's settings with the probe to FOLDER (clef_lm.json, noul_probe.safetensors)")
    g.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    {"features": features, "fit": fit}[args.step](args)


if __name__ == "__main__":
    main()
