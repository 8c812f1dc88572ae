"""`clef-agents serve` as a user starts it (a subprocess), and the jevcompat conformance suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from clef_agents.cli import build_parser
from clef_agents.serve.app import ServerSettings, create_app
from clef_agents.serve.local import free_port, serve_in_thread
from clef_agents.testing import FakeDecisionModel


def test_serve_subcommand_is_registered_with_its_options() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--port",
            "9001",
            "--model",
            "fake",
            "--max-batch-size",
            "1",
            "--max-wait-ms",
            "2",
            "--api-key",
            "k",
            "--threads",
            "1",
        ]
    )
    assert (args.port, args.model, args.max_batch_size, args.max_wait_ms, args.api_key, args.threads) == (
        9001,
        "fake",
        1,
        2.0,
        "k",
        1,
    )
    assert callable(args.func) and args.ray is False


def test_aliases_add_to_jev_latest() -> None:
    from clef_agents.serve.cli import settings_from_args

    args = build_parser().parse_args(["serve", "--model", "fake", "--alias", "clef", "--alias", "jev-latest"])
    assert settings_from_args(args).aliases == ("jev-latest", "clef")


@pytest.fixture
def cli_server() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CLEF_API_KEY": "from-env"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "clef_agents.cli",
            "serve",
            "--model",
            "fake",
            "--port",
            str(port),
            "--max-batch-size",
            "4",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {proc.stdout.read() if proc.stdout else ''}")
            time.sleep(0.1)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)


def test_cli_server_answers_reads_the_key_from_the_environment_and_logs_json(
    cli_server: tuple[str, subprocess.Popen[str]],
) -> None:
    url, proc = cli_server
    body = {"state": "hello", "questions": {"q": {"type": "noul", "instructions": "A greeting?"}}}
    assert httpx.post(f"{url}/v1/systemone", json=body).status_code == 401
    r = httpx.post(f"{url}/v1/systemone", json=body, headers={"Authorization": "Bearer from-env"})
    assert r.status_code == 200 and r.json()["model"] == "fake"
    proc.terminate()
    output, _ = proc.communicate(timeout=10)
    access = [json.loads(line) for line in output.splitlines() if line.startswith('{"event": "access"')]
    assert [(a["path"], a["status"]) for a in access if a["path"] == "/v1/systemone"] == [
        ("/v1/systemone", 401),
        ("/v1/systemone", 200),
    ]


def test_jevcompat_passes_every_must_and_should_with_auth_on() -> None:
    runner = pytest.importorskip("jevcompat.runner")
    with serve_in_thread(create_app(FakeDecisionModel(model="fake"), settings=ServerSettings(api_key="k"))) as url:
        report = runner.run(url, key="k", timeout=30)
    failed = {r.id: [f.message for f in r.findings] for r in report.results if r.status == "fail"}
    skipped = {r.id: r.reason for r in report.results if r.status == "skip"}
    assert report.verdict == "conformant", (failed, skipped)
    assert failed == {}
    assert set(skipped) <= {"auth.ignored-when-off"}  # exactly one of the two auth MUSTs applies
