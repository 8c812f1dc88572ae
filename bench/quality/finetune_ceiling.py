"""Issue 3, backbone ceiling: how far does the *whole* MiniLM go on one data set when nothing is
shared and nothing is frozen?

For each data set named, the all-MiniLM-L6-v2 encoder is fine-tuned end to end (every weight,
embeddings included) with a mean pool and one linear layer on top, on that set's train split
alone, with its canonical question's labels as classes. Each epoch it is scored on the set's
valid split (carved from train where the set has none, the same carve `mini` uses); the epoch
with the best valid accuracy is the one whose test accuracy is reported. Several seeds can be run;
the report gives each and their mean. The test split is never used for any choice. With
`--multitask`, one encoder is trained on all the named sets together (a linear layer per set,
batches of one set each, interleaved at random), as `mini`'s shared adapter would be.

This is the single-task upper reference for what this backbone learns from these records on this
machine, and it asks nothing of `mini`'s design: no options in the input, no shared adapter, one
model per set. `mini` must answer every set with one backbone pass shared by all questions, so a
target that this ceiling does not reach is out of this backbone's reach by fine-tuning.

States are tokenised as `mini` reads them: at most 256 tokens; a longer state keeps its first 40 %
and last 60 % of the window (`head_tail`, tail share 0.6), so a bfcl_relevance request after a
long tool list is kept.

Run:   HF_HUB_OFFLINE=1 .venv/bin/python bench/quality/finetune_ceiling.py --datasets sst5 bfcl_relevance
Writes bench/quality/results/finetune_ceiling.{json,md,png}; a row already in the JSON is kept unless
run again (new seeds with the same settings are added to it). Wall time on 2 cores: in the report
(sst5 about 2 min an epoch, bfcl_relevance about 6).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tqdm import tqdm
from transformers import AutoModel, AutoTokenizer, get_linear_schedule_with_warmup

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.baselines.minilm import minilm_folder
from clef_agents import wire
from clef_agents.model.encoder import truncate_state_ids
from clef_agents.model.taught import mean_pool
from clef_agents.train.datasets import load_records

OUT = ROOT / "bench" / "quality" / "results"
MAX_TOKENS = 256
TAIL_SHARE = 0.6
TARGETS = {"banking77": 0.945, "hwu64": 0.925, "sst5": 0.50, "bfcl_relevance": 0.90}


@dataclass
class Split:
    """Token ids (already windowed) and class indices of one split."""

    ids: list[list[int]]
    labels: list[int]


def label_key(record: dict[str, Any]) -> Any:
    """The gold label of a record's only question (its value as the records store it)."""
    labels = record["labels"]
    if len(labels) != 1:
        raise ValueError(f"expected one question per record, found {sorted(labels)}")
    return next(iter(labels.values()))


def window(ids: list[int], cls_id: int, sep_id: int) -> list[int]:
    """`[CLS] body [SEP]` in at most MAX_TOKENS, the body cut as `mini` cuts it (`head_tail`)."""
    return [cls_id, *truncate_state_ids(ids, MAX_TOKENS - 2, "head_tail", TAIL_SHARE), sep_id]


def encode(records: list[dict[str, Any]], tokenizer: Any, classes: dict[Any, int]) -> Split:
    """Tokenise the states (no special tokens, no truncation) and window them."""
    texts = [wire.state_text(r["state"]) for r in records]
    bodies = tokenizer(texts, add_special_tokens=False, truncation=False)["input_ids"]
    ids = [window(b, tokenizer.cls_token_id, tokenizer.sep_token_id) for b in bodies]
    return Split(ids=ids, labels=[classes[label_key(r)] for r in records])


ADAPTERS: dict[str, Any] = {
    "full": None,
    "top1": 1,
    "top2": 2,
    "mini-lora": (("query", "value"), (3, 4, 5)),
    "wide-lora": (("query", "key", "value", "dense"), (0, 1, 2, 3, 4, 5)),
}
"""What is trained in the encoder: every weight, the top 1 or 2 blocks (the rest frozen), or LoRA (r=16, alpha=32, dropout 0.05) on the named
modules of the named layers: `mini-lora` is the shipped `mini`'s adapter, `wide-lora` every linear
layer of every block."""


def adapt(encoder: torch.nn.Module, adapter: str) -> torch.nn.Module:
    """The encoder with its trainable part set as `adapter` says."""
    if ADAPTERS[adapter] is None:
        return encoder
    if isinstance(ADAPTERS[adapter], int):
        layers = encoder.encoder.layer
        for p in encoder.parameters():
            p.requires_grad_(False)
        for block in layers[len(layers) - ADAPTERS[adapter] :]:
            for p in block.parameters():
                p.requires_grad_(True)
        return encoder
    from peft import LoraConfig, get_peft_model

    suffixes, layers = ADAPTERS[adapter]
    targets = [
        name for name, module in encoder.named_modules()
        if isinstance(module, torch.nn.Linear)
        and any(name.startswith(f"encoder.layer.{i}.") for i in layers)
        and any(name.endswith(f".{s}") for s in suffixes)
    ]
    config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=targets, bias="none")
    return get_peft_model(encoder, config)


class Classifier(torch.nn.Module):
    """MiniLM (adapted as `adapter` says), mean pool, dropout, and one linear layer per data set."""

    def __init__(self, n_classes: dict[str, int], adapter: str = "full"):
        super().__init__()
        self.encoder = adapt(AutoModel.from_pretrained(minilm_folder(), dtype=torch.float32), adapter)
        self.dropout = torch.nn.Dropout(0.1)
        size = self.encoder.config.hidden_size
        self.outs = torch.nn.ModuleDict({name: torch.nn.Linear(size, n) for name, n in n_classes.items()})

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, name: str) -> torch.Tensor:
        hidden = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return self.outs[name](self.dropout(mean_pool(hidden, mask)))


def batches(split: Split, size: int, order: list[int]):
    """Padded (ids, mask, labels) batches in the given order."""
    for start in range(0, len(order), size):
        chosen = order[start : start + size]
        width = max(len(split.ids[i]) for i in chosen)
        ids = torch.zeros(len(chosen), width, dtype=torch.long)
        mask = torch.zeros(len(chosen), width, dtype=torch.long)
        for row, i in enumerate(chosen):
            ids[row, : len(split.ids[i])] = torch.tensor(split.ids[i])
            mask[row, : len(split.ids[i])] = 1
        yield ids, mask, torch.tensor([split.labels[i] for i in chosen])


@torch.inference_mode()
def score(model: Classifier, split: Split, name: str, batch_size: int = 64) -> dict[str, float]:
    """Accuracy and NLL; states sorted by length so padding stays small."""
    model.eval()
    order = sorted(range(len(split.ids)), key=lambda i: len(split.ids[i]))
    correct, nll = 0, 0.0
    for ids, mask, labels in batches(split, batch_size, order):
        logits = model(ids, mask, name)
        correct += int((logits.argmax(-1) == labels).sum())
        nll += float(F.cross_entropy(logits, labels, reduction="sum"))
    return {"accuracy": correct / len(split.ids), "nll": nll / len(split.ids)}


def length_bucketed_order(split: Split, batch_size: int, rng: random.Random) -> list[int]:
    """A shuffled order whose batches hold states of similar length (less padding, same data)."""
    order = list(range(len(split.ids)))
    rng.shuffle(order)
    chunk = batch_size * 50
    out: list[int] = []
    for start in range(0, len(order), chunk):
        out.extend(sorted(order[start : start + chunk], key=lambda i: len(split.ids[i])))
    groups = [out[i : i + batch_size] for i in range(0, len(out), batch_size)]
    rng.shuffle(groups)
    return [i for g in groups for i in g]


def load_set(name: str, tokenizer: Any, limit: int | None = None) -> tuple[dict[str, Split], int]:
    """A set's train/valid/test splits, tokenised, and its number of classes (``limit``: at most that
    many records per split, for a quick check of the script)."""
    raw = {s: load_records(name, s)[:limit] for s in ("train", "valid", "test")}
    labels = {label_key(r) for records in raw.values() for r in records}
    classes = {label: i for i, label in enumerate(sorted(labels, key=str))}
    return {s: encode(records, tokenizer, classes) for s, records in raw.items()}, len(classes)


def epoch_plan(data: dict[str, dict[str, Split]], batch_size: int, rng: random.Random) -> list[tuple[str, list[int]]]:
    """One epoch: every set's train split once, in length-bucketed batches of one set each; with several
    sets the batches are interleaved at random (so each set is seen in proportion to its size)."""
    plan = []
    for name, splits in data.items():
        order = length_bucketed_order(splits["train"], batch_size, rng)
        plan += [(name, order[i : i + batch_size]) for i in range(0, len(order), batch_size)]
    if len(data) > 1:
        rng.shuffle(plan)
    return plan


def run(names: list[str], seed: int, epochs: int, batch_size: int, lr: float, lr_head: float, adapter: str,
        limit: int | None = None) -> dict[str, dict[str, Any]]:
    """Fine-tune one encoder on the named sets together (one set: alone) with one seed; per set,
    every epoch's valid and test scores and the epoch chosen by that set's valid accuracy."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(minilm_folder())
    loaded = {name: load_set(name, tokenizer, limit) for name in names}
    data = {name: splits for name, (splits, _) in loaded.items()}
    model = Classifier({name: n for name, (_, n) in loaded.items()}, adapter)
    encoder_params = [p for p in model.encoder.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(
        [{"params": encoder_params, "lr": lr}, {"params": list(model.outs.parameters()), "lr": lr_head}],
        weight_decay=0.01,
    )
    steps = epochs * sum(math.ceil(len(d["train"].ids) / batch_size) for d in data.values())
    schedule = get_linear_schedule_with_warmup(optimiser, int(0.06 * steps), steps)
    label = "+".join(names)
    history: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    started = time.perf_counter()
    bar = tqdm(total=steps, desc=f"{label} {adapter} seed {seed}", unit="step", dynamic_ncols=True)
    for epoch in range(1, epochs + 1):
        model.train()
        for name, chosen in epoch_plan(data, batch_size, rng):
            ids, mask, labels = next(batches(data[name]["train"], batch_size, chosen))
            loss = F.cross_entropy(model(ids, mask, name), labels)
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{float(loss):.3f}")
        seconds = round(time.perf_counter() - started, 1)
        for name in names:
            history[name].append({"epoch": epoch, "valid": score(model, data[name]["valid"], name),
                                  "test": score(model, data[name]["test"], name), "seconds": seconds})
            bar.write(f"{name} {adapter} seed {seed} epoch {epoch}: {json.dumps(history[name][-1])}")
    bar.close()
    out = {}
    for name in names:
        best = max(history[name], key=lambda h: (h["valid"]["accuracy"], -h["epoch"]))
        out[name] = {"seed": seed, "adapter": adapter, "trained_encoder_parameters": sum(p.numel() for p in encoder_params),
                     "trained_with": names, "epochs": epochs, "batch_size": batch_size, "lr": lr, "lr_head": lr_head,
                     "chosen_epoch": best["epoch"], "valid": best["valid"], "test": best["test"],
                     "history": history[name], "wall_seconds": history[name][-1]["seconds"],
                     "sizes": {s: len(d.ids) for s, d in data[name].items()}, "classes": loaded[name][1]}
    return out


def mini_accuracy(name: str) -> float | None:
    """The shipped `mini`'s committed test accuracy on the set (bench/quality/results/mini/report.json)."""
    path = OUT / "mini" / "report.json"
    if not path.exists():
        return None
    by_type = json.loads(path.read_text())["datasets"].get(name, {})
    for entry in by_type.values():
        return entry["calibrated"]["accuracy"]
    return None


def earlier_runs(entry: dict[str, Any] | None, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of an earlier report entry with the same settings and other seeds (kept beside new seeds)."""
    if entry is None:
        return []
    settings = {(r["epochs"], r["batch_size"], r["lr"]) for r in runs}
    seeds = {r["seed"] for r in runs}
    return [r for r in entry["runs"] if r["seed"] not in seeds and (r["epochs"], r["batch_size"], r["lr"]) in settings]


def summarise(name: str, adapter: str, runs: list[dict[str, Any]], command: str) -> dict[str, Any]:
    tests = [r["test"]["accuracy"] for r in runs]
    return {"dataset": name, "adapter": adapter, "command": command, "runs": runs, "test_accuracy_mean": sum(tests) / len(tests), "test_accuracies": tests,
            "mini_test_accuracy": mini_accuracy(name), "target": TARGETS.get(name)}


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Backbone ceiling: MiniLM fine-tuned end to end, one set at a time",
        "",
        "Each row: the encoder (trained as the brackets say) + mean pool + linear layer, trained on that set's train split",
        "alone or, in multi-task rows, on the train splits of all the sets its command names (one shared encoder, a linear",
        "layer per set); the epoch is chosen by the set's valid accuracy; test accuracy of that epoch (never used for a choice).",
        "",
        "| set (encoder training) | classes | train | seeds | epochs (chosen) | encoder lr | valid acc. | test acc. (mean) | shipped `mini` | target | wall time | command |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, entry in report["datasets"].items():
        runs = entry["runs"]
        valid = sum(r["valid"]["accuracy"] for r in runs) / len(runs)
        epochs = ", ".join(f"{len(r['history'])} ({r['chosen_epoch']})" for r in runs)
        mini = entry["mini_test_accuracy"]
        target = entry["target"]
        wall = sum(r["wall_seconds"] for r in runs) / 60
        lines.append(
            f"| {name} | {runs[0]['classes']} | {runs[0]['sizes']['train']} | {len(runs)} | {epochs} | {runs[0]['lr']:g} | {valid:.1%} | "
            f"{entry['test_accuracy_mean']:.1%} ({', '.join(f'{t:.1%}' for t in entry['test_accuracies'])}) | "
            f"{'–' if mini is None else f'{mini:.1%}'} | {'–' if target is None else f'≥ {target:.1%}'} | {wall:.0f} min | `{entry['command']}` |"
        )
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """Test accuracy per epoch, one panel per data set and a line per adapter and seed (dotted:
    valid), with the shipped `mini` and the target as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_set: dict[str, list[dict[str, Any]]] = {}
    for entry in report["datasets"].values():
        by_set.setdefault(entry["dataset"], []).append(entry)
    fig, axes = plt.subplots(1, len(by_set), figsize=(4.4 * len(by_set), 3.6), squeeze=False)
    for ax, (name, entries) in zip(axes[0], by_set.items()):
        for entry, colour in zip(entries, plt.get_cmap("tab10").colors[4:] + plt.get_cmap("tab10").colors[:2]):
            for run in entry["runs"]:
                epochs = [h["epoch"] for h in run["history"]]
                ax.plot(epochs, [h["test"]["accuracy"] for h in run["history"]], marker="o", color=colour,
                        label=f"{entry['adapter']}, seed {run['seed']}")
                ax.plot(epochs, [h["valid"]["accuracy"] for h in run["history"]], linestyle=":", color=colour)
        if entries[0]["mini_test_accuracy"] is not None:
            ax.axhline(entries[0]["mini_test_accuracy"], color="tab:green", label="shipped mini")
        if entries[0]["target"] is not None:
            ax.axhline(entries[0]["target"], color="tab:red", linestyle="--", label="issue 3 target")
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy (dotted: valid)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["sst5", "bfcl_relevance"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--adapter", choices=sorted(ADAPTERS), default="full")
    parser.add_argument("--lr", type=float, default=None, help="encoder learning rate (default 5e-5 full, 5e-4 LoRA)")
    parser.add_argument("--lr-head", type=float, default=1e-3)
    parser.add_argument("--multitask", action="store_true",
                        help="train one encoder on all the named sets together (a linear layer per set)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="at most this many records per split (a quick check)")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of finetune_ceiling.{json,md,png}")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    path = out / "finetune_ceiling.json"
    report = json.loads(path.read_text()) if path.exists() else {"datasets": {}}
    report["datasets"] = {f"{e.get('dataset', k)} ({e.get('adapter', 'full')})": {"dataset": k, "adapter": "full", **e}
                          for k, e in report["datasets"].items()}
    command = "HF_HUB_OFFLINE=1 .venv/bin/python bench/quality/finetune_ceiling.py " + " ".join(sys.argv[1:])
    lr = args.lr if args.lr is not None else (5e-5 if args.adapter == "full" else 5e-4)
    groups = [args.datasets] if args.multitask else [[name] for name in args.datasets]
    for names in groups:
        by_seed = [run(names, seed, args.epochs, args.batch_size, lr, args.lr_head, args.adapter, args.limit) for seed in args.seeds]
        for name in names:
            adapter = args.adapter if len(names) == 1 else f"{args.adapter}, multi-task"
            key = f"{name} ({adapter})"
            runs = [result[name] for result in by_seed]
            runs = earlier_runs(report["datasets"].get(key), runs) + runs
            commands = f"{report['datasets'][key]['command']}; {command}" if len(runs) > len(args.seeds) else command
            report["datasets"][key] = summarise(name, adapter, runs, commands)
        path.write_text(json.dumps(report, indent=2) + "\n")
        (out / "finetune_ceiling.md").write_text(markdown(report))
        plot(report, out / "finetune_ceiling.png")
        print(markdown(report), flush=True)


if __name__ == "__main__":
    main()
