"""The comparison harness: every method answers the same requests, interleaved, in one run.

``compare`` times each request per method (warm, one request at a time), then the batched
throughput, and scores accuracy and ECE; ``scaling`` times how cost grows with the number of
questions, of options and the state length. Pure functions of the methods and items given, so
the smoke test can run them with a fake model.

Example:
    >>> from clef_agents.testing import FakeDecisionModel
    >>> from bench.baselines.methods import DecisionModelMethod
    >>> items = {"sms_spam": sample_items("sms_spam", 3)}  # doctest: +SKIP
    >>> compare(items, [DecisionModelMethod(FakeDecisionModel())])["per_dataset"]["sms_spam"]  # doctest: +SKIP
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.baselines.data import BenchItem
from bench.baselines.methods import Method
from bench.baselines.metrics import calibration_point, is_correct, latency_summary
from clef_agents import wire
from clef_agents.train.metrics import expected_calibration_error

WARMUP_CALLS = 2


def shared_subset(items: list[BenchItem], n: int, seed: int) -> list[int]:
    """Indices of the seeded subset every method answers (the heavy baselines answer only these)."""
    return sorted(random.Random(f"shared:{seed}").sample(range(len(items)), min(n, len(items))))


def compare(
    items_by_dataset: dict[str, list[BenchItem]],
    methods: Sequence[Method],
    heavy: set[str] = frozenset(),
    n_shared: int = 25,
    seed: int = 0,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run every method on every item (heavy methods on the shared subset only), interleaved."""
    per_dataset: dict[str, Any] = {}
    for dataset, items in items_by_dataset.items():
        shared = set(shared_subset(items, n_shared, seed))
        for method in methods:
            method.fit(dataset)
            for _ in range(WARMUP_CALLS):
                method.predict(items[0].request)
        rows: dict[str, list[dict[str, Any]]] = {m.key: [] for m in methods}
        for index, item in enumerate(items):
            for method in methods:
                if method.key in heavy and index not in shared:
                    continue
                t0 = time.perf_counter()
                probabilities = method.predict(item.request)
                elapsed = time.perf_counter() - t0
                rows[method.key].append({"index": index, "seconds": elapsed, **_score(item, probabilities)})
        per_dataset[dataset] = {
            "n": len(items),
            "n_shared": len(shared),
            "methods": {
                m.key: {
                    "all": _summarise(rows[m.key]),
                    "shared": _summarise([r for r in rows[m.key] if r["index"] in shared]),
                    "throughput_rps": _throughput(
                        m, [items[i] for i in sorted({r["index"] for r in rows[m.key]})], rows[m.key]
                    ),
                }
                for m in methods
            },
        }
        log(
            f"{dataset}: "
            + ", ".join(f"{k} acc {v['shared']['accuracy']:.2f}" for k, v in per_dataset[dataset]["methods"].items())
        )
    return {"per_dataset": per_dataset, "methods": {m.key: m.info() for m in methods}}


def _score(item: BenchItem, probabilities: dict[str, list[float]]) -> dict[str, Any]:
    questions = wire.validate_questions(item.request["questions"])
    correct, points = [], []
    for qid, question in questions.items():
        probs = probabilities[qid]
        correct.append(is_correct(question, probs, item.labels[qid]))
        points.append(calibration_point(question, probs, item.labels[qid]))
    return {"correct": correct, "calibration": points}


def _summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    correct = [c for r in rows for c in r["correct"]]
    points = [p for r in rows for p in r["calibration"]]
    return {
        "requests": len(rows),
        "accuracy": sum(correct) / len(correct) if correct else float("nan"),
        "ece": expected_calibration_error([c for c, _ in points], [o for _, o in points]),
        "latency": latency_summary([r["seconds"] for r in rows]),
    }


def _throughput(method: Method, items: list[BenchItem], rows: list[dict[str, Any]]) -> float:
    """Requests/s: one batched pass in chunks of ``batch_size``; single-request rate otherwise."""
    if method.batch_size <= 1 or not items:
        return 1.0 / statistics.fmean(r["seconds"] for r in rows) if rows else float("nan")
    requests = [item.request for item in items]
    t0 = time.perf_counter()
    for start in range(0, len(requests), method.batch_size):
        method.predict_batch(requests[start : start + method.batch_size])
    return len(requests) / (time.perf_counter() - t0)


# --------------------------------------------------------------------------- scaling


def scaling(
    methods: Sequence[Method],
    sweeps: dict[str, list[tuple[int, dict[str, Any]]]],
    reps: int = 5,
    cap_seconds: float = 5.0,
    heavy: set[str] = frozenset(),
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Median seconds per request at each sweep point, methods interleaved rep by rep (heavy
    methods: one rep). A method stops a sweep once one point's median exceeds ``cap_seconds``;
    its later, larger points are recorded as skipped."""
    out: dict[str, Any] = {}
    for sweep, points in sweeps.items():
        out[sweep] = {m.key: [] for m in methods}
        capped: set[str] = set()
        for x, request in points:
            active = [m for m in methods if m.key not in capped]
            for method in active:
                method.predict(request)
            times: dict[str, list[float]] = {m.key: [] for m in active}
            for rep in range(reps):
                for method in active:
                    if method.key in heavy and rep > 0:
                        continue
                    t0 = time.perf_counter()
                    method.predict(request)
                    times[method.key].append(time.perf_counter() - t0)
            for method in methods:
                if method.key in capped:
                    out[sweep][method.key].append({"x": x, "median_ms": None, "skipped": True})
                    continue
                median = statistics.median(times[method.key])
                out[sweep][method.key].append({"x": x, "median_ms": median * 1000, "skipped": False})
                if median > cap_seconds:
                    capped.add(method.key)
            log(f"scaling {sweep} = {x} done")
    return out
