"""Load benchmark of the System One server: throughput and latency against concurrency,
with micro-batching on and off, and bad requests fired under load.

The server runs in a subprocess (`clef-agents serve`) on 127.0.0.1; this process drives it with N
concurrent clients (N in 1, 2, 4, 8, 16), each sending one request after another. Every level is
bounded by a request count and a time limit. The same run starts two servers, batched
(`--max-batch-size 16`) and unbatched (`--max-batch-size 1`), and measures them level by level,
interleaved, so the ratios compare like with like on a noisy shared machine. Then, with 16 good clients running against the batched server, it sends
malformed JSON, a 256-option choice, an unknown question type and a 1 MB state, and records that
each got a 4xx while the good requests kept succeeding.

Workload: banking77 test utterances as the state (the real-world support case), one fixed
question set per request (a noul, an 8-option choice, a 3-level score), as a graph node asks it.

Run:   nice -n 5 .venv/bin/python bench/load/run.py
Writes results.json, results.md and load.png in --out (default bench/load/results).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.baselines.server import wait_ready  # noqa: E402
from clef_agents.serve.local import free_port  # noqa: E402
from clef_agents.train.datasets import load_rows  # noqa: E402

OUT_DIR = Path(__file__).resolve().parent / "results"
MINI = "ClefDecisionModel.from_pretrained('mini') (trained head)"
"""How the results describe the default model."""
TARGETS = {"throughput_ratio_at_16_min": 3.0, "p99_over_p50_at_16_max": 5.0}

QUESTIONS = {
    "fraud": {"type": "noul", "instructions": "Does the customer report a payment or card use they did not make?"},
    "topic": {
        "type": "choice",
        "instructions": "Which team should handle this message?",
        "criteria": {
            "cards": "Lost, stolen, blocked or delivered cards, PINs",
            "payments": "Card payments, declined or pending payments",
            "transfers": "Bank transfers in or out, beneficiaries",
            "top_up": "Topping up the account",
            "cash": "Cash withdrawals and ATMs",
            "exchange": "Currencies and exchange rates",
            "account": "Identity, verification, personal details, closing the account",
            "fees": "Fees and charges",
        },
    },
    "urgency": {
        "type": "score",
        "instructions": "How urgent is the message?",
        "criteria": ["can wait", "soon", "right now"],
    },
}


# --------------------------------------------------------------------------- workload


def load_states(limit: int = 2000) -> list[str]:
    """banking77 test utterances (the state of each request)."""
    return [row["text"] for _, row in load_rows("banking77", "test")[:limit]]


def bad_requests() -> dict[str, bytes]:
    """The four invalid requests of issue 5, as raw bodies."""
    good = {"state": "my card is lost", "questions": {"fraud": QUESTIONS["fraud"]}}
    return {
        "malformed_json": b'{"state": "my card is lost", "questions": {"fraud": ',
        "choice_256_options": json.dumps(
            {
                **good,
                "questions": {
                    "q": {
                        "type": "choice",
                        "instructions": "Which queue?",
                        "criteria": {f"queue {i}": None for i in range(256)},
                    }
                },
            }
        ).encode(),
        "unknown_type": json.dumps({**good, "questions": {"q": {"type": "boolean", "instructions": "Lost?"}}}).encode(),
        "state_1mb": json.dumps({**good, "state": "card lost " * 104858}).encode(),
    }


# --------------------------------------------------------------------------- server


def start_server(
    model: str, port: int, max_batch_size: int, max_wait_ms: float, threads: int | None
) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "clef_agents.cli", "serve", "--model", model, "--port", str(port),
        *(["--threads", str(threads)] if threads else []),
        "--max-batch-size", str(max_batch_size), "--max-wait-ms", str(max_wait_ms), "--log-level", "warning",
        "--max-queue", "4096", "--request-timeout", "120",
    ]  # fmt: skip
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONWARNINGS": "ignore",
    }
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- driver


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


@dataclass
class Sample:
    """Raw measurements of one or more driving rounds."""

    clients: int
    latencies_s: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0

    def merge(self, other: Sample) -> None:
        self.latencies_s += other.latencies_s
        for code, count in other.statuses.items():
            self.statuses[code] = self.statuses.get(code, 0) + count
        self.seconds += other.seconds

    def summary(self) -> dict[str, Any]:
        ms = [x * 1000 for x in self.latencies_s]
        return {
            "clients": self.clients,
            "requests": len(ms),
            "seconds": round(self.seconds, 3),
            "throughput_rps": round(len(ms) / self.seconds, 2),
            "p50_ms": round(percentile(ms, 50), 1),
            "p95_ms": round(percentile(ms, 95), 1),
            "p99_ms": round(percentile(ms, 99), 1),
            "mean_ms": round(statistics.fmean(ms), 1),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
        }


async def drive(
    client: httpx.AsyncClient, states: list[str], clients: int, max_requests: int, max_seconds: float, offset: int = 0
) -> Sample:
    """N clients, each sending one request after another, until max_requests or max_seconds."""
    sample = Sample(clients)
    counter = {"next": 0}
    started = time.perf_counter()
    deadline = started + max_seconds

    async def worker() -> None:
        while counter["next"] < max_requests and time.perf_counter() < deadline:
            i = counter["next"]
            counter["next"] += 1
            body = {"model": "jev-latest", "state": states[(offset + i) % len(states)], "questions": QUESTIONS}
            t0 = time.perf_counter()
            r = await client.post("/v1/systemone", json=body)
            sample.latencies_s.append(time.perf_counter() - t0)
            sample.statuses[r.status_code] = sample.statuses.get(r.status_code, 0) + 1

    await asyncio.gather(*(worker() for _ in range(clients)))
    sample.seconds = time.perf_counter() - started
    return sample


async def fire_bad_under_load(
    client: httpx.AsyncClient, states: list[str], clients: int, repeats: int, seconds: float
) -> dict[str, Any]:
    """Good clients at full speed while each bad request is sent `repeats` times, spread over the run."""
    bad = bad_requests()
    results: dict[str, list[int]] = {name: [] for name in bad}

    async def send_bad() -> None:
        for _ in range(repeats):
            for name, raw in bad.items():
                await asyncio.sleep(seconds / (repeats * len(bad) + 1))
                r = await client.post("/v1/systemone", content=raw, headers={"content-type": "application/json"})
                results[name].append(r.status_code)

    sample, _ = await asyncio.gather(drive(client, states, clients, 10**9, seconds, offset=7919), send_bad())
    good = sample.summary()
    return {
        "good": good,
        "bad": {
            name: {"statuses": codes, "all_4xx": all(400 <= c < 500 for c in codes)} for name, codes in results.items()
        },
        "all_bad_got_4xx": all(all(400 <= c < 500 for c in codes) for codes in results.values()),
        "good_all_200": set(good["statuses"]) == {"200"},
    }


async def measure_level(
    client: httpx.AsyncClient, states: list[str], n: int, requests: int, seconds: float, offset: int
) -> tuple[Sample, dict[str, float]]:
    """One round of one concurrency level against one server, with the server's batching counters."""
    before = (await client.get("/v1/stats")).json()
    sample = await drive(client, states, n, requests, seconds, offset=offset)
    after = (await client.get("/v1/stats")).json()
    counters = {key: after[key] - before[key] for key in ("batches", "requests", "model_seconds")}
    return sample, counters


def level_row(sample: Sample, counters: dict[str, float]) -> dict[str, Any]:
    row = sample.summary()
    batches = counters["batches"]
    row["mean_batch_size"] = round(counters["requests"] / batches, 2) if batches else 0.0
    row["model_ms_per_batch"] = round(1000 * counters["model_seconds"] / batches, 1) if batches else 0.0
    return row


async def measure(urls: dict[str, str], states: list[str], args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Every level against every server, interleaved: each level runs in ``--rounds`` rounds that
    alternate the servers, so drifts in machine load hit both alike."""
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    clients = {name: httpx.AsyncClient(base_url=url, timeout=300, limits=limits) for name, url in urls.items()}
    try:
        for client in clients.values():
            await drive(client, states, 4, args.warmup, 120, offset=50_000)
        out: dict[str, list[dict[str, Any]]] = {name: [] for name in urls}
        for n in args.levels:
            samples = {name: Sample(n) for name in urls}
            counters = {name: {"batches": 0.0, "requests": 0.0, "model_seconds": 0.0} for name in urls}
            for r in range(args.rounds):
                order = list(urls) if r % 2 == 0 else list(reversed(list(urls)))
                for name in order:
                    offset = n * 1000 + r * (args.requests // args.rounds)
                    sample, got = await measure_level(
                        clients[name], states, n, args.requests // args.rounds, args.seconds / args.rounds, offset
                    )
                    samples[name].merge(sample)
                    counters[name] = {k: counters[name][k] + got[k] for k in got}
            for name in urls:
                row = level_row(samples[name], counters[name])
                out[name].append(row)
                print(
                    f"  {name:>9} N={n:>2}: {row['throughput_rps']:7.1f} req/s  p50 {row['p50_ms']:7.1f} ms  p99 {row['p99_ms']:7.1f} ms  "
                    f"batch {row['mean_batch_size']:5}  model {row['model_ms_per_batch']} ms/batch",
                    flush=True,
                )
        return out
    finally:
        for client in clients.values():
            await client.aclose()


async def _bad_phase(url: str, states: list[str], args: argparse.Namespace) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=httpx.Limits(max_connections=64)) as client:
        return await fire_bad_under_load(client, states, 16, args.bad_repeats, args.bad_seconds)


def run_all(args: argparse.Namespace, states: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Start the batched and the unbatched server, measure both, then the bad-request phase."""
    configs = {"batched": (args.max_batch_size, args.max_wait_ms), "unbatched": (1, 0.0)}
    ports = {name: free_port() for name in configs}
    procs = {name: start_server(args.model, ports[name], *configs[name], args.server_threads) for name in configs}
    urls = {name: f"http://127.0.0.1:{ports[name]}" for name in configs}
    try:
        t0 = time.perf_counter()
        for name in configs:
            wait_ready(urls[name], procs[name])
        print(f"both servers ready in {time.perf_counter() - t0:.1f} s", flush=True)
        levels = asyncio.run(measure(urls, states, args))
        bad = asyncio.run(_bad_phase(urls["batched"], states, args))
        print(
            f"  bad requests under load: all 4xx = {bad['all_bad_got_4xx']}, good all 200 = {bad['good_all_200']}",
            flush=True,
        )
    finally:
        for proc in procs.values():
            stop_server(proc)
    results = {
        name: {"max_batch_size": size, "max_wait_ms": wait, "levels": levels[name]}
        for name, (size, wait) in configs.items()
    }
    results["batched"]["bad_under_load"] = bad
    return results["batched"], results["unbatched"]


# --------------------------------------------------------------------------- report


def summarise(batched: dict[str, Any], unbatched: dict[str, Any]) -> dict[str, Any]:
    at16_b = next(r for r in batched["levels"] if r["clients"] == 16)
    at16_u = next(r for r in unbatched["levels"] if r["clients"] == 16)
    ratio = at16_b["throughput_rps"] / at16_u["throughput_rps"]
    tail = at16_b["p99_ms"] / at16_b["p50_ms"]
    bad = batched.get("bad_under_load", {})
    return {
        "throughput_ratio_at_16": round(ratio, 2),
        "p99_over_p50_at_16_batched": round(tail, 2),
        "p99_over_p50_at_16_unbatched": round(at16_u["p99_ms"] / at16_u["p50_ms"], 2),
        "meets_throughput_target": ratio >= TARGETS["throughput_ratio_at_16_min"],
        "meets_tail_target": tail <= TARGETS["p99_over_p50_at_16_max"],
        "bad_requests_all_4xx": bad.get("all_bad_got_4xx"),
        "good_requests_all_200_under_bad_load": bad.get("good_all_200"),
    }


def markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [
        "# Load benchmark: System One server on loopback",
        "",
        f"Command: `{result['command']}`  ",
        f"Model: {result['model_description']}  ",
        f"Machine: {result['machine']} (shared with other jobs; compare ratios, not absolute times)  ",
        f"Workload: banking77 test utterances as the state; 3 questions per request (noul, 8-option choice, 3-level score); "
        f"each level bounded by {result['bounds']['requests']} requests or {result['bounds']['seconds']} s per server, "
        f"run in {result['bounds']['rounds']} rounds alternating the two servers (started side by side).  ",
        f"Batched server: `--max-batch-size {result['batched']['max_batch_size']} --max-wait-ms {result['batched']['max_wait_ms']}`; "
        f"unbatched: `--max-batch-size 1`; both "
        + (
            f"`--threads {result['server_threads']}`."
            if result["server_threads"]
            else "with torch's default CPU threads (2 here)."
        ),
        "",
        "| clients | batched req/s | p50 ms | p95 ms | p99 ms | mean batch | model ms/batch | unbatched req/s | p50 ms | p95 ms | p99 ms | model ms/request | throughput ratio |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b, u in zip(result["batched"]["levels"], result["unbatched"]["levels"]):
        lines.append(
            f"| {b['clients']} | {b['throughput_rps']} | {b['p50_ms']} | {b['p95_ms']} | {b['p99_ms']} | {b['mean_batch_size']} | {b['model_ms_per_batch']} "
            f"| {u['throughput_rps']} | {u['p50_ms']} | {u['p95_ms']} | {u['p99_ms']} | {u['model_ms_per_batch']} | {b['throughput_rps'] / u['throughput_rps']:.2f}× |"
        )
    lines += [
        "",
        f"**At 16 clients**: batched throughput = **{s['throughput_ratio_at_16']}×** the unbatched server "
        f"(target ≥ {TARGETS['throughput_ratio_at_16_min']}×: {'met' if s['meets_throughput_target'] else 'NOT met'}); "
        f"batched p99/p50 = **{s['p99_over_p50_at_16_batched']}** (target ≤ {TARGETS['p99_over_p50_at_16_max']}: "
        f"{'met' if s['meets_tail_target'] else 'NOT met'}).",
        "",
    ]
    bad = result["batched"].get("bad_under_load")
    if bad:
        g = bad["good"]
        lines += [
            "## Bad requests under load (16 good clients on the batched server)",
            "",
            "| bad request | statuses | all 4xx |",
            "|---|---|---|",
            *[
                f"| {name} | {', '.join(map(str, v['statuses']))} | {'yes' if v['all_4xx'] else 'NO'} |"
                for name, v in bad["bad"].items()
            ],
            "",
            f"Good requests meanwhile: {g['requests']} sent, statuses {g['statuses']}, {g['throughput_rps']} req/s, "
            f"p50 {g['p50_ms']} ms, p99 {g['p99_ms']} ms.",
            "",
        ]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label, colour in (
        ("batched", "micro-batching (max 16)", "tab:blue"),
        ("unbatched", "no batching (max 1)", "tab:orange"),
    ):
        levels = result[key]["levels"]
        n = [r["clients"] for r in levels]
        ax1.plot(n, [r["throughput_rps"] for r in levels], "o-", color=colour, label=label)
        ax2.plot(n, [r["p50_ms"] for r in levels], "o-", color=colour, label=f"{label} p50")
        ax2.plot(n, [r["p99_ms"] for r in levels], "s--", color=colour, label=f"{label} p99")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 2, 4, 8, 16], ["1", "2", "4", "8", "16"])
        ax.set_xlabel("concurrent clients")
        ax.grid(alpha=0.3)
    ax1.set_ylabel("throughput (requests/s)")
    ax2.set_ylabel("latency (ms)")
    ax2.set_yscale("log")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=7)
    threads = f"--threads {result['server_threads']}" if result.get("server_threads") else "default CPU threads"
    fig.suptitle(
        f"System One server on loopback — {result['model_description'].split(' (')[0]}, {threads}", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mini", help="server --model (default mini)")
    parser.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8, 16])
    parser.add_argument("--requests", type=int, default=192, help="most requests per level (default 192)")
    parser.add_argument("--seconds", type=float, default=30.0, help="most seconds per level (default 30)")
    parser.add_argument(
        "--server-threads", type=int, default=1, help="serve --threads for both servers (default 1; 0: library default)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="each level is split in this many rounds, alternating the servers (default 3)",
    )
    parser.add_argument("--warmup", type=int, default=16)
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--max-wait-ms", type=float, default=20.0)
    parser.add_argument("--bad-repeats", type=int, default=3, help="times each bad request is sent under load")
    parser.add_argument("--bad-seconds", type=float, default=15.0, help="length of the bad-request phase")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite results.md and load.png from --out/results.json"
    )
    args = parser.parse_args()
    if args.report_only:
        result = json.loads((args.out / "results.json").read_text())
        (args.out / "results.md").write_text(markdown(result))
        plot(result, args.out / "load.png")
        return 0
    description = MINI if args.model == "mini" else f"--model {args.model}"
    states = load_states()
    print(f"model: {description}", flush=True)
    batched, unbatched = run_all(args, states)
    result = {
        "command": "nice -n 5 .venv/bin/python bench/load/run.py " + " ".join(sys.argv[1:]),
        "model": args.model,
        "model_description": description,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}",
        "bounds": {"requests": args.requests, "seconds": args.seconds, "rounds": args.rounds},
        "server_threads": args.server_threads or None,
        "targets": TARGETS,
        "batched": batched,
        "unbatched": unbatched,
    }
    result["summary"] = summarise(batched, unbatched)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "results.md").write_text(markdown(result))
    plot(result, args.out / "load.png")
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
