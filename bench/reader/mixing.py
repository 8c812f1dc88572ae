"""Two ways of combining answers the engine already computes, judged on the reader's probe by the rule
of bench/reader/rule_mixing.md (written before any measurement):

- K1, margin mixing for yes/no: ``(1 − u)·z_reader/σ_reader + u·z_head/σ_head``, Platt-calibrated after;
- K2, a label-cosine prior for choices: ``(1 − v)·log p + v·log softmax(20·cos(state, option))``.

Each is chosen on one half of the probe and checked on the other, both ways round, against the shipped
recipe refitted on the same half; a knob is kept when it raises its part of the criterion out of fold in
both folds. bench/general plays no part.

Run:   OMP_NUM_THREADS=1 CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/reader/mixing.py --threads 2 \\
           --cache runs/stop36/mixing_inputs.pt
Writes bench/reader/mixing.json and bench/reader/mixing.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import torch

from bench.baselines.methods import softmax
from clef_agents import wire
from clef_agents.model.config import Calibration
from clef_agents.model.reader import QuestionReader

MARGIN_WEIGHTS = (0.0, 0.25, 0.5, 0.75)
COSINE_WEIGHTS = (0.0, 0.25, 0.5, 0.75)
COSINE_SCALE = 20.0
"""The label-cosine baseline's scale (bench/general/methods.py), fixed by the rule."""
COLUMNS = ("noul_auroc", "choice_accuracy", "criterion", "nll", "ece")


def read_inputs(rows: int, model: Any, model_name: str) -> dict[str, Any]:
    """Probe items with the reader's raw logits, the head's answers and each choice's cosine logits."""
    from probe import head_probabilities

    from clef_agents.model.scorer import option_texts
    from clef_agents.train.reader_probe import probe_items

    items = probe_items(rows)
    reader = model.engine.reader
    logits = reader.logits([(state, q) for state, q, _, _ in items])
    head = head_probabilities(model_name, items)
    states = sorted({state for state, q, _, _ in items if isinstance(q, wire.Choice)})
    state_vec = dict(zip(states, torch.nn.functional.normalize(model.engine.embed_frozen(states, cache=False), dim=-1)))
    cosine: list[list[float] | None] = []
    for state, question, _, _ in items:
        if not isinstance(question, wire.Choice):
            cosine.append(None)
            continue
        options = torch.nn.functional.normalize(model.engine.embed_frozen(option_texts(question)), dim=-1)
        cosine.append((COSINE_SCALE * options @ state_vec[state]).tolist())
    return {"items": items, "logits": logits, "head": head, "cosine": cosine}


def head_margin(probabilities: list[float]) -> float:
    """The head's log-odds of yes."""
    yes = min(max(probabilities[0], 1e-6), 1 - 1e-6)
    return math.log(yes / (1 - yes))


class Knobs:
    """The answers of one configuration on a subset of probe items, fitted on another subset."""

    def __init__(self, reader: QuestionReader, data: dict[str, Any]):
        self.reader = reader
        self.data = data

    def pick(self, key: str, index: list[int]) -> list:
        return [self.data[key][i] for i in index]

    def baseline(self, fit: list[int]) -> dict[str, Any]:
        """The shipped recipe refitted on ``fit``: probe calibration, then the head's weight per type."""
        from probe import choose

        step = choose(self.reader, self.pick("items", fit), self.pick("logits", fit), self.pick("head", fit),
                      self.reader.config.calibration, correct=False, mixing=True)
        return {"calibration": step["calibration"], "head_weights": step["head_weights"]}

    def baseline_answers(self, settings: dict[str, Any], index: list[int]) -> list[list[float]]:
        from probe import mix, probabilities_from

        items = self.pick("items", index)
        probs = probabilities_from(self.reader, items, self.pick("logits", index), Calibration(**settings["calibration"]))
        return mix(probs, self.pick("head", index), items, settings["head_weights"])

    def margins(self, index: list[int]) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        """Yes/no items of ``index`` with the reader's raw margins and the head's log-odds."""
        nouls = [i for i in index if isinstance(self.data["items"][i][1], wire.Noul)]
        reader = torch.tensor([float(self.data["logits"][i][0]) for i in nouls])
        head = torch.tensor([head_margin(self.data["head"][i]) for i in nouls])
        return nouls, reader, head

    def fit_margin_mix(self, fit: list[int], u: float) -> dict[str, float]:
        """σ's and the Platt fit of the mixed margin on ``fit``'s yes/no items."""
        from clef_agents.train.calibration import fit_platt

        nouls, reader, head = self.margins(fit)
        sigma_r, sigma_h = float(reader.std()), float(head.std())
        mixed = (1 - u) * reader / sigma_r + u * head / sigma_h
        gold = torch.tensor([1.0 if self.data["items"][i][2] == 0 else 0.0 for i in nouls])
        a, b = fit_platt(mixed, gold)
        return {"u": u, "sigma_reader": sigma_r, "sigma_head": sigma_h, "a": a, "b": b}

    def with_margin_mix(self, answers: list[list[float]], index: list[int], settings: dict[str, float]) -> list[list[float]]:
        """``answers`` with every yes/no answer replaced by the calibrated mixed margin."""
        nouls, reader, head = self.margins(index)
        u = settings["u"]
        mixed = (1 - u) * reader / settings["sigma_reader"] + u * head / settings["sigma_head"]
        p_yes = torch.sigmoid(settings["a"] * mixed + settings["b"]).tolist()
        out = list(answers)
        position = {i: k for k, i in enumerate(index)}
        for i, p in zip(nouls, p_yes):
            out[position[i]] = [p, 1 - p]
        return out

    def with_cosine(self, answers: list[list[float]], index: list[int], v: float) -> list[list[float]]:
        """``answers`` with each choice's cosine answer mixed in at weight ``v``."""
        return [QuestionReader.mix_with_head(p, softmax(c), v) if c is not None else p
                for p, c in zip(answers, self.pick("cosine", index))]

    def report(self, index: list[int], answers: list[list[float]]) -> dict[str, Any]:
        from clef_agents.train.reader_probe import probe_report

        return probe_report(self.pick("items", index), answers)

    def choose(self, fit: list[int]) -> dict[str, Any]:
        """Baseline, K1's u and K2's v, each chosen on ``fit`` (ties to the smaller weight)."""
        base = self.baseline(fit)
        answers = self.baseline_answers(base, fit)
        margin = max((self.fit_margin_mix(fit, u) for u in MARGIN_WEIGHTS),
                     key=lambda s: (self.part(fit, self.with_margin_mix(answers, fit, s), "noul_auroc"), -s["u"]))
        v = max(COSINE_WEIGHTS, key=lambda w: (self.part(fit, self.with_cosine(answers, fit, w), "choice_accuracy"), -w))
        return {"baseline": base, "margin_mix": margin, "cosine_weight": v}

    def answers(self, chosen: dict[str, Any], index: list[int], margin: bool, cosine: bool) -> list[list[float]]:
        out = self.baseline_answers(chosen["baseline"], index)
        if margin:
            out = self.with_margin_mix(out, index, chosen["margin_mix"])
        if cosine:
            out = self.with_cosine(out, index, chosen["cosine_weight"])
        return out

    def part(self, index: list[int], answers: list[list[float]], column: str) -> float:
        value = self.report(index, answers)["summary"][column]
        return -1.0 if value is None else value


CONFIGS = {"shipped recipe (refitted)": (False, False), "K1 margin mixing": (True, False),
           "K2 cosine prior": (False, True), "K1 + K2": (True, True)}


def fold(knobs: Knobs, halves: list[int], fit_half: int) -> dict[str, Any]:
    fit = [i for i, h in enumerate(halves) if h == fit_half]
    check = [i for i, h in enumerate(halves) if h != fit_half]
    chosen = knobs.choose(fit)
    check_rows = {name: knobs.report(check, knobs.answers(chosen, check, *flags))["summary"] for name, flags in CONFIGS.items()}
    check_rows["cosine alone (choices)"] = knobs.report(check, knobs.with_cosine(knobs.answers(chosen, check, False, False), check, 0.999))["summary"]
    return {"fit_half": fit_half, "fit_items": len(fit), "check_items": len(check), "chosen": chosen, "check": check_rows}


def kept(folds: list[dict[str, Any]]) -> dict[str, bool]:
    def better(name: str, column: str) -> bool:
        return all((f["check"][name][column] or 0) > (f["check"]["shipped recipe (refitted)"][column] or 0) for f in folds)

    return {"K1": better("K1 margin mixing", "noul_auroc"), "K2": better("K2 cosine prior", "choice_accuracy")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mini", help="checkpoint whose reader and head are combined (default mini)")
    parser.add_argument("--rows", type=int, default=300, help="rows per probe set (default 300, as the shipped reader's probe)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--cache", default=None, help="file keeping the probe's inputs (read when present, else written)")
    parser.add_argument("--out", default=str(HERE / "mixing"), help="output stem (default bench/reader/mixing)")
    args = parser.parse_args()

    from clef_agents.train.reader_probe import probe_half

    torch.set_num_threads(args.threads)
    started = time.time()
    from clef_agents.model import ClefDecisionModel

    model = ClefDecisionModel.from_pretrained(args.model)
    if model.engine.reader is None:
        raise SystemExit(f"{args.model} has no question reader")
    cache = Path(args.cache) if args.cache else None
    if cache is not None and cache.is_file():
        data = torch.load(cache, weights_only=False)
    else:
        data = read_inputs(args.rows, model, args.model)
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            torch.save(data, cache)
    knobs = Knobs(model.engine.reader, data)
    halves = [probe_half(item) for item in data["items"]]
    folds = [fold(knobs, halves, h) for h in (0, 1)]
    keep = kept(folds)
    everything = list(range(len(data["items"])))
    final = knobs.choose(everything)
    result = {
        "command": " ".join(["python", "bench/reader/mixing.py", *sys.argv[1:]]),
        "rule": "bench/reader/rule_mixing.md", "items": len(everything), "wall_s": round(time.time() - started, 1),
        "folds": folds, "kept": keep, "final": final,
        "final_report": knobs.report(everything, knobs.answers(final, everything, keep["K1"], keep["K2"])),
    }
    Path(args.out + ".json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    Path(args.out + ".md").write_text(render(result), encoding="utf-8")
    print(render(result))
    return 0


def _fmt(value: Any) -> str:
    return "–" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def render(result: dict[str, Any]) -> str:
    lines = ["# Mixing knobs of the shipped reader, judged on its probe", "",
             (f"Command: `{result['command']}` ({result['items']} probe items, {result['wall_s']:.0f} s). "
              f"Rule: [{result['rule']}](rule_mixing.md), written before this ran."), ""]
    for f in result["folds"]:
        c = f["chosen"]
        lines += [f"## Fitted on half {f['fit_half']} ({f['fit_items']} items), checked on the other ({f['check_items']})", "",
                  (f"Chosen on the fitting half: head weights {c['baseline']['head_weights']}; K1 u = {c['margin_mix']['u']}; "
                   f"K2 v = {c['cosine_weight']}."), "",
                  "| answers | " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
        for name, summary in f["check"].items():
            lines.append(f"| {name} | " + " | ".join(_fmt(summary[k]) for k in COLUMNS) + " |")
        lines.append("")
    keep = result["kept"]
    final = result["final"]
    lines += [f"Kept (higher out of fold in both folds): K1 {'yes' if keep['K1'] else 'no'}, K2 {'yes' if keep['K2'] else 'no'}.", "",
              (f"Chosen on the whole probe: head weights {final['baseline']['head_weights']}; K1 u = {final['margin_mix']['u']} "
               f"(σ reader {final['margin_mix']['sigma_reader']:.3f}, σ head {final['margin_mix']['sigma_head']:.3f}, "
               f"Platt a = {final['margin_mix']['a']:.3f}, b = {final['margin_mix']['b']:.3f}); K2 v = {final['cosine_weight']}."), "",
              "## Per probe set, what was kept, on the whole probe (in-sample)", "",
              "| set | type | n | AUROC | accuracy | NLL | ECE |", "|---|---|---:|---:|---:|---:|---:|"]
    for name, kinds in result["final_report"]["sets"].items():
        for kind, m in kinds.items():
            lines.append(f"| {name} | {kind} | {m['n']} | {_fmt(m.get('auroc'))} | {_fmt(m['accuracy'])} | {_fmt(m['nll'])} | {_fmt(m['ece'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
