"""A yes/no adapter for the precise tier: LoRA on the question's tokens, trained on yes/no questions whose
answers are known, judged once on the reader probe (rule: bench/precise/rule_noul_adapter.md, written first).

- ``train``: the reader recipe's yes/no questions (version 2, negations, yes and no balanced) on trainable
  sets a shipped model may use, less ``reader_left_out_sets()``, plus the written reading questions' training
  items; binary cross-entropy of the yes/no margin; checkpoints to OUT/last, the end to OUT/final.
- ``judge``: the reader probe's yes/no items read once per state, with the adapter and without it on the same
  prefix; the rule's comparison; ``--write`` saves adopted settings (never into the package).

Run:
    OMP_NUM_THREADS=1 CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/precise/noul_adapter.py train \\
        --out runs/noul_adapter --minutes 50 --threads 2
    OMP_NUM_THREADS=1 CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/precise/noul_adapter.py judge \\
        --adapter runs/noul_adapter/final --threads 2 [--write runs/precise_adapter]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from bench.reports import write_report

SHIPPED_NOUL_CORRECTION = 0.5
"""precise's yes/no prior correction (clef_lm.json): the shipped margin is raw − 0.5 × prior."""
ADOPT_MARGIN = 0.03
PROBE_ROWS = 60
MIN_ITEMS = 20


def training_items(per_set: int, seed: int) -> list[tuple[str, Any, int, dict[str, str]]]:
    """Yes/no training items (state, question, gold, meta): ``answer_probe.training_records`` less every set the
    reader leaves out (``reader_left_out_sets()``: the probe's sets and banking77)."""
    from bench.precise.answer_probe import training_records
    from clef_agents.train.reader import typed_items
    from clef_agents.train.reader_data import reader_left_out_sets

    records = training_records(per_set, seed, exclude=reader_left_out_sets())
    return [(s, q, g, {"dataset": r["meta"]["dataset"], "form": r["meta"]["form"]}) for (s, q, g), r in zip(typed_items(records), records)]


def train(args: argparse.Namespace) -> None:
    import torch
    from tqdm import tqdm

    from clef_agents.model.config import Calibration
    from clef_agents.model.precise import PrefillLM

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    started = time.time()
    from bench.precise.answer_probe import by_state

    items = training_items(args.per_set, args.seed)
    groups = by_state(items)
    random.Random(args.seed).shuffle(groups)
    lm = PrefillLM.load("precise", precision="float32", calibration=Calibration(), answer="name", prior_correction={},
                        max_state_tokens=args.state_tokens)
    lm.add_noul_adapter(rank=args.rank, alpha=2 * args.rank, dropout=0.05)
    lm.model.train()
    parameters = lm.adapter_parameters()
    optimiser = torch.optim.AdamW(parameters, lr=args.lr, weight_decay=0.0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    deadline = started + 60 * args.minutes
    log: list[dict[str, Any]] = []
    losses: list[float] = []
    updates = states = questions = 0
    last_save = time.time()
    optimiser.zero_grad()
    for group in tqdm(groups, desc="train", unit="state", mininterval=30):
        if time.time() > deadline:
            break
        state = items[group[0]][0]
        nouls = [items[i][1] for i in group]
        gold = torch.tensor([1.0 if items[i][2] == 0 else 0.0 for i in group])
        margins = lm.training_margins(state, nouls)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(margins, gold)
        (loss / args.accumulate).backward()
        losses.append(loss.item())
        states += 1
        questions += len(group)
        if states % args.accumulate == 0:
            for g in optimiser.param_groups:
                g["lr"] = args.lr * min(1.0, (updates + 1) / args.warmup)
            optimiser.step()
            optimiser.zero_grad()
            updates += 1
            if updates % 10 == 0:
                log.append({"updates": updates, "states": states, "questions": questions, "loss": round(sum(losses[-40:]) / len(losses[-40:]), 4),
                            "seconds": round(time.time() - started)})
        if time.time() - last_save > 60 * args.save_minutes:
            save(lm, out / "last", summary(args, items, updates, states, questions, losses, log, started, finished=False))
            last_save = time.time()
    lm.model.eval()
    save(lm, out / "final", summary(args, items, updates, states, questions, losses, log, started, finished=True))
    print(json.dumps(log[-3:], indent=1))


def summary(args: argparse.Namespace, items: list, updates: int, states: int, questions: int, losses: list[float],
            log: list, started: float, finished: bool) -> dict[str, Any]:
    sets = sorted({meta["dataset"] for _, _, _, meta in items})
    return {"command": " ".join(["python", "bench/precise/noul_adapter.py", *sys.argv[1:]]), "finished": finished,
            "updates": updates, "states": states, "questions": questions, "available_questions": len(items),
            "loss_first_40": round(sum(losses[:40]) / max(1, len(losses[:40])), 4),
            "loss_last_40": round(sum(losses[-40:]) / max(1, len(losses[-40:])), 4),
            "seconds": round(time.time() - started), "sets": sets, "log": log,
            "settings": {k: v for k, v in vars(args).items() if k != "func"}}


def save(lm: Any, folder: Path, info: dict[str, Any]) -> None:
    lm.save_noul_adapter(folder)
    (folder / "summary.json").write_text(json.dumps(info, indent=1), encoding="utf-8")


def judge(args: argparse.Namespace) -> None:
    import torch
    from tqdm import tqdm

    from bench.precise.answer_probe import by_state
    from clef_agents import wire
    from clef_agents.model.config import Calibration
    from clef_agents.model.precise import (
        LMSettings,
        PrefillLM,
        load_causal_lm,
        load_noul_adapter,
        settings_path,
    )
    from clef_agents.train.reader_probe import probe_items

    torch.set_num_threads(args.threads)
    started = time.time()
    adapter = Path(args.adapter)
    model, tokenizer = load_causal_lm("precise", torch.float32)
    load_noul_adapter(model, adapter)
    shipped = LMSettings.model_validate_json(settings_path("precise").read_text())
    lm = PrefillLM(model, tokenizer, name="precise", answer="name", max_state_tokens=shipped.max_state_tokens,
                   calibration=Calibration(), prior_correction={}, system_prompt=shipped.system_prompt,
                   noul_adapter=adapter.name)
    items = [item for item in probe_items(rows_per_set=PROBE_ROWS) if isinstance(item[1], wire.Noul)]
    rows: list[dict[str, Any]] = []
    for group in tqdm(by_state(items), desc="probe", unit="state", mininterval=30):
        state = items[group[0]][0]
        questions = [items[i][1] for i in group]
        lm.noul_adapter_on = True
        with_adapter = lm.raw_logits(state, questions)[0]
        lm.noul_adapter_on = False
        without = lm.raw_logits(state, questions)[0]
        for k, i in enumerate(group):
            rows.append({"adapter": float(with_adapter[k][0]), "raw": float(without[k][0]),
                         "prior": float(lm.prior_logits(items[i][1])[0]), "yes": int(items[i][2] == 0), **items[i][3]})
    result = verdict(rows)
    result.update({"command": " ".join(["python", "bench/precise/noul_adapter.py", *sys.argv[1:]]),
                   "rule": "bench/precise/rule_noul_adapter.md", "items": len(rows), "seconds": round(time.time() - started),
                   "trained": json.loads((adapter / "summary.json").read_text()) if (adapter / "summary.json").is_file() else {}})
    if result["adopted"] and args.write:
        result["written"] = write_settings(Path(args.write), adapter, rows)
    write_report(args.out, {**result, "rows": rows}, report(result))


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The rule's comparison on the probe rows: per-set and negated-form AUROC, shipped against adapter."""
    from bench.precise.answer_probe import auroc_table

    scores = {"shipped (raw − 0.5 prior)": [r["raw"] - SHIPPED_NOUL_CORRECTION * r["prior"] for r in rows],
              "adapter (raw)": [r["adapter"] for r in rows],
              "without either (raw)": [r["raw"] for r in rows]}
    negated = [i for i, r in enumerate(rows) if r["form"].endswith("negated")]
    table = auroc_table(scores, [r["yes"] for r in rows], [r["dataset"] for r in rows], negated, MIN_ITEMS)
    adopted = beats_shipped(table["shipped (raw − 0.5 prior)"], table["adapter (raw)"])
    return {"table": table, "negated_items": len(negated), "adopted": adopted}


def beats_shipped(shipped: dict[str, Any], candidate: dict[str, Any]) -> bool:
    """The yes/no levers' bar (stop 36's rule, kept since): a candidate's mean AUROC over probe sets at least the
    shipped margin's + ``ADOPT_MARGIN``, and a higher AUROC on the negated forms (rows of ``auroc_table``)."""
    return bool(candidate["mean"] >= shipped["mean"] + ADOPT_MARGIN and candidate["negated"] > shipped["negated"])


def write_settings(folder: Path, adapter: Path, rows: list[dict[str, Any]]) -> str:
    """Adopted settings: shipped precise's, with the adapter and a Platt fit of its margins on the probe."""
    import torch

    from clef_agents.model.precise import (
        ADAPTER_WEIGHTS,
        SETTINGS_FILE,
        LMSettings,
        settings_path,
    )
    from clef_agents.train.calibration import fit_platt

    shipped = LMSettings.model_validate_json(settings_path("precise").read_text())
    a, b = fit_platt(torch.tensor([r["adapter"] for r in rows]), torch.tensor([float(r["yes"]) for r in rows]))
    calibration = shipped.calibration.model_copy(update={"noul_a": a, "noul_b": b, "fitted_on": {
        **shipped.calibration.fitted_on, "nouls": len(rows), "nouls_from": "reader probe, adapter margins"}})
    settings = shipped.model_copy(update={"noul_adapter": "noul_adapter", "calibration": calibration,
                                          "prior_correction": {k: v for k, v in shipped.prior_correction.items() if k != "noul"}})
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "noul_adapter"
    target.mkdir(exist_ok=True)
    for name in ("adapter_config.json", ADAPTER_WEIGHTS):
        shutil.copyfile(adapter / name, target / name)
    (folder / SETTINGS_FILE).write_text(LMSettings.model_validate(settings.model_dump()).model_dump_json(indent=1) + "\n")
    return str(folder / SETTINGS_FILE)


def report(result: dict[str, Any]) -> str:
    from bench.precise.answer_probe import auroc_table_lines

    trained = result.get("trained", {})
    lines = ["# A yes/no adapter for the precise tier, judged on the reader probe", "",
             (f"Command: `{result['command']}` ({result['items']} probe yes/no items, {result['seconds']} s). "
              f"Rule: [rule_noul_adapter.md](rule_noul_adapter.md), written before any measurement."), ""]
    if trained:
        lines += [(f"Adapter: `{trained.get('command', '?')}`: {trained.get('updates')} updates over {trained.get('questions')} "
                   f"questions about {trained.get('states')} states ({trained.get('seconds')} s on the CPU); training loss "
                   f"{trained.get('loss_first_40')} (first 40 states) → {trained.get('loss_last_40')} (last 40)."), ""]
    lines += auroc_table_lines(result["table"])
    lines += ["", (f"Negated forms: {result['negated_items']} items. Adopted (adapter ≥ shipped + {ADOPT_MARGIN} and higher on "
                   f"negated forms): **{'yes' if result['adopted'] else 'no'}**.")]
    if result.get("written"):
        lines += ["", f"Settings written to `{result['written']}`."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(required=True)
    t = sub.add_parser("train", help="train the adapter")
    t.add_argument("--out", default="runs/noul_adapter")
    t.add_argument("--per-set", type=int, default=80, help="reader-recipe rows a set (their yes/no questions are kept)")
    t.add_argument("--minutes", type=float, default=50.0)
    t.add_argument("--save-minutes", type=float, default=10.0)
    t.add_argument("--lr", type=float, default=2e-4)
    t.add_argument("--warmup", type=int, default=20)
    t.add_argument("--accumulate", type=int, default=4, help="states an update")
    t.add_argument("--rank", type=int, default=8)
    t.add_argument("--state-tokens", type=int, default=256)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--threads", type=int, default=2)
    t.set_defaults(func=train)
    j = sub.add_parser("judge", help="judge an adapter on the reader probe by the rule")
    j.add_argument("--adapter", required=True)
    j.add_argument("--out", default=str(HERE / "noul_adapter"), help="report stem (default bench/precise/noul_adapter)")
    j.add_argument("--write", default=None, help="write adopted settings to this folder")
    j.add_argument("--threads", type=int, default=2)
    j.set_defaults(func=judge)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
