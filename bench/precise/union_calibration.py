"""The precise tier's yes/no Platt fitted on the union of its two probes (rule_calibration_probe.md, stop 39).

Two steps:

- ``read``: the wide probe's yes/no items (``wide_probe_items(rows_per_set=30)``, the items the shipped Platt was
  fitted on) read with the shipped settings, in the yes/no form alone. Their raw and prior margins go to
  ``wide_probe_noul_rows.json`` (committed, so no later fit needs to read them again).
- ``fit``: Platt on the shipped margin (``raw − λ·prior``, λ as shipped) of every row of both probes (the wide
  rows and stop 37's reader-probe rows, ``both_forms_judge.json`` and ``both_forms_replication.json``), each row
  weighing the same. For the record only: each probe refitted alone, and each probe's Platt scored on the other.
  ``--settings-out`` writes the shipped settings with this Platt and nothing else changed.

Run:   OMP_NUM_THREADS=1 CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/precise/union_calibration.py read   (~1 h on 2 cores, float32)
       .venv/bin/python bench/precise/union_calibration.py fit --settings-out runs/precise_union/clef_lm.json  (a second)
Writes bench/precise/wide_probe_noul_rows.json (read) and bench/precise/union_calibration.{json,md} (fit).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.precise.both_forms_calibration import (
    ROW_FILES,
    fit,
    load_rows,
    margins,
    scored,
    write_platt_settings,
)
from bench.reports import write_report

HERE = Path(__file__).resolve().parent
WIDE_ROWS = HERE / "wide_probe_noul_rows.json"
WIDE_ROWS_PER_SET = 30
"""As in the shipped Platt's fit (``calibration_name_wide.json``)."""


def read_wide(args: argparse.Namespace) -> dict[str, Any]:
    """The wide probe's yes/no items read by shipped ``precise`` in the yes/no form: one row per item."""
    import torch

    from bench.precise.calibrate import probe_logits
    from clef_agents import wire
    from clef_agents.model.config import Calibration
    from clef_agents.model.precise import PrefillLM
    from clef_agents.train.reader_probe import wide_probe_items

    torch.set_num_threads(args.threads)
    lm = PrefillLM.load("precise", calibration=Calibration(), prior_correction={}, noul_both_forms=False)
    items = [item for item in wide_probe_items(rows_per_set=WIDE_ROWS_PER_SET) if isinstance(item[1], wire.Noul)]
    if args.limit:
        items = items[:args.limit]
    started = time.perf_counter()
    raw, priors = probe_logits(lm, items)
    rows = [{"shipped_raw": round(float(z[0]), 6), "shipped_prior": round(float(b[0]), 6), "yes": gold == 0,
             "dataset": meta["dataset"], "form": meta["form"]}
            for (_, _, gold, meta), z, b in zip(items, raw, priors)]
    command = ("OMP_NUM_THREADS=1 CLEF_AGENTS_DATA=../shared/data .venv/bin/python "
               "bench/precise/union_calibration.py")
    return {"command": " ".join([command, *sys.argv[1:]]),
            "lm": "precise", "precision": str(lm.model.dtype).removeprefix("torch."), "rows_per_set": WIDE_ROWS_PER_SET,
            "items": len(rows), "seconds": round(time.perf_counter() - started, 1), "rows": rows}


def run_fit(args: argparse.Namespace) -> dict[str, Any]:
    """Rule step 1 (the candidate) and step 2 (reported only)."""
    from clef_agents.model.precise import LMSettings, settings_path

    shipped = LMSettings.model_validate_json(settings_path("precise").read_text())
    wide = json.loads(args.wide_rows.read_text(encoding="utf-8"))["rows"]
    probes = {"wide": wide, "reader": [r for rows in load_rows(tuple(args.reader_rows)).values() for r in rows]}
    values = {name: margins(rows, shipped.prior_correction, both=False) for name, rows in probes.items()}
    union_rows = [r for rows in probes.values() for r in rows]
    union_values = [v for name in probes for v in values[name]]
    candidate = fit(union_values, union_rows)
    alone = {name: fit(values[name], probes[name]) for name in probes}
    result: dict[str, Any] = {
        "command": " ".join([".venv/bin/python bench/precise/union_calibration.py", *sys.argv[1:]]),
        "correction": shipped.prior_correction,
        "items": {name: len(rows) for name, rows in probes.items()},
        "shipped_platt": platt(shipped.calibration),
        "candidate_platt": platt(candidate),
        "refitted_alone": {name: platt(c) for name, c in alone.items()},
        "scored": {},
    }
    for name, rows in probes.items():
        other = next(n for n in probes if n != name)
        result["scored"][name] = {
            "shipped Platt": scored(values[name], rows, shipped.calibration),
            "candidate (union, in sample)": scored(values[name], rows, candidate),
            f"fitted on {other} alone": scored(values[name], rows, alone[other]),
        }
    result["scored"]["union"] = {"shipped Platt": scored(union_values, union_rows, shipped.calibration),
                                 "candidate (union, in sample)": scored(union_values, union_rows, candidate)}
    if args.settings_out:
        write_platt_settings(args.settings_out, shipped, candidate, len(union_rows),
                             "union of the wide and reader probes (bench/precise/rule_calibration_probe.md)")
        result["settings_written"] = str(args.settings_out)
    return result


def platt(calibration: Any) -> dict[str, float]:
    return {"a": round(calibration.noul_a, 4), "b": round(calibration.noul_b, 4)}


def render(result: dict[str, Any]) -> str:
    """The fit's report as markdown."""
    lines = ["# Precise tier: yes/no Platt fitted on the union of the wide and reader probes", "",
             (f"Command: `{result['command']}`. Rule: [rule_calibration_probe.md](rule_calibration_probe.md). "
              f"Items: {result['items']}. Prior correction as shipped: {result['correction']}."), "",
             "| Platt | a | b |", "|---|---:|---:|",
             f"| shipped (stop 31, wide probe, bf16) | {result['shipped_platt']['a']:.3f} | {result['shipped_platt']['b']:.3f} |",
             f"| **candidate: union** | {result['candidate_platt']['a']:.3f} | {result['candidate_platt']['b']:.3f} |"]
    lines += [f"| for the record: {name} alone | {p['a']:.3f} | {p['b']:.3f} |" for name, p in result["refitted_alone"].items()]
    lines += ["", "| scored on | Platt | AUROC | accuracy | NLL | ECE | mean p(yes) |", "|---|---|---:|---:|---:|---:|---:|"]
    for probe, readings in result["scored"].items():
        for name, m in readings.items():
            lines.append(f"| {probe} | {name} | {m['auroc']:.3f} | {m['accuracy']:.3f} | {m['nll']:.3f} | {m['ece']:.3f} | "
                         f"{m['mean_p_yes']:.3f} |")
    if "settings_written" in result:
        lines += ["", f"Settings written: `{result['settings_written']}`."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    read = steps.add_parser("read", help="read the wide probe's yes/no items with shipped precise")
    read.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    read.add_argument("--limit", type=int, default=0, help="read only the first N items (a smoke test; 0: all)")
    read.add_argument("--out", type=Path, default=WIDE_ROWS, help=f"rows file (default {WIDE_ROWS.relative_to(ROOT)})")
    fitting = steps.add_parser("fit", help="fit the Platt on both probes' rows")
    fitting.add_argument("--wide-rows", type=Path, default=WIDE_ROWS, help="the read step's rows file")
    fitting.add_argument("--reader-rows", type=Path, nargs=2, default=list(ROW_FILES),
                         help="stop 37's reader-probe row files (default the judge and the replication)")
    fitting.add_argument("--settings-out", type=Path, default=None,
                         help="also write the shipped settings with this Platt (nothing else changed) to this file")
    fitting.add_argument("--out", type=Path, default=HERE / "union_calibration", help="report stem (default bench/precise/union_calibration)")
    args = parser.parse_args(argv)
    if args.step == "read":
        result = read_wide(args)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"{result['items']} rows in {result['seconds']} s -> {args.out}")
        return 0
    result = run_fit(args)
    write_report(args.out, result, render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
