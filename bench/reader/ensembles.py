"""Two self-ensembles of `mini`'s question reader, judged on the reader's probe by the rule of
bench/reader/rule_ensembles.md (written before any measurement):

- K3, option order for choices: the options read again in reverse order, log-probabilities averaged;
- K4, the two forms of a yes/no question: the noul's margin averaged with the log-odds of the same question
  asked as the choice ``yes`` / ``no``.

Both are judged on the reader's raw answers, on each half of the probe and on the whole; bench/general plays no part.

Run:   OMP_NUM_THREADS=1 CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/reader/ensembles.py --threads 2
Writes bench/reader/ensembles.json and bench/reader/ensembles.md.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from bench.reports import write_report

PROBE_ROWS = 300
MIN_ITEMS = 20
ADOPT_GAIN = 0.01
PARTS = {"K3": "choice accuracy", "K4": "yes/no AUROC"}


def reversed_choice(question: Any) -> Any:
    """The choice with its options in reverse order."""
    from clef_agents import wire

    return wire.Choice(instructions=question.instructions, criteria=dict(reversed(list(question.criteria.items()))))


def read(reader: Any, items: list) -> dict[str, list[list[float]]]:
    """Per item: the single reading's scores, and the knob's (choices: option log-probabilities; yes/no: the
    margin), each a list (``[margin]`` for yes/no)."""
    import torch

    from clef_agents import wire

    single = reader.logits([(state, q) for state, q, _, _ in items])
    choices = [i for i, item in enumerate(items) if isinstance(item[1], wire.Choice)]
    nouls = [i for i, item in enumerate(items) if isinstance(item[1], wire.Noul)]
    flipped = reader.logits([(items[i][0], reversed_choice(items[i][1])) for i in choices])
    forms = reader.logits([(items[i][0], wire.yes_no_choice(items[i][1])) for i in nouls])
    base: list[list[float]] = [z.float().reshape(-1).tolist() for z in single]
    knob: list[list[float]] = [list(b) for b in base]
    for i, z in zip(choices, flipped):
        both = torch.stack([torch.log_softmax(single[i].float(), -1), torch.log_softmax(z.float().flip(0), -1)])
        base[i] = torch.log_softmax(single[i].float(), -1).tolist()
        knob[i] = both.mean(0).tolist()
    for i, z in zip(nouls, forms):
        log_p = torch.log_softmax(z.float(), -1)
        knob[i] = [float(single[i].reshape(-1)[0] + (log_p[0] - log_p[1])) / 2]
    return {"single": base, "knob": knob}


def parts(items: list, scores: list[list[float]], picked: list[int]) -> dict[str, Any]:
    """Mean choice accuracy and mean yes/no AUROC over probe sets (≥ ``MIN_ITEMS`` items) among ``picked``, with
    the per-set figures and the negated forms' AUROC."""
    from bench.precise.answer_probe import per_source_auroc
    from clef_agents import wire
    from clef_agents.train.metrics import auroc

    by_set: dict[str, dict[str, list[int]]] = {}
    for i in picked:
        kind = "choice" if isinstance(items[i][1], wire.Choice) else "noul" if isinstance(items[i][1], wire.Noul) else None
        if kind:
            by_set.setdefault(kind, {}).setdefault(items[i][3]["dataset"], []).append(i)
    accuracy = {name: sum(max(range(len(scores[i])), key=scores[i].__getitem__) == items[i][2] for i in index) / len(index)
                for name, index in by_set.get("choice", {}).items() if len(index) >= MIN_ITEMS}
    nouls = [i for index in by_set.get("noul", {}).values() for i in index]
    ranking = per_source_auroc([scores[i][0] for i in nouls], [int(items[i][2] == 0) for i in nouls],
                               [items[i][3]["dataset"] for i in nouls], MIN_ITEMS)
    negated = [i for i in picked if isinstance(items[i][1], wire.Noul) and items[i][3]["form"].endswith("negated")]
    return {"choice accuracy": sum(accuracy.values()) / len(accuracy) if accuracy else math.nan,
            "yes/no AUROC": sum(ranking.values()) / len(ranking) if ranking else math.nan,
            "negated AUROC": auroc([scores[i][0] for i in negated], [int(items[i][2] == 0) for i in negated]) if negated else math.nan,
            "choice sets": accuracy, "yes/no sets": ranking}


def judge(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from clef_agents.model import ClefDecisionModel
    from clef_agents.train.reader_probe import probe_half, probe_items

    torch.set_num_threads(args.threads)
    started = time.time()
    items = probe_items(PROBE_ROWS)
    reader = ClefDecisionModel.from_pretrained("mini").engine.reader
    scores = read(reader, items)
    halves = {"whole": list(range(len(items))), **{f"half {h}": [i for i, item in enumerate(items) if probe_half(item) == h]
                                                    for h in (0, 1)}}
    table = {name: {which: parts(items, scores[which], picked) for which in ("single", "knob")} for name, picked in halves.items()}
    verdicts = {}
    for knob, part in PARTS.items():
        gains = {name: table[name]["knob"][part] - table[name]["single"][part] for name in halves}
        verdicts[knob] = {"gains": gains, "adopted": bool(all(g > 0 for g in gains.values()) and gains["whole"] >= ADOPT_GAIN)}
    return {"command": " ".join([".venv/bin/python bench/reader/ensembles.py", *sys.argv[1:]]), "rule": "rule_ensembles.md",
            "items": len(items), "seconds": round(time.time() - started, 1), "table": table, "verdicts": verdicts}


def report(result: dict[str, Any]) -> str:
    lines = ["# Two self-ensembles of mini's question reader, judged on the probe", "",
             (f"Command: `{result['command']}` ({result['items']} probe items, {result['seconds']} s). Rule: "
              f"[{result['rule']}]({result['rule']}), written before any measurement. Raw reader answers, no calibration."), "",
             "| part | probe part | single reading | with the knob | gain |", "|---|---|---:|---:|---:|"]
    for knob, part in PARTS.items():
        for name, row in result["table"].items():
            lines.append(f"| {knob}: {part} | {name} | {row['single'][part]:.3f} | {row['knob'][part]:.3f} | "
                         f"{row['knob'][part] - row['single'][part]:+.3f} |")
    whole = result["table"]["whole"]
    lines += ["", (f"Negated yes/no forms, whole probe: {whole['single']['negated AUROC']:.3f} single, "
                   f"{whole['knob']['negated AUROC']:.3f} with K4."), "",
              "| probe set | single | with the knob |", "|---|---:|---:|"]
    for key in ("choice sets", "yes/no sets"):
        for name, value in whole["single"][key].items():
            lines.append(f"| {name} ({key.split()[0]}) | {value:.3f} | {whole['knob'][key][name]:.3f} |")
    lines += [""] + [f"{knob} ({PARTS[knob]}): adopted **{'yes' if v['adopted'] else 'no'}** (higher on each half and by ≥ "
                     f"{ADOPT_GAIN} on the whole)." for knob, v in result["verdicts"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=HERE / "ensembles", help="report stem (default bench/reader/ensembles)")
    args = parser.parse_args()
    result = judge(args)
    write_report(args.out, result, report(result))


if __name__ == "__main__":
    main()
