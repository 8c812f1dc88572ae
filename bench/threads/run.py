"""How many torch threads a request should get on this machine: one untaught yes/no question on ``mini``, one
request at a time, with 1 and 2 threads, on a quiet machine and beside a busy process (another torch job on one
thread, as a second model or a retrain would be). Each setting runs in a fresh process; settings interleave.

    .venv/bin/python bench/threads/run.py        # writes bench/threads/results.md and .json
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent
PROBE = r"""
import os, sys, time, statistics
import torch
torch.set_num_threads(int(sys.argv[1]))
from langchain_core.decisions import Noul
from clef_agents.model import ClefDecisionModel
m = ClefDecisionModel.from_pretrained("mini")
q = {"urgent": Noul(instructions="Does the customer need an answer today?")}
texts = [f"ticket {i}: my card was charged twice and the app keeps crashing when I open it" for i in range(45)]
for t in texts[:5]:
    m.invoke({"state": t, "questions": q})
times = []
for t in texts[5:]:
    s = time.perf_counter(); m.invoke({"state": t, "questions": q}); times.append(time.perf_counter() - s)
print(1000 * statistics.median(times), 1000 * sorted(times)[int(0.9 * len(times))])
"""
BUSY = "import torch\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\nwhile True:\n    a = torch.tanh(a @ a)\n"


def one(threads: int, busy: bool) -> tuple[float, float]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    other = subprocess.Popen([sys.executable, "-c", BUSY]) if busy else None
    try:
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(threads)],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=True,
        ).stdout.split()
    finally:
        if other is not None:
            other.kill()
            other.wait()
    return float(out[0]), float(out[1])


def main() -> int:
    rows: dict[str, list[tuple[float, float]]] = {}
    for _ in range(2):
        for busy in (False, True):
            for threads in (1, 2):
                rows.setdefault(f"{threads}|{busy}", []).append(one(threads, busy))
    result = {
        k: {"p50_ms": statistics.median(p for p, _ in v), "p90_ms": statistics.median(q for _, q in v)}
        for k, v in rows.items()
    }
    (OUT / "results.json").write_text(json.dumps({"cpu_count": os.cpu_count(), "results": result}, indent=1) + "\n")
    lines = [
        "# Torch threads for one request on this machine",
        "",
        f"Command: `.venv/bin/python bench/threads/run.py` ({os.cpu_count()} cores; one untaught yes/no question on "
        "mini, 40 requests one at a time after 5 warm-ups, each setting twice in fresh processes, interleaved; "
        "median of the two runs' p50 and p90). Busy: another process runs a torch matmul loop on one thread.",
        "",
        "| machine | 1 thread p50 / p90 ms | 2 threads p50 / p90 ms | 2 threads ÷ 1 thread (p50) |",
        "|---|---:|---:|---:|",
    ]
    for busy in (False, True):
        one_t, two_t = result[f"1|{busy}"], result[f"2|{busy}"]
        lines.append(
            f"| {'busy' if busy else 'quiet'} | {one_t['p50_ms']:.0f} / {one_t['p90_ms']:.0f} | "
            f"{two_t['p50_ms']:.0f} / {two_t['p90_ms']:.0f} | {two_t['p50_ms'] / one_t['p50_ms']:.2f} |"
        )
    (OUT / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    t = time.perf_counter()
    code = main()
    print(f"{time.perf_counter() - t:.0f} s")
    raise SystemExit(code)
