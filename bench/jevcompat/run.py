"""Conformance of `clef-agents serve` to System One, checked by the PyPI `jevcompat` suite.

Starts `clef-agents serve` on a free loopback port and runs `jevcompat test` against it twice:
with `--api-key` (so the auth MUST/SHOULDs are exercised: bearer, missing key, wrong key) and
without one (an Authorization header must then be ignored). Writes the JSON and Markdown reports.

Run:   .venv/bin/python bench/jevcompat/run.py --model fake
       .venv/bin/python bench/jevcompat/run.py --model mini          # once the trained checkpoint exists
Writes bench/jevcompat/<label>-auth.{json,md}, <label>-noauth.{json,md} and summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.baselines.server import wait_ready  # noqa: E402
from clef_agents.serve.local import free_port  # noqa: E402

OUT_DIR = Path(__file__).resolve().parent
KEY = "jevcompat-local-key"


def start(model: str, port: int, api_key: str | None) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "clef_agents.cli",
        "serve",
        "--model",
        model,
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    if api_key:
        cmd += ["--api-key", api_key]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    env.pop("CLEF_API_KEY", None)
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}", proc)
    return proc


def run_suite(model: str, label: str, api_key: str | None, timeout: float) -> dict[str, object]:
    port = free_port()
    proc = start(model, port, api_key)
    name = f"{label}-{'auth' if api_key else 'noauth'}"
    try:
        cmd = [
            str(Path(sys.executable).with_name("jevcompat")), "test", f"http://127.0.0.1:{port}", "--timeout", str(timeout),
            "--json", str(OUT_DIR / f"{name}.json"), "--markdown", str(OUT_DIR / f"{name}.md"),
            "--title", f"clef-agents serve --model {model}" + (" --api-key …" if api_key else ""),
        ]  # fmt: skip
        if api_key:
            cmd += ["--key", api_key]
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    (OUT_DIR / f"{name}.txt").write_text(done.stdout)
    report = json.loads((OUT_DIR / f"{name}.json").read_text())
    verdict = done.stdout.strip().splitlines()[-1]
    print(f"{name}: {verdict}")
    return {"run": name, "exit_code": done.returncode, "verdict": verdict, "summary": report.get("summary")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="fake", help="server --model (fake, mini, a folder, backbone:minilm)")
    parser.add_argument("--label", default=None, help="file name prefix (default: the model)")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    label = args.label or args.model.replace(":", "-").replace("/", "_")
    runs = [run_suite(args.model, label, KEY, args.timeout), run_suite(args.model, label, None, args.timeout)]
    summary_path = OUT_DIR / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary[label] = {
        "command": f".venv/bin/python bench/jevcompat/run.py {' '.join(sys.argv[1:])}".strip(),
        "model": args.model,
        "runs": runs,
    }
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if all(r["exit_code"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
