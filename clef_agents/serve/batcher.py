"""Micro-batching: concurrent requests answered by one ``model.batch([...])`` call.

Requests arrive one by one on the event loop; a single worker collects the ones waiting (up to
``max_batch_size``, waiting at most ``max_wait_s`` after the first) and answers them together in a
worker thread, so the event loop keeps accepting requests while the model runs. Every request is
validated before it is queued, so a batch holds only valid requests; if the model still fails on
a batch, each request is retried on its own so one failure never answers for the others.

A request whose caller gave up (its future was cancelled, e.g. by a timeout) is dropped if it has
not started, and once every request of a running batch is abandoned the model call is cancelled at
its next ``clef_agents.wire.raise_if_cancelled`` checkpoint (the local model checks before each
encoder pass), so an abandoned request stops using the worker.

Example:
    >>> import asyncio
    >>> from langchain_core.decisions import Noul
    >>> from clef_agents.testing import FakeDecisionModel
    >>> async def main():
    ...     batcher = MicroBatcher(FakeDecisionModel(answers={"q": 0.8}), max_batch_size=8, max_wait_s=0.002)
    ...     async with batcher:
    ...         r = await batcher.submit({"state": "hi", "questions": {"q": Noul(instructions="Hi?")}})
    ...     return r.nouls["q"].noul
    >>> asyncio.run(main())
    0.8
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from langchain_core.decisions import BaseDecisionModel, ClassifierRequest, ClassifierResponse

from clef_agents import wire

logger = logging.getLogger("clef_agents.serve")


class QueueFullError(RuntimeError):
    """More requests are waiting than the server accepts; the caller should retry later."""


@dataclass
class _Pending:
    request: ClassifierRequest
    future: asyncio.Future[ClassifierResponse]


def answer_batch(
    model: BaseDecisionModel, requests: Sequence[ClassifierRequest], cancelled: Callable[[], bool] | None = None
) -> list[ClassifierResponse | Exception]:
    """Answer requests with one ``model.batch`` call; if the whole call fails, answer each on its own.

    Returns one response or exception per request, in order. Once ``cancelled()`` is true the model
    stops at its next ``wire.raise_if_cancelled`` checkpoint and every request gets
    ``wire.RequestCancelled``.

    Example:
        >>> from langchain_core.decisions import Noul
        >>> from clef_agents.testing import FakeDecisionModel
        >>> q = {"q": Noul(instructions="Spam?")}
        >>> [r.nouls["q"].noul for r in answer_batch(FakeDecisionModel(answers={"q": 0.1}), [{"state": "a", "questions": q}])]
        [0.1]
    """
    if cancelled is not None:
        with wire.cancellable(cancelled):
            return answer_batch(model, requests)
    if len(requests) == 1:
        return [_invoke_one(model, requests[0])]
    try:
        return list(model.batch(list(requests), return_exceptions=True))
    except wire.RequestCancelled as exc:
        return [exc] * len(requests)
    except Exception:  # noqa: BLE001 — the whole batch failed: isolate the failing request(s)
        logger.warning("a batch of %d failed; answering its requests one by one", len(requests), exc_info=True)
        return [_invoke_one(model, request) for request in requests]


def _invoke_one(model: BaseDecisionModel, request: ClassifierRequest) -> ClassifierResponse | Exception:
    try:
        return model.invoke(request)
    except Exception as exc:  # noqa: BLE001 — handed back to the request that caused it
        return exc


def batch_stats(batch_sizes: Counter[int]) -> dict[str, Any]:
    """Summary of a batch-size histogram.

    Example:
        >>> batch_stats(Counter({1: 2, 4: 1}))["mean_batch_size"]
        2.0
    """
    batches = sum(batch_sizes.values())
    requests = sum(size * count for size, count in batch_sizes.items())
    return {
        "batches": batches,
        "requests": requests,
        "mean_batch_size": round(requests / batches, 3) if batches else 0.0,
        "batch_size_histogram": {str(k): v for k, v in sorted(batch_sizes.items())},
    }


def _all_abandoned(batch: Sequence[_Pending]) -> threading.Event:
    """An event set (on the event loop) once every request of ``batch`` is done without the model:
    cancelled by a timeout or a disconnect. The worker thread polls it."""
    event = threading.Event()
    remaining = {id(p.future) for p in batch}

    def forget(future: asyncio.Future[ClassifierResponse]) -> None:
        remaining.discard(id(future))
        if not remaining:
            event.set()

    for pending in batch:
        pending.future.add_done_callback(forget)
    return event


class MicroBatcher:
    """Collect concurrent requests into batches for one model, answered in a worker thread.

    - ``max_batch_size``: most requests per ``model.batch`` call (1 turns batching off).
    - ``max_wait_s``: how long the first request of a batch waits for company.
    - ``max_queue``: requests allowed to wait; beyond it ``submit`` raises ``QueueFullError``.

    Use as an async context manager (or ``start()``/``stop()``) inside a running event loop.

    Example:
        >>> batcher = MicroBatcher(model=None, max_batch_size=1)  # doctest: +SKIP
    """

    def __init__(
        self,
        model: BaseDecisionModel,
        *,
        max_batch_size: int = 16,
        max_wait_s: float = 0.005,
        max_queue: int = 1024,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must be 0 or more, got {max_wait_s}")
        self.model = model
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.batch_sizes: Counter[int] = Counter()
        self.model_seconds = 0.0
        self._cancelled_batches = 0
        self._queue: asyncio.Queue[_Pending] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None

    async def __aenter__(self) -> MicroBatcher:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start the worker on the running event loop."""
        self._queue = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clef-batch")
        self._worker = asyncio.get_running_loop().create_task(self._run(), name="clef-micro-batcher")

    async def stop(self) -> None:
        """Stop the worker; requests still waiting get a ``RuntimeError``."""
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        if self._queue is not None:
            while not self._queue.empty():
                pending = self._queue.get_nowait()
                if not pending.future.done():
                    pending.future.set_exception(RuntimeError("the server is shutting down"))
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    @property
    def queue_depth(self) -> int:
        """Requests waiting for a batch right now."""
        return self._queue.qsize() if self._queue is not None else 0

    def stats(self) -> dict[str, Any]:
        """Batches run so far: count, requests, mean size, the size histogram, the queue depth."""
        return {
            **batch_stats(self.batch_sizes),
            "model_seconds": round(self.model_seconds, 4),
            "cancelled_batches": self._cancelled_batches,
            "queue_depth": self.queue_depth,
            "max_batch_size": self.max_batch_size,
            "max_wait_ms": self.max_wait_s * 1000,
        }

    def submit_nowait(self, request: ClassifierRequest) -> asyncio.Future[ClassifierResponse]:
        """Queue a (validated) request and return the future of its response.

        Cancelling the future (for example on a timeout) drops the request if it has not run yet;
        once every request of a running batch is cancelled, the model call stops at its next
        ``wire.raise_if_cancelled`` checkpoint (counted as ``cancelled_batches`` in ``stats()``).
        """
        if self._queue is None:
            raise RuntimeError("the batcher is not started")
        if self._queue.qsize() >= self.max_queue:
            raise QueueFullError(f"{self._queue.qsize()} requests are already waiting (limit {self.max_queue})")
        future: asyncio.Future[ClassifierResponse] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending(request, future))
        return future

    async def submit(self, request: ClassifierRequest) -> ClassifierResponse:
        """Queue a request and wait for its response."""
        return await self.submit_nowait(request)

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect(loop)
            live = [p for p in batch if not p.future.done()]
            if not live:
                continue
            self.batch_sizes[len(live)] += 1
            started = time.perf_counter()
            abandoned = _all_abandoned(live)
            try:
                results = await loop.run_in_executor(
                    self._executor, answer_batch, self.model, [p.request for p in live], abandoned.is_set
                )
            except Exception as exc:  # noqa: BLE001 — the executor itself failed
                results = [exc] * len(live)
            self.model_seconds += time.perf_counter() - started
            if results and all(isinstance(r, wire.RequestCancelled) for r in results):
                self._cancelled_batches += 1
            for pending, result in zip(live, results):
                if pending.future.done():
                    continue
                if isinstance(result, Exception):
                    pending.future.set_exception(result)
                else:
                    pending.future.set_result(result)

    async def _collect(self, loop: asyncio.AbstractEventLoop) -> list[_Pending]:
        assert self._queue is not None
        batch = [await self._queue.get()]
        deadline = loop.time() + self.max_wait_s
        while len(batch) < self.max_batch_size:
            if not self._queue.empty():
                batch.append(self._queue.get_nowait())
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), remaining))
            except asyncio.TimeoutError:
                break
        return batch
