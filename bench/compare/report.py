"""Render docs/performance.md (the README "Performance" section) from the committed results.

Reads bench/compare/results/results.json and bench/latency/results.json; every number in the
page comes from those files.

Run:   .venv/bin/python bench/compare/report.py
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
COMPARE_JSON = ROOT / "bench" / "compare" / "results" / "results.json"
LATENCY_JSON = ROOT / "bench" / "latency" / "results.json"
OUTPUT = ROOT / "docs" / "performance.md"
SPEED_TARGET = 20.0
FLAT_OPTIONS_MAX = 1.5
""""Time flat in the number of options": 255 options cost at most this much more than 2."""


def _f(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
    ] + ["| " + " | ".join(r) + " |" for r in rows]


def metric_table(result: dict[str, Any], part: str, metric: Any, digits: int, keys: list[str]) -> list[str]:
    datasets = list(result["per_dataset"])
    rows = []
    for key in keys:
        cells = []
        for d in datasets:
            entry = result["per_dataset"][d]["methods"][key]
            cells.append(_f(metric(entry[part] if part else entry), digits) if entry["all"]["requests"] else "—")
        rows.append([result["methods"][key]["title"], *cells])
    return _table(["method", *datasets], rows)


def compare_section(result: dict[str, Any]) -> list[str]:
    run = result["run"]
    keys = [k for k in result["methods"] if k != "bare_backbone"]
    fast = [k for k in keys if k not in run["heavy_methods"]]
    clef = keys[0]
    lines = [
        "## Against the alternatives (issue 6)",
        "",
        f"Command: `{run['command']}` ({run['wall_seconds']} s on {run['machine']}, finished {run['finished']}).",
        f"Records: `{run['records']}`; seeded test samples (seed {run['seed']}): {run['n_per_set']} requests per set for the "
        f"fast methods, of which a shared subset of {run['n_shared_per_set']} per set is answered by every method "
        f"(the slow ones, {', '.join(run['heavy_methods'])}, answer only that subset). Latency is warm, one request at a "
        "time, methods interleaved request by request; throughput batches 32 requests where a method has a batched path.",
        "",
        f"Decision model: `{run['model']['description']}`.",
        "",
    ]
    lines += ["### Shared subset: every method on the same requests", "", "Accuracy:", ""]
    lines += metric_table(result, "shared", lambda s: s["accuracy"], 3, keys)
    lines += ["", "ECE (15 equal-width bins; top-label confidence, p(yes) for yes/no questions):", ""]
    lines += metric_table(result, "shared", lambda s: s["ece"], 3, keys)
    lines += ["", "Latency p50 / p95 per request (ms):", ""]
    datasets = list(result["per_dataset"])
    rows = []
    for key in keys:
        cells = []
        for d in datasets:
            lat = result["per_dataset"][d]["methods"][key]["shared"]["latency"]
            cells.append(f"{_f(lat['p50_ms'], 1)} / {_f(lat['p95_ms'], 1)}")
        rows.append([result["methods"][key]["title"], *cells])
    lines += _table(["method", *datasets], rows)
    lines += ["", f"p50 latency relative to {result['methods'][clef]['title']} (×, higher = slower than it):", ""]
    rows = []
    for key in keys:
        cells = []
        for d in datasets:
            base = result["per_dataset"][d]["methods"][clef]["shared"]["latency"]["p50_ms"]
            mine = result["per_dataset"][d]["methods"][key]["shared"]["latency"]["p50_ms"]
            cells.append(_f(mine / base, 2) if base and not math.isnan(mine) else "—")
        rows.append([result["methods"][key]["title"], *cells])
    lines += _table(["method", *datasets], rows)
    lines += ["", "Throughput (requests/s):", ""]
    lines += metric_table(result, "", lambda e: e["throughput_rps"], 1, keys)
    lines += ["", f"### Full sample ({run['n_per_set']} per set): fast methods only", "", "Accuracy:", ""]
    lines += metric_table(result, "all", lambda s: s["accuracy"], 3, fast)
    lines += ["", "ECE:", ""]
    lines += metric_table(result, "all", lambda s: s["ece"], 3, fast)
    lines += ["", *targets_section(result, keys, clef), "", *scaling_section(result), ""]
    if "smollm_json" in result["methods"]:
        info = result["methods"]["smollm_json"]
        lines += [
            f"(a) produced an unparsable or illegal answer for {info['invalid_answers']} of {info['answers']} questions "
            "(counted wrong, uniform probabilities).",
            "",
        ]
    if "logreg" in result["methods"]:
        info = result["methods"]["logreg"]
        lines += [
            f"(e) logistic regression (C = {info['C']}) trained on the train split: "
            + ", ".join(f"{d} {n}" for d, n in info["train_sizes"].items())
            + " records.",
            "",
        ]
    return lines


def targets_section(result: dict[str, Any], keys: list[str], clef: str) -> list[str]:
    lines = ["### Targets of issue 6", ""]
    rows = []
    for d, entry in result["per_dataset"].items():
        m = entry["methods"]
        if "smollm_json" in m:
            speed = m["smollm_json"]["shared"]["latency"]["p50_ms"] / m[clef]["shared"]["latency"]["p50_ms"]
            acc_gap = m[clef]["shared"]["accuracy"] - m["smollm_json"]["shared"]["accuracy"]
            ok = speed >= SPEED_TARGET and acc_gap >= 0
            rows.append(
                [
                    f"≥ {SPEED_TARGET:.0f}× faster than (a) at ≥ its accuracy — {d}",
                    f"{speed:.1f}×, accuracy {acc_gap:+.3f}",
                    "yes" if ok else "no",
                ]
            )
        rivals = [k for k in ("sparrow", "embed_route", "logreg") if k in m]
        if rivals:
            best = max(rivals, key=lambda k: m[k]["all"]["accuracy"])
            gap = m[clef]["all"]["accuracy"] - m[best]["all"]["accuracy"]
            rows.append(
                [
                    f"more accurate than (c), (d), (e) — {d}",
                    f"{gap:+.3f} vs best rival {best}",
                    "yes" if gap > 0 else "no",
                ]
            )
    options = result.get("scaling", {}).get("options", {}).get(clef, [])
    measured = [p for p in options if not p["skipped"]]
    if len(measured) >= 2:
        growth = measured[-1]["median_ms"] / measured[0]["median_ms"]
        rows.append(
            [
                f"time flat in #options ({measured[0]['x']} → {measured[-1]['x']})",
                f"{growth:.2f}×",
                "yes" if growth <= FLAT_OPTIONS_MAX else "no",
            ]
        )
    return lines + _table(["target", "measured", "met"], rows)


def scaling_section(result: dict[str, Any]) -> list[str]:
    scaling = result.get("scaling")
    if not scaling:
        return []
    titles = {k: v["title"] for k, v in result["methods"].items()}
    reps = result.get("run", {}).get("scaling_reps")
    of_reps = f" of {reps} interleaved reps (the slow methods: one)" if reps else ""
    lines = [
        "### How cost grows",
        "",
        "![cost growth](../bench/compare/results/scaling.png)",
        "",
        f"Median ms per request{of_reps} (— = skipped after a point above the time cap). The decision model cuts a state "
        "longer than its window by its truncation policy (reported as `x_truncation`), so its cost stops growing "
        "there; the bare forward reads up to 512 tokens.",
        "",
    ]
    for sweep, by_method in scaling.items():
        xs = [p["x"] for p in next(iter(by_method.values()))]
        rows = [[titles.get(k, k), *[_f(p["median_ms"], 1) for p in points]] for k, points in by_method.items()]
        lines += [f"{sweep}:", "", *_table(["method", *map(str, xs)], rows), ""]
    return lines


def latency_section(result: dict[str, Any]) -> list[str]:
    lines = [
        "## Decision-model latency against its floor (issues 2 and 44)",
        "",
        f"Command: `{result['command']}`; model: {result['model']}; {result['machine']}; "
        f"{result['reps']} interleaved reps per case.",
        "",
    ]
    rows = [
        [
            name,
            str(c["n_questions"]),
            str(c["n_options"]),
            _f(c["model"]["p50_ms"], 1),
            _f(c["model"]["p95_ms"], 1),
            _f(c["bare_backbone"]["p50_ms"], 1),
            _f(c["p50_over_bare"], 2),
        ]
        for name, c in result["cases"].items()
    ]
    lines += _table(["case", "questions", "options", "p50 ms", "p95 ms", "floor p50 ms", "p50 ÷ floor"], rows)
    t, k = result["throughput"], result["targets"]
    lines += [
        "",
        f"Batch {t['batch_size']}: {_f(t['batched_requests_per_s'], 1)} req/s vs {_f(t['single_requests_per_s'], 1)} "
        f"one by one ({_f(t['speedup'], 2)}×).",
        "",
        *_table(
            ["target", "measured", "met"],
            [
                ["(d) ≤ 1.5× (a)", f"{_f(k['d_over_a_p50'])}×", "yes" if k["d_over_a_ok"] else "no"],
                [
                    "every case ≤ 1.5× the floor",
                    f"worst {_f(k['worst_case_over_bare_p50'])}×",
                    "yes" if k["every_case_over_bare_ok"] else "no",
                ],
                ["batch 32 ≥ 3× single", f"{_f(k['batch32_speedup'])}×", "yes" if k["batch32_ok"] else "no"],
            ],
        ),
        "",
    ]
    return lines


def render(compare_result: dict[str, Any] | None, latency_result: dict[str, Any] | None) -> str:
    lines = [
        "# Performance",
        "",
        "Generated by `.venv/bin/python bench/compare/report.py` from `bench/compare/results/results.json`, "
        "`bench/latency/results.json`; do not edit by hand. CPU timings drift between runs on shared machines, "
        "so compare ratios measured in the same run.",
        "",
    ]
    if latency_result:
        lines += latency_section(latency_result)
    if compare_result:
        lines += compare_section(compare_result)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", type=Path, default=COMPARE_JSON)
    parser.add_argument("--latency", type=Path, default=LATENCY_JSON)
    parser.add_argument("--out", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    load = lambda p: json.loads(p.read_text()) if p.exists() else None  # noqa: E731
    text = render(load(args.compare), load(args.latency))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
