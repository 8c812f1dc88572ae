"""Platt scaling for the precise tier's yes/no answers read in both forms (rule_both_forms.md, rule 3 as carried out).

The yes/no margin with ``noul_both_forms`` is the mean of the yes/no form's corrected margin and the ``yes`` / ``no``
choice form's. Its Platt is fitted on the reader-probe rows already read in both forms (stop 37's judge and
replication: sets the LM was never taught, none in bench/general), and checked:

- fitted on one file and scored on the other, both ways round;
- against the shipped Platt on the shipped margin, on the same rows.

The choice and score temperatures stay as shipped. ``--settings-out`` writes the shipped settings with
``noul_both_forms`` on and this Platt (what bench/general's ``--lm-variant`` reads and what would ship).

Run:   .venv/bin/python bench/precise/both_forms_calibration.py --settings-out bench/precise/both_forms_settings.json
Writes bench/precise/both_forms_calibration.{json,md}. Reads no LM; takes a second.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.reports import write_report
from clef_agents import wire

HERE = Path(__file__).resolve().parent
YES_NO = wire.Noul(instructions="?")
"""A stand-in yes/no question: Platt depends on the question's type only."""
ROW_FILES = (HERE / "both_forms_judge.json", HERE / "both_forms_replication.json")


def load_rows(paths: tuple[Path, ...] = ROW_FILES) -> dict[str, list[dict[str, Any]]]:
    """Per file (by stem), its rows; refuses a file whose rows lack the choice form's read."""
    if len({path.stem for path in paths}) != len(paths):
        raise SystemExit(f"the row files must have different names, got {[str(p) for p in paths]}")
    out = {}
    for path in paths:
        rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
        missing = [k for k in ("shipped_raw", "shipped_prior", "choice_raw", "choice_prior", "yes") if k not in rows[0]]
        if missing:
            raise SystemExit(f"{path.name} has no {', '.join(missing)} in its rows: it was not read in both forms")
        out[path.stem] = rows
    return out


def margins(rows: list[dict[str, Any]], correction: dict[str, float], both: bool) -> list[float]:
    """Each row's yes/no margin as ``PrefillLM.logits`` gives it: the yes/no form corrected by its weight, averaged
    with the choice form corrected by the choice weight when ``both``."""
    noul = [r["shipped_raw"] - correction.get("noul", 0.0) * r["shipped_prior"] for r in rows]
    if not both:
        return noul
    choice = [r["choice_raw"] - correction.get("choice", 0.0) * r["choice_prior"] for r in rows]
    return [(a + b) / 2 for a, b in zip(noul, choice)]


def gold(rows: list[dict[str, Any]]) -> list[int]:
    """The rows' answers as option indices (0: yes, 1: no)."""
    return [0 if r["yes"] else 1 for r in rows]


def fit(values: list[float], rows: list[dict[str, Any]]) -> Any:
    """Platt fitted on ``values`` against the rows' gold answers."""
    import torch

    from clef_agents.train.reader import fit_logit_calibration

    return fit_logit_calibration([YES_NO] * len(rows), [torch.tensor([v]) for v in values], gold(rows))


def scored(values: list[float], rows: list[dict[str, Any]], calibration: Any) -> dict[str, float]:
    """AUROC, accuracy, NLL and ECE of p(yes) under ``calibration`` (applied as ``PrefillLM`` applies it)."""
    import torch

    from bench.general.metrics import variant_metrics
    from clef_agents.model.precise import PrefillLM

    probabilities = [PrefillLM.calibrated_with(calibration, YES_NO, torch.tensor([v])) for v in values]
    found = variant_metrics("noul", probabilities, gold(rows))
    return {k: round(found[k], 4) for k in ("auroc", "accuracy", "nll", "ece", "mean_p_yes")}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from clef_agents.model.precise import LMSettings, settings_path

    shipped = LMSettings.model_validate_json(settings_path("precise").read_text())
    files = load_rows(tuple(args.rows))
    everything = [r for rows in files.values() for r in rows]
    names = list(files)
    result: dict[str, Any] = {"correction": shipped.prior_correction, "shipped_platt": shipped.calibration.model_dump(),
                              "items": {name: len(rows) for name, rows in files.items()}, "checks": []}
    both = {name: margins(rows, shipped.prior_correction, True) for name, rows in files.items()}
    single = {name: margins(rows, shipped.prior_correction, False) for name, rows in files.items()}
    for fit_on, check_on in ((names[0], names[1]), (names[1], names[0])):
        fitted = fit(both[fit_on], files[fit_on])
        result["checks"].append({
            "fitted_on": fit_on, "scored_on": check_on, "platt": [round(fitted.noul_a, 4), round(fitted.noul_b, 4)],
            "both forms, Platt fitted on the other file": scored(both[check_on], files[check_on], fitted),
            "shipped margin, shipped Platt": scored(single[check_on], files[check_on], shipped.calibration),
        })
    both_all = [v for name in names for v in both[name]]
    whole = fit(both_all, everything)
    for_shipped = fit([v for name in names for v in single[name]], everything)
    result["platt"] = whole.model_dump()
    result["for the record: the shipped margin's Platt refitted on these rows"] = [round(for_shipped.noul_a, 4),
                                                                                    round(for_shipped.noul_b, 4)]
    result["in_sample"] = scored(both_all, everything, whole)
    result["command"] = " ".join([".venv/bin/python bench/precise/both_forms_calibration.py", *sys.argv[1:]])
    if args.settings_out:
        write_platt_settings(args.settings_out, shipped, whole, len(everything),
                             "reader probe rows read in both forms (bench/precise/both_forms_calibration.md)",
                             noul_both_forms=True)
        result["settings_written"] = str(args.settings_out)
    return result


def write_platt_settings(path: Path, shipped: Any, platt: Any, nouls: int, probe: str, **changes: Any) -> None:
    """Write ``shipped`` (an ``LMSettings``) with the yes/no Platt of ``platt``, fitted on ``nouls`` rows of ``probe``,
    and ``changes`` to other settings; everything else stays as shipped."""
    from clef_agents.model.precise import LMSettings

    fitted_on = {**shipped.calibration.fitted_on, "nouls": nouls, "nouls_probe": probe}
    calibration = shipped.calibration.model_copy(update={"noul_a": platt.noul_a, "noul_b": platt.noul_b,
                                                         "fitted_on": fitted_on})
    settings = shipped.model_copy(update={**changes, "calibration": calibration})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(LMSettings.model_validate(settings.model_dump()).model_dump_json(indent=1) + "\n")


def render(result: dict[str, Any]) -> str:
    """The report as markdown."""
    lines = ["# Precise tier: Platt for yes/no read in both forms", "",
             (f"Command: `{result['command']}`. Rows: {result['items']} (reader probe, read in both forms in stop 37). "
              f"Prior correction as shipped: {result['correction']}."), "",
             "| fitted on → scored on | reading | AUROC | accuracy | NLL | ECE | mean p(yes) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for check in result["checks"]:
        for reading in ("both forms, Platt fitted on the other file", "shipped margin, shipped Platt"):
            m = check[reading]
            lines.append(f"| {check['fitted_on']} → {check['scored_on']} | {reading} | {m['auroc']:.3f} | {m['accuracy']:.3f} | "
                         f"{m['nll']:.3f} | {m['ece']:.3f} | {m['mean_p_yes']:.3f} |")
    platt = result["platt"]
    refit = result["for the record: the shipped margin's Platt refitted on these rows"]
    lines += ["", (f"Fitted on all rows: a = {platt['noul_a']:.3f}, b = {platt['noul_b']:.3f} "
                   f"(in sample: ECE {result['in_sample']['ece']:.3f}, NLL {result['in_sample']['nll']:.3f})."),
              (f"For the record, the shipped margin's Platt refitted on the same rows: a = {refit[0]:.3f}, b = {refit[1]:.3f} "
               f"(shipped, fitted on the wide probe: a = {result['shipped_platt']['noul_a']:.3f}, "
               f"b = {result['shipped_platt']['noul_b']:.3f}).")]
    if "settings_written" in result:
        lines += ["", f"Settings written: `{result['settings_written']}`."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=Path, nargs=2, default=list(ROW_FILES),
                        help="the two row files read in both forms (default stop 37's judge and replication)")
    parser.add_argument("--settings-out", type=Path, default=None,
                        help="also write the shipped settings with noul_both_forms on and this Platt to this file")
    parser.add_argument("--out", type=Path, default=HERE / "both_forms_calibration", help="report stem (default bench/precise/both_forms_calibration)")
    args = parser.parse_args(argv)
    result = run(args)
    write_report(args.out, result, render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
