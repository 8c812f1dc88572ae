"""Precompute what a replay needs per item and keep it beside the results (runs/, not committed):
mini's answer to the task's question (its option probabilities) and the item's MiniLM sentence vector.

Run once (about 40 minutes for all tasks on one core); the replays then read the cache.

    .venv/bin/python bench/autopilot/cache.py --threads 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.autopilot.tasks import TASKS, load_stream, options_of  # noqa: E402

CACHE = Path("runs/autopilot_cache")


def model_probabilities(model, task, texts: list[str], options: tuple[str, ...], batch: int = 32) -> np.ndarray:
    """Mini's option probabilities per item ([n, options]; noul as [p(yes), p(no)])."""
    from clef_agents import wire

    question = task.question()
    if task.name == "banking77":
        question = {**question, "criteria": {name: None for name in options}}
    out = []
    for start in range(0, len(texts), batch):
        requests = [{"state": text, "questions": {"q": question}} for text in texts[start : start + batch]]
        out += [wire.answer_probabilities(response.answers["q"]) for response in model.batch(requests)]
    return np.asarray(out, dtype=np.float32)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=os.environ.get("CLEF_AGENTS_DATA", "../shared/data"))
    parser.add_argument("--tasks", nargs="*", default=list(TASKS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(CACHE))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from clef_agents.autopilot.embedder import SentenceEmbedder
    from clef_agents.model import ClefDecisionModel

    model = ClefDecisionModel.from_pretrained("mini")
    embedder = SentenceEmbedder(cache_size=1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.tasks:
        target = out / f"{name}.npz"
        if target.exists():
            print(f"{name}: cached", flush=True)
            continue
        task = TASKS[name]
        texts, gold = load_stream(task, Path(args.data))
        options = options_of(task, Path(args.data))
        start = time.perf_counter()
        vectors = np.concatenate([embedder.embed(texts[i : i + 256]) for i in range(0, len(texts), 256)])
        embed_s = time.perf_counter() - start
        probs = model_probabilities(model, task, texts, options)
        np.savez_compressed(
            target,
            texts=np.array(texts, dtype=object).astype(str),
            gold=np.array(gold),
            embeddings=vectors,
            model_probs=probs,
            options=np.array(options),
        )
        print(
            f"{name}: {len(texts)} items, embed {embed_s:.0f} s, mini {time.perf_counter() - start - embed_s:.0f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
