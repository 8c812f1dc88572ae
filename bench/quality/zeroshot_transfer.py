"""Issue 3, zero-shot study: can anything learned from *other* intent sets beat plain label-name
similarity on an intent set the model never saw?

For each target among banking77, clinc150 (in-scope rows, `oos` masked) and hwu64, the test
states are asked with bare label names (underscores read as spaces) and scored by:

- `cosine`: cosine of the frozen MiniLM mean-pooled state and label name (the issue's baseline);
- `centred`: the same after subtracting the mean of the *source* sets' train states from the state
  and the mean of the target's label vectors from each label (no target state is looked at);
- `maxsim`: for each label-name token the best cosine over the state's tokens, averaged (late
  interaction on frozen token states), and `cosine + 0.5 maxsim`;
- `learned map (state|option|both)`: residual linear maps `s + As`, `o + Bo` (start at zero, L2
  1e-3 toward zero) on the unit vectors, trained by softmax cross-entropy over each source set's
  own options (bare names or names with descriptions, at random) on the two *other* intent sets'
  train splits; scored after 250, 750 and 1,500 steps of batch 128.

The target's own train/valid data never enters; nothing is chosen on a target's test split (all
rows are reported). The shipped head's own zero-shot figure is in MODEL_CARD.md ("Zero-shot").

Run:   HF_HUB_OFFLINE=1 .venv/bin/python bench/quality/zeroshot_transfer.py
Writes bench/quality/results/zeroshot_transfer.{json,md,png} (about 10 minutes on 2 cores).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
torch.set_num_threads(2)

from clef_agents.model import ClefDecisionModel  # noqa: E402
from clef_agents.train.datasets import canonical_question, load_records  # noqa: E402

OUT = Path(__file__).parent / "results"
TARGETS = ["banking77", "clinc150", "hwu64"]
MAP_STEPS = (250, 750, 1500)
MAXSIM_WEIGHT = 0.5
TOKEN_LIMIT = 64


def humanise(name: str) -> str:
    return name.replace("_", " ").replace("-", " ").strip()


class Frozen:
    """Frozen MiniLM (the shipped checkpoint's backbone with its adapter off)."""

    def __init__(self) -> None:
        self.engine = ClefDecisionModel.from_pretrained("mini").engine

    def pooled(self, texts: list[str]) -> torch.Tensor:
        vectors = torch.cat([self.engine.encode_texts(texts[i:i + 512]) for i in range(0, len(texts), 512)])
        self.engine._text_cache.clear()
        return F.normalize(vectors, dim=-1)

    @torch.no_grad()
    def tokens(self, texts: list[str]) -> list[torch.Tensor]:
        """Unit token states per text, without [CLS] and [SEP]."""
        engine, rows = self.engine, []
        for start in range(0, len(texts), 128):
            batch = engine.backbone.tokenizer(texts[start:start + 128], padding=True, truncation=True,
                                              max_length=TOKEN_LIMIT, return_tensors="pt")
            with engine._network_in_eval(), engine._adapters_disabled():
                hidden = engine._hidden(batch["input_ids"], batch["attention_mask"]).float()
            lengths = batch["attention_mask"].sum(1)
            for row, length in zip(hidden, lengths):
                rows.append(F.normalize(row[1:int(length) - 1], dim=-1))
        return rows


def load_set(frozen: Frozen, name: str) -> dict:
    question = canonical_question(name, descriptions=True)
    names = list(question["criteria"])
    data = {"names": names, "descriptions": [question["criteria"][n] for n in names]}
    for split in ("train", "test"):
        records = load_records(name, split)
        (qid,) = records[0]["questions"]
        data[split + "_texts"] = [r["state"] for r in records]
        data[split] = (frozen.pooled(data[split + "_texts"]), torch.tensor([names.index(r["labels"][qid]) for r in records]))
    data["bare"] = frozen.pooled([humanise(n) for n in names])
    data["described"] = frozen.pooled([f"{humanise(n)}: {d}" if d else humanise(n) for n, d in zip(names, data["descriptions"])])
    return data


def accuracy(scores: torch.Tensor, data: dict) -> float:
    """Top-1 accuracy; on clinc150 over in-scope rows with `oos` masked out."""
    gold = data["test"][1]
    scores = scores.clone()
    keep = torch.ones(len(gold), dtype=torch.bool)
    if "oos" in data["names"]:
        oos = data["names"].index("oos")
        scores[:, oos] = float("-inf")
        keep = gold != oos
    return float((scores.argmax(1)[keep] == gold[keep]).float().mean())


def maxsim(states: list[torch.Tensor], labels: list[torch.Tensor]) -> torch.Tensor:
    sizes = [len(label) for label in labels]
    stacked = torch.cat(labels)  # [sum tokens, H]
    owner = torch.repeat_interleave(torch.arange(len(labels)), torch.tensor(sizes))
    out = torch.zeros(len(states), len(labels))
    for i, state in enumerate(states):
        best = (stacked @ state.T).max(1).values
        out[i] = torch.zeros(len(labels)).index_add_(0, owner, best) / torch.tensor(sizes, dtype=torch.float)
    return out


def train_map(sources: list[dict], mode: str, seed: int = 0) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
    """Residual maps trained on the sources; returns (step, A, B) snapshots."""
    generator = torch.Generator().manual_seed(seed)
    dim = sources[0]["bare"].shape[1]
    state_map = torch.zeros(dim, dim, requires_grad=mode in ("state", "both"))
    option_map = torch.zeros(dim, dim, requires_grad=mode in ("option", "both"))
    log_scale = torch.tensor(20.0).log().requires_grad_(True)
    trained = [p for p in (state_map, option_map) if p.requires_grad]
    optimiser = torch.optim.AdamW([{"params": trained, "lr": 1e-3, "weight_decay": 0.0},
                                   {"params": [log_scale], "lr": 1e-2, "weight_decay": 0.0}])
    snapshots = []
    for step in range(1, max(MAP_STEPS) + 1):
        data = sources[step % len(sources)]
        states, gold = data["train"]
        rows = torch.randint(len(gold), (128,), generator=generator)
        described = torch.rand(len(data["names"]), generator=generator) < 0.5
        options = torch.where(described.unsqueeze(1), data["described"], data["bare"])
        s = F.normalize(states[rows] + states[rows] @ state_map.T, dim=-1)
        o = F.normalize(options + options @ option_map.T, dim=-1)
        loss = F.cross_entropy(log_scale.exp() * s @ o.T, gold[rows]) + 1e-3 * sum((p ** 2).sum() for p in trained)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if step in MAP_STEPS:
            snapshots.append((step, state_map.detach().clone(), option_map.detach().clone()))
    return snapshots


def mapped_scores(data: dict, state_map: torch.Tensor, option_map: torch.Tensor) -> torch.Tensor:
    states, options = data["test"][0], data["bare"]
    return F.normalize(states + states @ state_map.T, dim=-1) @ F.normalize(options + options @ option_map.T, dim=-1).T


def study() -> dict:
    frozen = Frozen()
    sets = {}
    for name in TARGETS:
        started = time.time()
        sets[name] = load_set(frozen, name)
        print(f"{name}: states in {time.time() - started:.0f} s", flush=True)
    results = {}
    for target in TARGETS:
        data = sets[target]
        sources = [sets[n] for n in TARGETS if n != target]
        rows = {}
        cosine = data["test"][0] @ data["bare"].T
        rows["cosine"] = accuracy(cosine, data)
        source_mean = torch.cat([s["train"][0] for s in sources]).mean(0)
        label_mean = data["bare"].mean(0)
        rows["centred"] = accuracy(F.normalize(data["test"][0] - source_mean, dim=-1)
                                   @ F.normalize(data["bare"] - label_mean, dim=-1).T, data)
        late = maxsim(frozen.tokens(data["test_texts"]), frozen.tokens([humanise(n) for n in data["names"]]))
        rows["maxsim"] = accuracy(late, data)
        rows[f"cosine + {MAXSIM_WEIGHT} maxsim"] = accuracy(cosine + MAXSIM_WEIGHT * late, data)
        for mode in ("state", "option", "both"):
            for step, state_map, option_map in train_map(sources, mode):
                rows[f"learned map ({mode}), {step} steps"] = accuracy(mapped_scores(data, state_map, option_map), data)
        results[target] = {"sources": [n for n in TARGETS if n != target], "n_test": len(data["test"][1]), "accuracy": rows}
        print(target, json.dumps(rows), flush=True)
    return results


def render(results: dict, command: str) -> str:
    methods = list(next(iter(results.values()))["accuracy"])
    lines = ["# Zero-shot transfer on frozen MiniLM states", "", f"`{command}`", "",
             "| method | " + " | ".join(f"{t} (from {' + '.join(r['sources'])})" for t, r in results.items()) + " |",
             "|---|" + "---|" * len(results)]
    for method in methods:
        cells = []
        for r in results.values():
            value, base = r["accuracy"][method], r["accuracy"]["cosine"]
            cells.append(f"{100 * value:.1f} % ({100 * (value - base):+.1f})" if method != "cosine" else f"{100 * value:.1f} %")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", "In brackets: points against `cosine` on the same target. clinc150: in-scope rows, `oos` masked."]
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(next(iter(results.values()))["accuracy"])
    figure, axis = plt.subplots(figsize=(9, 5))
    width = 0.8 / len(results)
    for i, (target, r) in enumerate(results.items()):
        axis.barh([m + i * width for m in range(len(methods))], [100 * r["accuracy"][m] for m in methods], height=width, label=target)
    axis.set_yticks([m + 0.4 - width / 2 for m in range(len(methods))], methods)
    axis.invert_yaxis()
    axis.set_xlabel("zero-shot accuracy, bare label names (%)")
    axis.set_xlim(40, 86)
    axis.axvline(77, color="grey", linestyle="--", linewidth=1)
    axis.text(77.3, len(methods) - 0.5, "issue-3 target\n(banking77)", fontsize=8, color="grey")
    axis.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    started = time.time()
    results = study()
    command = "HF_HUB_OFFLINE=1 .venv/bin/python bench/quality/zeroshot_transfer.py"
    OUT.mkdir(parents=True, exist_ok=True)
    report = {"command": command, "seconds": round(time.time() - started), "targets": results}
    (OUT / "zeroshot_transfer.json").write_text(json.dumps(report, indent=2) + "\n")
    (OUT / "zeroshot_transfer.md").write_text(render(results, command))
    plot(results, OUT / "zeroshot_transfer.png")
    print(f"done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
