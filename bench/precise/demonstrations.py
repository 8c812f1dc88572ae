"""Prompt levers for the precise tier, each judged once on the reader probe's yes/no items by a rule written and
committed before its measurement:

- ``--lever examples`` (rule_demonstrations.md): the worked examples of ``demonstrations.json`` before every
  state, as earlier chat turns (``LMSettings.demonstrations``);
- ``--lever questions-first`` (rule_questions_first.md): the request's questions listed before the state too
  (``LMSettings.questions_first``);
- ``--lever both-forms`` (rule_both_forms.md): the yes/no question also read as the choice ``yes`` / ``no``, the two
  corrected margins averaged (only the choice form is read; the yes/no form is the recorded one); with
  ``--replicate``, once more on fresh probe items, both forms read (``both_forms_replication.{json,md}``).

The shipped margin on the same 180 items is the one recorded in ``noul_adapter.json`` (stop 36); the judge checks
that its items are those, in order, and reads the margins with the lever.

Run:
    OMP_NUM_THREADS=1 CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/precise/demonstrations.py --threads 2
    OMP_NUM_THREADS=1 CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/precise/demonstrations.py --lever questions-first --threads 2
Writes bench/precise/demonstrations_judge.{json,md} or questions_first_judge.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from bench.precise.noul_adapter import (  # stop 36's thresholds, unchanged
    ADOPT_MARGIN,
    MIN_ITEMS,
    PROBE_ROWS,
    SHIPPED_NOUL_CORRECTION,
    beats_shipped,
)
from bench.reports import write_report

EXAMPLES = HERE / "demonstrations.json"
RECORDED = HERE / "noul_adapter.json"

LEVERS = {"examples": ("rule_demonstrations.md", "demonstrations_judge", "Worked examples before the state"),
          "questions-first": ("rule_questions_first.md", "questions_first_judge", "The questions listed before the state"),
          "both-forms": ("rule_both_forms.md", "both_forms_judge", "A yes/no question read in both its forms")}
"""Per lever: its rule, its report's stem and its report's title."""


def load_examples(path: Path = EXAMPLES) -> list[Any]:
    """The frozen worked examples, validated."""
    from clef_agents.model.precise import Demonstration

    return [Demonstration.model_validate(d) for d in json.loads(path.read_text(encoding="utf-8"))]


def recorded_rows(items: list, path: Path = RECORDED) -> list[dict[str, Any]]:
    """Stop 36's rows for the same probe items; refuses if the items are not the recorded ones, in order."""
    rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    found = [(m["dataset"], m["form"], int(g == 0)) for _, _, g, m in items]
    kept = [(r["dataset"], r["form"], r["yes"]) for r in rows]
    if found != kept:
        first = next((i for i, (a, b) in enumerate(zip(found, kept)) if a != b), min(len(found), len(kept)))
        raise SystemExit(f"the probe's yes/no items differ from those recorded in {path.name} (item {first}; "
                         f"{len(found)} items here, {len(kept)} recorded): the shipped margin would have to be read again")
    return rows


def judge(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from clef_agents import wire
    from clef_agents.model.config import Calibration
    from clef_agents.model.precise import LMSettings, PrefillLM, settings_path
    from clef_agents.train.reader_probe import probe_items

    torch.set_num_threads(args.threads)
    started = time.time()
    items = [item for item in probe_items(rows_per_set=PROBE_ROWS) if isinstance(item[1], wire.Noul)]
    shipped = LMSettings.model_validate_json(settings_path("precise").read_text())
    if args.replicate:
        return replicate(args, items, shipped, started)
    recorded = recorded_rows(items)
    lever = {"examples": {"demonstrations": load_examples()}, "questions-first": {"questions_first": True}}.get(args.lever, {})
    lm = PrefillLM.load("precise", calibration=Calibration(), prior_correction={}, answer=shipped.answer, **lever)
    form = wire.yes_no_choice if args.lever == "both-forms" else None
    rows = [reads[0] for reads in read_forms(lm, items, [form], "probe")]
    merged = [{"shipped_raw": old["raw"], "shipped_prior": old["prior"], **lever_fields(args.lever, old, new, shipped),
               "yes": old["yes"], "dataset": old["dataset"], "form": old["form"]} for old, new in zip(recorded, rows)]
    rule, stem, title = LEVERS[args.lever]
    return finish(args, lm, merged, started, {"title": title, "rule": rule}, HERE / stem)


def read_forms(lm: Any, items: list, forms: list[Any], desc: str) -> list[list[dict[str, float]]]:
    """Per item, per form (a function of the question, or None for the question itself): its yes/no margin and its
    prior's, every form of a state's items read on that state's one prefix."""
    from tqdm import tqdm

    from bench.precise.answer_probe import by_state

    out: list[list[dict[str, float]]] = [[] for _ in items]
    for group in tqdm(by_state(items), desc=desc, unit="state", mininterval=30):
        asked = [form(items[i][1]) if form else items[i][1] for form in forms for i in group]
        raw = lm.raw_logits(items[group[0]][0], asked)[0]
        for k, (question, z) in enumerate(zip(asked, raw)):
            out[group[k % len(group)]].append({"raw": yes_margin(z), "prior": yes_margin(lm.prior_logits(question))})
    return out


def finish(args: argparse.Namespace, lm: Any, merged: list[dict[str, Any]], started: float, about: dict[str, Any],
           stem: Path) -> dict[str, Any]:
    """The verdict on ``merged`` rows, with the run's command, the LM's prompt head and the timing, written to ``stem``."""
    result = verdict(merged, args.lever)
    result.update({"command": " ".join(["python", "bench/precise/demonstrations.py", *sys.argv[1:]]), "lever": args.lever,
                   **about, "examples": len(lm.demonstrations), "head_tokens": lm.head_tokens(), "items": len(merged),
                   "seconds": round(time.time() - started)})
    write_report(args.out or stem, {**result, "rows": merged}, report(result))
    return result


def replicate(args: argparse.Namespace, judged: list, shipped: Any, started: float) -> dict[str, Any]:
    """The both-forms comparison once more, on fresh probe items (seed 1, no state judged before): the shipped yes/no
    margin and the choice form read on the same prefixes (rule_both_forms.md, "Replication")."""
    from clef_agents import wire
    from clef_agents.model.config import Calibration
    from clef_agents.model.precise import PrefillLM
    from clef_agents.train.reader_probe import probe_items

    if args.lever != "both-forms":
        raise SystemExit("--replicate repeats the both-forms comparison only (--lever both-forms)")
    seen = {state for state, _, _, _ in judged}
    items = [item for item in probe_items(rows_per_set=PROBE_ROWS, seed=1) if isinstance(item[1], wire.Noul) and item[0] not in seen]
    lm = PrefillLM.load("precise", calibration=Calibration(), prior_correction={}, answer=shipped.answer)
    reads = read_forms(lm, items, [None, wire.yes_no_choice], "replication")
    merged = [{"shipped_raw": noul["raw"], "shipped_prior": noul["prior"], **lever_fields("both-forms", noul, choice, shipped),
               "yes": int(item[2] == 0), "dataset": item[3]["dataset"], "form": item[3]["form"]}
              for item, (noul, choice) in zip(items, reads)]
    about = {"title": "A yes/no question read in both its forms, replicated on fresh items", "rule": "rule_both_forms.md",
             "replicated": True}
    return finish(args, lm, merged, started, about, HERE / "both_forms_replication")


def yes_margin(logits: Any) -> float:
    """A yes/no read's margin: the noul's one logit, or the ``yes`` / ``no`` choice's first less its second."""
    values = logits.reshape(-1).tolist()
    return float(values[0] - values[1]) if len(values) == 2 else float(values[0])


def lever_fields(lever: str, old: dict[str, Any], new: dict[str, Any], shipped: Any) -> dict[str, float]:
    """The lever's raw margin and prior for one item, such that ``raw − 0.5 × prior`` is its answer. For both forms
    that is the mean of the yes/no form as shipped and the choice form corrected as shipped choices are."""
    if lever != "both-forms":
        return {"lever_raw": new["raw"], "lever_prior": new["prior"]}
    weight = shipped.prior_correction.get("choice", 0.0) / SHIPPED_NOUL_CORRECTION
    return {"lever_raw": (old["raw"] + new["raw"]) / 2, "lever_prior": (old["prior"] + weight * new["prior"]) / 2,
            "choice_raw": new["raw"], "choice_prior": new["prior"]}


def verdict(rows: list[dict[str, Any]], lever: str) -> dict[str, Any]:
    """The rule's comparison: per-set and negated-form AUROC, shipped against the lever."""
    from bench.precise.answer_probe import auroc_table

    candidate = f"{lever} (raw − 0.5 prior)"
    scores = {"shipped (raw − 0.5 prior)": [r["shipped_raw"] - SHIPPED_NOUL_CORRECTION * r["shipped_prior"] for r in rows],
              candidate: [r["lever_raw"] - SHIPPED_NOUL_CORRECTION * r["lever_prior"] for r in rows],
              f"{lever} (raw)": [r["lever_raw"] for r in rows]}
    negated = [i for i, r in enumerate(rows) if r["form"].endswith("negated")]
    table = auroc_table(scores, [r["yes"] for r in rows], [r["dataset"] for r in rows], negated, MIN_ITEMS)
    adopted = beats_shipped(table["shipped (raw − 0.5 prior)"], table[candidate])
    return {"table": table, "negated_items": len(negated), "adopted": adopted}


def report(result: dict[str, Any]) -> str:
    from bench.precise.answer_probe import auroc_table_lines

    lines = [f"# {result['title']} (precise tier), judged on the reader probe", "",
             (f"Command: `{result['command']}` ({result['items']} probe yes/no items, {result['examples']} worked examples, "
              f"{result['head_tokens']} tokens of prompt before each state, {result['seconds']} s). Rule: "
              f"[{result['rule']}]({result['rule']}), written before any measurement; "
              + ("the shipped margin was read in the same run, on the same prefixes." if result.get("replicated") else
                 "the shipped margin is stop 36's on the same items ([noul_adapter.json](noul_adapter.json)).")), ""]
    lines += auroc_table_lines(result["table"])
    lines += ["", (f"Negated forms: {result['negated_items']} items. Adopted ({result['lever']} ≥ shipped + {ADOPT_MARGIN} and "
                   f"higher on negated forms): **{'yes' if result['adopted'] else 'no'}**.")]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lever", choices=sorted(LEVERS), default="examples", help="the prompt lever judged (default examples)")
    parser.add_argument("--out", default=None, help="report stem (default bench/precise/<lever's stem>)")
    parser.add_argument("--replicate", action="store_true",
                        help="both-forms only: repeat the comparison on fresh probe items, reading the shipped margin too")
    parser.add_argument("--threads", type=int, default=2)
    judge(parser.parse_args())


if __name__ == "__main__":
    main()
