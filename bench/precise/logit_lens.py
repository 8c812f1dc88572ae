"""The precise tier's yes/no answer read at an earlier layer (logit lens), judged on the reader probe by the rule in
bench/precise/rule_logit_lens.md, written before any measurement.

Reads the answer-cue states that ``answer_probe.py features`` stored (stop 35) for the probe's 180 yes/no items
and 1,103 training questions, applies the LM's final norm and head to each layer's state, chooses the layer on the
training questions and judges it once on the probe. The LM is not run; only its norm and head weights are read.

Run:   .venv/bin/python bench/precise/logit_lens.py --features runs/answer_probe/features.pt
Writes bench/precise/logit_lens.json and .md.
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
    SHIPPED_NOUL_CORRECTION,
    beats_shipped,
)
from bench.precise.noul_adapter import MIN_ITEMS as MIN_PROBE_ITEMS
from bench.reports import write_report

MIN_TRAIN_ITEMS = 10
STORED_TOLERANCE = 0.05
"""How far the head's margin at the last layer may be from the stored margin (states are stored in float16)."""


class LogitLens:
    """The LM's final RMS norm and head, read from its weights file, applied to a layer's states."""

    def __init__(self, folder: Path):
        import torch
        from safetensors import safe_open
        from transformers import AutoTokenizer

        from clef_agents.model.precise import NO_WORDS, YES_WORDS, first_token_ids

        config = json.loads((folder / "config.json").read_text())
        head_name = "model.embed_tokens.weight" if config.get("tie_word_embeddings") else "lm_head.weight"
        with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
            self.norm = weights.get_tensor("model.norm.weight").float()
            self.head = weights.get_tensor(head_name).float()
        self.eps = float(config["rms_norm_eps"])
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.yes = torch.tensor(first_token_ids(tokenizer, YES_WORDS))
        self.no = torch.tensor(first_token_ids(tokenizer, NO_WORDS))

    def margins(self, states: Any, normed: bool = False) -> list[float]:
        """log mass(yes) − log mass(no) of the head's distribution for ``states`` ``[n, hidden]``; ``normed``: the
        states are already after the final norm (the last layer's, as stored)."""
        import torch

        x = states.float()
        if not normed:
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm
        log_probs = torch.log_softmax(x @ self.head.T, dim=-1)
        return (torch.logsumexp(log_probs[:, self.yes], -1) - torch.logsumexp(log_probs[:, self.no], -1)).tolist()


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from bench.precise.answer_probe import auroc_table
    from clef_agents.model.precise import dequantised_folder, precise_gguf

    started = time.time()
    data = torch.load(args.features, weights_only=False)
    layers = list(data["layers"])
    lens = LogitLens(Path(args.lm_folder) if args.lm_folder else dequantised_folder(precise_gguf()))
    last = len(layers) - 1
    check = lens.margins(data["probe"]["features"][:, last], normed=True)
    gap = max(abs(a - b) for a, b in zip(check, data["probe"]["margin"]))
    if gap > STORED_TOLERANCE:
        raise SystemExit(f"the head at the last layer gives margins up to {gap:.3f} from the stored ones: wrong weights")
    by_layer = {}
    for part in ("train", "probe"):
        features = data[part]["features"]
        by_layer[part] = {layer: lens.margins(features[:, i], normed=(i == last)) for i, layer in enumerate(layers)}
    train = data["train"]
    train_sources = [m["dataset"] for m in train["meta"]]
    train_table = auroc_table({str(layer): by_layer["train"][layer] for layer in layers}, list(train["yes"]), train_sources,
                              [], MIN_TRAIN_ITEMS)
    chosen = max(layers, key=lambda layer: (train_table[str(layer)]["mean"], layer))
    probe = data["probe"]
    shipped = [m - SHIPPED_NOUL_CORRECTION * p for m, p in zip(probe["margin"], probe["prior"])]
    negated = [i for i, m in enumerate(probe["meta"]) if m["form"].endswith("negated")]
    scores = {"shipped (raw − 0.5 prior, last layer)": shipped, **{f"layer {layer} (raw)": by_layer["probe"][layer] for layer in layers}}
    probe_table = auroc_table(scores, list(probe["yes"]), [m["dataset"] for m in probe["meta"]], negated, MIN_PROBE_ITEMS)
    adopted = beats_shipped(probe_table["shipped (raw − 0.5 prior, last layer)"], probe_table[f"layer {chosen} (raw)"])
    return {"command": " ".join([".venv/bin/python bench/precise/logit_lens.py", *sys.argv[1:]]),
            "rule": "rule_logit_lens.md", "layers": layers, "stored_gap": round(gap, 4), "chosen": chosen,
            "train_table": train_table, "probe_table": probe_table, "negated_items": len(negated), "adopted": adopted,
            "train_items": len(train_sources), "probe_items": len(shipped), "seconds": round(time.time() - started, 1)}


def report(result: dict[str, Any]) -> str:
    from bench.precise.answer_probe import auroc_table_lines

    lines = ["# The precise tier's yes/no answer read at an earlier layer (logit lens)", "",
             (f"Command: `{result['command']}` ({result['seconds']} s; the LM is not run). Rule: "
              f"[{result['rule']}]({result['rule']}), written before any measurement. At the last layer the head gives "
              f"back the stored margins to within {result['stored_gap']}."), "",
             f"## Choosing the layer on {result['train_items']} training questions (sources with ≥ {MIN_TRAIN_ITEMS} items)", "",
             "| layer | mean AUROC over sources |", "|---|---:|"]
    lines += [f"| {layer} | {row['mean']:.3f} |" for layer, row in result["train_table"].items()]
    lines += ["", f"Chosen: layer {result['chosen']}.", "",
              f"## The probe's {result['probe_items']} yes/no items (every layer shown; only the chosen one is judged)", "",
              *auroc_table_lines(result["probe_table"])]
    lines += ["", (f"Negated forms: {result['negated_items']} items. Adopted (layer {result['chosen']} ≥ shipped + "
                   f"{ADOPT_MARGIN} and higher on negated forms): **{'yes' if result['adopted'] else 'no'}**.")]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", type=Path, default=ROOT / "runs" / "answer_probe" / "features.pt")
    parser.add_argument("--lm-folder", default=None, help="the dequantised precise LM (default: the one in the cache)")
    parser.add_argument("--out", type=Path, default=HERE / "logit_lens", help="report stem (default bench/precise/logit_lens)")
    args = parser.parse_args()
    result = run(args)
    write_report(args.out, result, report(result))


if __name__ == "__main__":
    main()
