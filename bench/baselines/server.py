"""Waiting for a `clef-agents serve` process the benchmarks started.

Example:
    >>> import subprocess, sys
    >>> proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    >>> wait_ready("http://127.0.0.1:9", proc, timeout_s=5)
    Traceback (most recent call last):
    ...
    RuntimeError: the server exited with 3
"""

from __future__ import annotations

import subprocess
import time

import httpx


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 300, hint: str = "") -> None:
    """Return once ``url``/readyz answers 200; raise if ``proc`` exits first or ``timeout_s`` passes
    (the process is then terminated). ``hint`` is appended to the error (e.g. where the log is)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            detail = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            raise RuntimeError(
                " ".join(part for part in (f"the server exited with {proc.returncode}", hint, detail) if part)
            )
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    proc.terminate()
    raise RuntimeError(
        " ".join(part for part in (f"the server at {url} was not ready within {timeout_s:g} s", hint) if part)
    )
