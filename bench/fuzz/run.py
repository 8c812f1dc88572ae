"""Long fuzz run of `clef-agents serve`: schemathesis against the served OpenAPI, then malformed bodies.

Starts `clef-agents serve --model MODEL` on a free loopback port (one CPU thread), then

1. runs schemathesis (its own venv, `bench/fuzz/.venv`; `make bench-setup` makes it) with every
   check against `/openapi.json` (413 allowed as a rejection of schema-violating data: see
   `schemathesis.toml`), and reads every request and response from its NDJSON report;
2. sends `--malformed` hostile requests from `malformed.py` (lone surrogates, NaN/Infinity, deep
   nesting, over-limit work, broken JSON, wrong shapes, wrong media type / method / model, huge
   bodies, and valid requests mixed in) over `--connections` kept-alive connections;
3. checks the server is healthy after (`/healthz`, `/readyz`, a valid request, the process alive, no
   traceback in its log).

Counted: requests, status codes, 5xx, dropped connections (transport errors), 4xx whose `detail`
does not name the field, answers that break the expected status of a probe.

Run:   .venv/bin/python bench/fuzz/run.py --model fake --examples 9000 --malformed 4000 --out bench/fuzz/results/fake
       .venv/bin/python bench/fuzz/run.py --model mini --examples 900 --malformed 600 --out bench/fuzz/results/mini
Writes <out>.json and <out>.md.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from bench.baselines.server import wait_ready  # noqa: E402
from bench.fuzz.malformed import Probe, probes  # noqa: E402
from clef_agents.serve.local import free_port  # noqa: E402

SCHEMATHESIS = HERE / ".venv" / "bin" / "st"
FIELD_WORDS = ("body", "content-type", "model", "authorization", "state", "questions", "/")
TRACEBACK_MARKERS = ("Traceback (most recent call last)", "Exception in ASGI application")


def start_server(model: str, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    """`clef-agents serve` as a user starts it; returns once /readyz answers 200."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env.pop("CLEF_API_KEY", None)
    cmd = [sys.executable, "-m", "clef_agents.cli", "serve", "--model", model, "--port", str(port), "--threads", "1",
           "--max-batch-size", "8", "--max-wait-ms", "2", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    wait_ready(f"http://127.0.0.1:{port}", proc, hint=f"see {log_path}")
    return proc


def names_the_field(status: int, content: bytes) -> bool:
    """Whether a 4xx body has a ``detail`` that names what was wrong (a 422 ``loc`` under ``body``,
    or a message naming the body, a header, the model or the path)."""
    try:
        detail = json.loads(content)["detail"]
    except (ValueError, KeyError, TypeError):
        return False
    if status == 422:
        return isinstance(detail, list) and bool(detail) and all(
            isinstance(e.get("loc"), list) and e["loc"][:1] == ["body"] and e.get("msg") for e in detail
        )
    message = str(detail.get("message", "")).lower() if isinstance(detail, dict) else ""
    return any(word in message for word in FIELD_WORDS)


class Tally:
    """Counters of one phase; thread-safe."""

    def __init__(self) -> None:
        self.statuses: Counter[int] = Counter()
        self.by_category: dict[str, Counter[int]] = {}
        self.dropped = 0
        self.unnamed_4xx: list[str] = []
        self.unexpected: list[str] = []
        self._lock = threading.Lock()

    def record(self, status: int | None, content: bytes, category: str = "schemathesis", allowed: tuple[int, ...] = ()) -> None:
        with self._lock:
            if status is None:
                self.dropped += 1
                return
            self.statuses[status] += 1
            self.by_category.setdefault(category, Counter())[status] += 1
            if 400 <= status < 500 and not names_the_field(status, content) and len(self.unnamed_4xx) < 20:
                self.unnamed_4xx.append(f"{category} {status}: {content[:200]!r}")
            if allowed and status not in allowed and len(self.unexpected) < 20:
                self.unexpected.append(f"{category} {status} (allowed {allowed}): {content[:200]!r}")

    def summary(self) -> dict[str, Any]:
        requests = sum(self.statuses.values()) + self.dropped
        return {
            "requests": requests,
            "status_counts": {str(k): v for k, v in sorted(self.statuses.items())},
            "by_category": {c: {str(k): v for k, v in sorted(n.items())} for c, n in sorted(self.by_category.items())},
            "responses_5xx": sum(v for k, v in self.statuses.items() if k >= 500),
            "dropped_connections": self.dropped,
            "4xx_without_field": len(self.unnamed_4xx),
            "4xx_without_field_examples": self.unnamed_4xx[:5],
            "unexpected_status": len(self.unexpected),
            "unexpected_status_examples": self.unexpected[:5],
        }


def run_schemathesis(url: str, examples: int, seed: int, tally: Tally) -> dict[str, Any]:
    """schemathesis with every check; every request it made is read back from its NDJSON report."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(SCHEMATHESIS), "--config-file", str(HERE / "schemathesis.toml"), "run", f"{url}/openapi.json",
               "--checks", "all", "--max-examples", str(examples), "--seed", str(seed), "--generation-database", "none",
               "--report", "json,ndjson", "--report-dir", tmp, "--no-color", "--request-timeout", "60"]
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE)
        elapsed = time.perf_counter() - started
        report = json.loads(next(Path(tmp).glob("json-*.json")).read_text())
        for line in next(Path(tmp).glob("ndjson-*.ndjson")).open():
            event = json.loads(line).get("ScenarioFinished")
            if event is None:
                continue
            for interaction in event["recorder"].get("interactions", {}).values():
                response = interaction.get("response")
                if response is None:
                    tally.record(None, b"")
                    continue
                tally.record(response["status_code"], base64.b64decode(response.get("content", {}).get("$base64", "")))
    return {
        "command": " ".join(["st", *cmd[1:]]).replace(tmp, "<tmp>").replace(str(HERE) + "/", ""),
        "exit_code": proc.returncode,
        "seconds": round(elapsed, 1),
        "test_cases": report["test_cases"],
        "failures": report["failures"],
        "errors": report["errors"],
        "output_tail": proc.stdout.splitlines()[-12:],
    }


def send_probe(client: httpx.Client, probe: Probe, tally: Tally) -> None:
    try:
        response = client.request(probe.method, probe.path, content=probe.body, headers=probe.headers)
    except httpx.TransportError:
        tally.record(None, b"")
        return
    tally.record(response.status_code, response.content, probe.category, probe.allowed)


def run_malformed(url: str, n: int, seed: int, connections: int, tally: Tally) -> dict[str, Any]:
    """``n`` probes over ``connections`` kept-alive connections, in parallel."""
    work = probes(n, seed)
    started = time.perf_counter()

    def worker(share: list[Probe]) -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            for probe in share:
                send_probe(client, probe, tally)

    threads = [threading.Thread(target=worker, args=(work[i::connections],)) for i in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"probes": n, "connections": connections, "seconds": round(time.perf_counter() - started, 1)}


def health_after(url: str, proc: subprocess.Popen[bytes], log_path: Path) -> dict[str, Any]:
    body = {"state": "site down since 9am", "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}}}
    answer = httpx.post(f"{url}/v1/systemone", json=body, timeout=60)
    log = log_path.read_text(errors="replace")
    return {
        "process_alive": proc.poll() is None,
        "healthz": httpx.get(f"{url}/healthz").status_code,
        "readyz": httpx.get(f"{url}/readyz").status_code,
        "valid_request": answer.status_code,
        "tracebacks_in_server_log": sum(log.count(marker) for marker in TRACEBACK_MARKERS),
        "stats": httpx.get(f"{url}/v1/stats").json(),
    }


def markdown(result: dict[str, Any]) -> str:
    total = result["total"]
    lines = [
        f"# Fuzz run: `clef-agents serve --model {result['model']}`",
        "",
        f"Command: `{result['command']}` ({result['date']}, {result['machine']})",
        "",
        "| | requests | 5xx | dropped connections | 4xx without a field in `detail` | unexpected status |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in ("schemathesis", "malformed", "total"):
        s = result[name]["tally"] if name != "total" else total
        lines.append(f"| {name} | {s['requests']} | {s['responses_5xx']} | {s['dropped_connections']} | {s['4xx_without_field']} | {s.get('unexpected_status', 0)} |")
    st = result["schemathesis"]
    lines += [
        "",
        f"schemathesis: `{st['command']}`; exit code {st['exit_code']}, {st['test_cases']['generated']} test cases, "
        f"failures: {[f['code'] + ' ' + f['title'] for f in st['failures']] or 'none'}, errors: {len(st['errors'])}, {st['seconds']} s.",
        "",
        "Status codes (all requests): " + ", ".join(f"{k}: {v}" for k, v in total["status_counts"].items()),
        "",
        "Malformed probes by category (status: count):",
        "",
    ]
    for category, counts in result["malformed"]["tally"]["by_category"].items():
        lines.append(f"- {category}: " + ", ".join(f"{k}: {v}" for k, v in counts.items()))
    health = result["health_after"]
    lines += [
        "",
        f"Health after: process alive {health['process_alive']}, /healthz {health['healthz']}, /readyz {health['readyz']}, "
        f"a valid request {health['valid_request']}, tracebacks in the server log {health['tracebacks_in_server_log']}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="fake")
    parser.add_argument("--examples", type=int, default=9000, help="schemathesis --max-examples per operation")
    parser.add_argument("--malformed", type=int, default=4000, help="hostile requests sent after schemathesis")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--out", required=True, help="path prefix of the .json and .md results")
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = Path(tempfile.gettempdir()) / f"clef_fuzz_{args.model}_{port}.log"
    proc = start_server(args.model, port, log_path)
    try:
        schema_tally, malformed_tally = Tally(), Tally()
        st = run_schemathesis(url, args.examples, args.seed, schema_tally)
        print(f"schemathesis: {schema_tally.summary()['requests']} requests", flush=True)
        bad = run_malformed(url, args.malformed, args.seed, args.connections, malformed_tally)
        print(f"malformed: {malformed_tally.summary()['requests']} requests", flush=True)
        health = health_after(url, proc, log_path)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    schema_summary, malformed_summary = schema_tally.summary(), malformed_tally.summary()
    statuses = Counter({int(k): v for k, v in schema_summary["status_counts"].items()})
    statuses.update({int(k): v for k, v in malformed_summary["status_counts"].items()})
    total = {
        "requests": schema_summary["requests"] + malformed_summary["requests"],
        "status_counts": {str(k): v for k, v in sorted(statuses.items())},
        "responses_5xx": schema_summary["responses_5xx"] + malformed_summary["responses_5xx"],
        "dropped_connections": schema_summary["dropped_connections"] + malformed_summary["dropped_connections"],
        "4xx_without_field": schema_summary["4xx_without_field"] + malformed_summary["4xx_without_field"],
        "unexpected_status": malformed_summary["unexpected_status"],
    }
    result = {
        "model": args.model,
        "command": "python bench/fuzz/run.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": f"{os.cpu_count()} CPU cores (shared), server on one thread",
        "schemathesis": {**st, "tally": schema_summary},
        "malformed": {**bad, "tally": malformed_summary},
        "health_after": health,
        "total": total,
    }
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    ok = total["responses_5xx"] == 0 and total["dropped_connections"] == 0 and total["4xx_without_field"] == 0
    ok = ok and health["valid_request"] == 200 and health["process_alive"] and health["tracebacks_in_server_log"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
