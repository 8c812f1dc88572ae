"""What batching the tool-match features saves: one encoder call for all requests of a batch
against one call per request (the engine's path before), on bfcl_relevance test states.

Both paths run on the same model in one process, interleaved, with the tools already cached (as
in a deployment that offers the same tools every turn); the per-request path is the engine with
``_tool_features`` returning nothing, so each taught answer encodes its own request.

Run:   HF_HUB_OFFLINE=1 .venv/bin/python bench/latency/tool_match_batching.py
Writes bench/latency/tool_match_batching.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from clef_agents.model import ClefDecisionModel  # noqa: E402
from clef_agents.train.datasets import load_records  # noqa: E402

BATCH = 32
REPEATS = 7
THREADS = 2
OUT = Path(__file__).parent / "tool_match_batching.json"


def main() -> None:
    torch.set_num_threads(THREADS)
    model = ClefDecisionModel.from_pretrained("mini")
    engine = model.engine
    batched = engine._tool_features
    records = load_records("bfcl_relevance", "test")[:BATCH]
    requests = [{"state": r["state"], "questions": r["questions"]} for r in records]
    paths = {"one call per request": lambda batch, taught: {}, "one call per batch": batched}
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    answers: dict[str, list[float]] = {}
    for _ in range(REPEATS):
        for name, path in paths.items():
            engine._tool_features = path
            model.batch(requests)  # warm: tools cached, as in a deployment
            started = time.perf_counter()
            responses = model.batch(requests)
            seconds[name].append(time.perf_counter() - started)
            answers[name] = [r.answers["call_tool"].noul for r in responses]
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    result = {
        "command": "HF_HUB_OFFLINE=1 .venv/bin/python bench/latency/tool_match_batching.py",
        "batch": BATCH, "repeats": REPEATS, "threads": THREADS,
        "median_seconds": {name: round(value, 4) for name, value in medians.items()},
        "seconds": {name: [round(v, 4) for v in values] for name, values in seconds.items()},
        "speedup": round(medians["one call per request"] / medians["one call per batch"], 3),
        "max_answer_difference": max(abs(a - b) for a, b in zip(*answers.values())),
    }
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("median_seconds", "speedup", "max_answer_difference")}))


if __name__ == "__main__":
    main()
