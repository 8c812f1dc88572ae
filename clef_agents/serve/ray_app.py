"""Scale out on Ray Serve: the same System One app in N replicas, each batching with ``@serve.batch``.

Every replica loads the model once and serves the Starlette app of ``clef_agents.serve.app``
(same routes, validation, limits, auth and access log); requests that pass validation go to a
``@serve.batch`` handler that answers them with one ``model.batch`` call in a worker thread. Ray's
HTTP proxy (one per node) spreads requests over the replicas, on one machine or a cluster.

One command starts it (a local Ray instance, or ``--ray-address auto`` to join a cluster):

    clef-agents serve --ray --replicas 2 --model mini --port 8000
    python -m clef_agents.serve.cli --ray --replicas 2 --model mini --port 8000   # the same

Example:
    >>> from clef_agents.serve.app import ServerSettings
    >>> app = build_app("fake", ServerSettings(), replicas=2)  # doctest: +SKIP
    >>> serve.run(app, route_prefix="/")  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from collections import Counter
from typing import Any

import ray
from langchain_core.decisions import ClassifierRequest, ClassifierResponse
from ray import serve
from ray.serve import Application

from clef_agents.serve.app import ServerSettings, create_app
from clef_agents.serve.batcher import answer_batch, batch_stats
from clef_agents.serve.models import load_model

logger = logging.getLogger("clef_agents.serve")

DEPLOYMENT_NAME = "clef-systemone"
SLOW_START_TIMEOUTS = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60", "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "30"}
"""Ray's defaults (5 s / 10 s) kill the HTTP proxy before it starts on a busy small machine."""
APP_NAME = "clef"


@serve.ingress()
class SystemOneReplica:
    """One Ray Serve replica: a loaded model behind the System One app, batched by ``@serve.batch``."""

    def __init__(self, model_spec: str, settings: ServerSettings) -> None:
        self.settings = settings
        self.model = load_model(model_spec)
        self.batch_sizes: Counter[int] = Counter()
        self._answer_many.set_max_batch_size(settings.max_batch_size)
        self._answer_many.set_batch_wait_timeout_s(settings.max_wait_ms / 1000)

    def __serve_build_asgi_app__(self) -> Any:
        return create_app(self.model, settings=self.settings, answer=self._answer_one, stats=self._stats)

    def _stats(self) -> dict[str, Any]:
        return {**batch_stats(self.batch_sizes), "replica": serve.get_replica_context().replica_tag}

    async def _answer_one(self, request: ClassifierRequest) -> ClassifierResponse:
        result = await self._answer_many(request)
        if isinstance(result, Exception):
            raise result
        return result

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def _answer_many(self, requests: list[ClassifierRequest]) -> list[ClassifierResponse | Exception]:
        self.batch_sizes[len(requests)] += 1
        return await asyncio.to_thread(answer_batch, self.model, requests)


def build_app(
    model_spec: str,
    settings: ServerSettings,
    *,
    replicas: int = 2,
    gpus_per_replica: float = 0.0,
    cpus_per_replica: float = 1.0,
) -> Application:
    """The Ray Serve application: ``replicas`` copies of ``SystemOneReplica``.

    Each replica reserves ``cpus_per_replica`` CPUs and ``gpus_per_replica`` GPUs, so on a cluster
    with one GPU per node and ``gpus_per_replica=1`` Ray places one replica per GPU.

    Example:
        >>> build_app("mini", ServerSettings(max_batch_size=32), replicas=4, gpus_per_replica=1)  # doctest: +SKIP
    """
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, got {replicas}")
    deployment = serve.deployment(
        SystemOneReplica,
        name=DEPLOYMENT_NAME,
        num_replicas=replicas,
        ray_actor_options={"num_cpus": cpus_per_replica, "num_gpus": gpus_per_replica},
        max_ongoing_requests=max(64, 4 * settings.max_batch_size),
        health_check_period_s=10,
    )
    return deployment.bind(model_spec, settings)


def start(
    model_spec: str,
    settings: ServerSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    replicas: int = 2,
    gpus_per_replica: float = 0.0,
    cpus_per_replica: float = 1.0,
    address: str | None = None,
    num_cpus: int | None = None,
) -> str:
    """Connect to (or start) Ray, deploy the app on ``host:port`` and return its base URL.

    Example:
        >>> url = start("fake", ServerSettings(), port=8123, replicas=2)  # doctest: +SKIP
    """
    if not ray.is_initialized():
        for name, seconds in SLOW_START_TIMEOUTS.items():
            os.environ.setdefault(name, seconds)  # inherited by the local Ray instance started below
        init: dict[str, Any] = {"address": address, "include_dashboard": False, "log_to_driver": False}
        if address is None and num_cpus is not None:
            init["num_cpus"] = num_cpus
        ray.init(**init)
    serve.start(http_options={"host": host, "port": port})
    app = build_app(
        model_spec, settings, replicas=replicas, gpus_per_replica=gpus_per_replica, cpus_per_replica=cpus_per_replica
    )
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    return f"http://{host}:{port}"


def shutdown() -> None:
    """Remove the deployment and stop Serve and Ray (if this process started Ray)."""
    serve.shutdown()
    ray.shutdown()


def serve_forever(model_spec: str, settings: ServerSettings, **kwargs: Any) -> int:
    """``start`` and block until Ctrl-C (or SIGTERM), then shut down. Returns the exit code."""
    url = start(model_spec, settings, **kwargs)
    print(
        f"clef-agents serve --ray: {kwargs.get('replicas', 2)} replicas answering on {url}/v1/systemone",
        file=sys.stderr,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        shutdown()
    return 0
