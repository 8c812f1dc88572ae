"""``clef-agents serve``: run the System One server (uvicorn), or a Ray Serve deployment (``--ray``).

Example:
    $ clef-agents serve --host 127.0.0.1 --port 8000 --model mini --max-batch-size 16 --max-wait-ms 5
    $ clef-agents serve --ray --replicas 2 --model mini --port 8000
    $ python -m clef_agents.serve.cli --ray --replicas 2 --model mini --port 8000   # the same
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from typing import Any

from clef_agents.loading import MODEL_HELP, load_model

API_KEY_ENV = "CLEF_API_KEY"


def register(subparsers: Any) -> None:
    """Add the ``serve`` subcommand."""
    parser = subparsers.add_parser(
        "serve",
        help="serve a decision model over HTTP (System One: POST /v1/systemone)",
        description="Serve a decision model over HTTP with micro-batching. System One wire format (POST /v1/systemone).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--model", default="mini", help=f"{MODEL_HELP} (default mini)")
    parser.add_argument("--model-name", default=None, help="name to serve the model as (default: the model's own name)")
    parser.add_argument(
        "--alias",
        action="append",
        default=None,
        help="another accepted model name (repeatable; jev-latest is always accepted)",
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=16,
        help="most requests per forward pass; 1 turns batching off (default 16)",
    )
    parser.add_argument(
        "--max-wait-ms", type=float, default=5.0, help="how long a request waits for others to batch with (default 5)"
    )
    parser.add_argument(
        "--request-timeout", type=float, default=30.0, help="seconds before a request gets 504 (default 30)"
    )
    parser.add_argument("--max-body-bytes", type=int, default=512 * 1024, help="larger bodies get 413 (default 524288)")
    parser.add_argument(
        "--max-queue", type=int, default=1024, help="requests allowed to wait; beyond it 503 (default 1024)"
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"require Authorization: Bearer <key> (default: ${API_KEY_ENV} if set, else no auth)",
    )
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="serve without an API key on a non-loopback --host (refused otherwise: anyone who can reach the port could use the model)",
    )
    parser.add_argument(
        "--max-questions", type=int, default=None, help="most questions per request; beyond it 422 (default 64)"
    )
    parser.add_argument(
        "--max-options",
        type=int,
        default=None,
        help="most options over all questions of a request (a noul counts 2; default 1024)",
    )
    parser.add_argument(
        "--max-state-chars", type=int, default=None, help="most characters of state text per request (default 262144)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for the model (sets OMP_NUM_THREADS before it loads; default: 1, or $CLEF_AGENTS_THREADS: bench/threads/results.md)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="log level (default info)"
    )
    ray = parser.add_argument_group("Ray Serve (scale out over replicas and machines)")
    ray.add_argument("--ray", action="store_true", help="deploy on Ray Serve instead of a single uvicorn process")
    ray.add_argument("--replicas", type=int, default=2, help="Ray Serve replicas (default 2)")
    ray.add_argument("--gpus-per-replica", type=float, default=0.0, help="GPUs reserved per replica (default 0)")
    ray.add_argument("--cpus-per-replica", type=float, default=1.0, help="CPUs reserved per replica (default 1)")
    ray.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster to join ('auto' for a running cluster; default: start a local one)",
    )
    parser.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> Any:
    """``ServerSettings`` from parsed ``serve`` arguments."""
    # imported on use: `clef-agents --help` registers this command without loading pydantic or starlette
    from clef_agents import wire
    from clef_agents.serve.app import DEFAULT_ALIASES, SERVER_LIMITS, ServerSettings

    defaults = SERVER_LIMITS
    limits = wire.RequestLimits(
        max_questions=args.max_questions or defaults.max_questions,
        max_total_options=args.max_options or defaults.max_total_options,
        max_state_chars=args.max_state_chars or defaults.max_state_chars,
    )
    return ServerSettings(
        served_name=args.model_name,
        aliases=tuple(dict.fromkeys([*DEFAULT_ALIASES, *(args.alias or [])])),
        max_batch_size=args.max_batch_size,
        max_wait_ms=args.max_wait_ms,
        request_timeout_s=args.request_timeout,
        max_body_bytes=args.max_body_bytes,
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        max_queue=args.max_queue,
        limits=limits,
    )


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (``localhost``, ``127.0.0.0/8``, ``::1``).

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("0.0.0.0")
        (True, False)
    """
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def check_exposure(host: str, api_key: str | None, allow_unauthenticated: bool) -> None:
    """Refuse (``ValueError``) to serve without a key on an address other machines can reach.

    Example:
        >>> check_exposure("127.0.0.1", None, False)
        >>> check_exposure("0.0.0.0", "k", False)
    """
    if is_loopback(host) or api_key or allow_unauthenticated:
        return
    raise ValueError(
        f"--host {host} lets other machines reach the server, and no API key is set: "
        f"pass --api-key (or set ${API_KEY_ENV}), or --allow-unauthenticated to serve it open on purpose"
    )


def configure_logging(level: str) -> None:
    """Plain message lines on stderr: the access log lines are already JSON."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("clef_agents")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def set_cpu_threads(threads: int) -> None:
    """Cap the model's CPU threads; must run before torch is imported (read when it loads).

    One thread can be several times faster than two on a machine whose cores are busy with other
    work, because every parallel region of a forward pass waits for all of its threads.
    """
    if threads < 1:
        raise ValueError(f"--threads must be at least 1, got {threads}")
    if "torch" in sys.modules:
        raise RuntimeError("--threads must be applied before torch is imported")
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)


def run(args: argparse.Namespace) -> int:
    """Start the server and block until interrupted."""
    if args.max_batch_size < 1:
        raise ValueError(f"--max-batch-size must be at least 1, got {args.max_batch_size}")
    settings = settings_from_args(args)
    check_exposure(args.host, settings.api_key, args.allow_unauthenticated)
    configure_logging(args.log_level)
    if not settings.api_key and not is_loopback(args.host):
        logging.getLogger("clef_agents.serve").warning(
            "serving %s without an API key (--allow-unauthenticated)", args.host
        )
    if args.threads is not None:
        set_cpu_threads(args.threads)
    if args.ray:
        from clef_agents.serve.ray_app import serve_forever  # ray loads only for --ray

        return serve_forever(
            args.model,
            settings,
            host=args.host,
            port=args.port,
            replicas=args.replicas,
            gpus_per_replica=args.gpus_per_replica,
            cpus_per_replica=args.cpus_per_replica,
            address=args.ray_address,
        )
    import uvicorn  # the server's dependencies load only when it starts

    from clef_agents.serve.app import create_app

    app = create_app(loader=lambda: load_model(args.model), settings=settings)
    uvicorn.run(app, host=args.host, port=args.port, access_log=False, log_level=args.log_level, timeout_keep_alive=30)
    return 0


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m clef_agents.serve.cli")
    register(_parser.add_subparsers(dest="command"))
    _args = _parser.parse_args(["serve", *sys.argv[1:]])
    sys.exit(_args.func(_args))
