"""Run an ASGI app on a free loopback port in a background thread (tests, notebooks, examples).

Example:
    >>> import httpx
    >>> from clef_agents.serve import create_app
    >>> from clef_agents.testing import FakeDecisionModel
    >>> with serve_in_thread(create_app(FakeDecisionModel())) as url:
    ...     httpx.get(url + "/healthz").json()
    {'status': 'ok'}
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from starlette.types import ASGIApp


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``.

    Example:
        >>> 1024 < free_port() < 65536
        True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve_in_thread(
    app: ASGIApp, host: str = "127.0.0.1", port: int | None = None, startup_timeout_s: float = 30.0
) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a daemon thread; yields the base URL, stops on exit.

    Example:
        >>> with serve_in_thread(app) as url:  # doctest: +SKIP
        ...     print(url)
        http://127.0.0.1:54321
    """
    import uvicorn

    port = port or free_port(host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the server on {host}:{port} did not start within {startup_timeout_s:g} s")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
