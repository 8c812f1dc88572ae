"""Data mixtures for the shipped checkpoints (what "mini" is trained on).

Example:
    >>> sorted(MINI_MIXTURE)[:2]
    ['banking77', 'bfcl_relevance']
"""

from __future__ import annotations

from typing import Any

MINI_MIXTURE: dict[str, float] = {
    "banking77": 15.0,
    "clinc150": 18.0,
    "hwu64": 12.0,
    "sst5": 8.0,
    "sms_spam": 4.0,
    "youtube_spam": 1.5,
    "hate_offensive": 5.0,
    "bfcl_relevance": 6.0,
    "mnli_taxinli": 4.0,
    "snli_esnli": 4.0,
    "qnli": 4.0,
    "conjnli": 3.0,
    "dnc_recast": 3.0,
    "rte": 2.5,
    "boolq": 0.5,
    "tracie": 1.5,
    "pubmedqa": 1.0,
    "copa": 0.5,
    "scitail": 2.0,
}
"""Share of training draws per dataset (relative weights, not counts)."""

MINI_LABEL_WEIGHTS: dict[str, float] = {"clinc150:oos": 25.0}
"""Rare labels drawn more often within their set: clinc150 has 100 out-of-scope training rows
among 15,000, yet a fifth of its test rows are out of scope."""

MINI_CACHE_CAPS: dict[str, int] = {
    "default": 3000,
    "banking77": 0,
    "clinc150": 0,
    "hwu64": 0,
    "sst5": 0,
    "bfcl_relevance": 0,
}
"""Records per data set for the cached-state stages (0 = all): every intent set whole, the large
inference sets sampled (their states are long, and the cache lives in memory)."""

TRAIN_SPLIT_OVERRIDES = {"snli_esnli": "valid", "scitail": "valid"}
"""Sets published without a train split: their validation split is used for training, and they
are never used for calibration or reported as held-out results."""


def mixture_records(
    mixture: dict[str, float], split: str, exclude: tuple[str, ...] = ()
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Records of every dataset in a mixture for a split, and per-dataset sampling weights that
    turn the mixture's shares into ``RecordSampler`` weights (which multiply by pool size)."""
    from clef_agents.train.datasets import available_splits, load_records  # noqa: PLC0415
    from clef_agents.train.split import check_trainable  # noqa: PLC0415

    check_trainable(name for name in mixture if name not in exclude)
    records: list[dict[str, Any]] = []
    weights: dict[str, float] = {}
    for name, share in mixture.items():
        if name in exclude:
            continue
        wanted = TRAIN_SPLIT_OVERRIDES.get(name, "train") if split == "train" else split
        if split != "train" and name in TRAIN_SPLIT_OVERRIDES:
            continue
        if wanted not in available_splits(name):
            continue
        rows = load_records(name, wanted)
        if not rows:
            continue
        for row in rows:
            row.setdefault("meta", {})["dataset"] = name
        records.extend(rows)
        weights[name] = share / len(rows)
    return records, weights


def cap_records(
    records: list[dict[str, Any]], caps: dict[str, int], seed: int = 0, keep: dict[str, float] | None = None
) -> list[dict[str, Any]]:
    """At most ``caps[dataset]`` (else ``caps["default"]``; 0 = no cap) records per data set, a seeded
    sample; records whose ``"dataset:label"`` is in ``keep`` always stay.

    Example:
        >>> rows = [{"meta": {"dataset": "a"}, "labels": {"q": i}} for i in range(5)]
        >>> len(cap_records(rows, {"default": 2}))
        2
    """
    import random  # noqa: PLC0415

    keep = keep or {}
    by_dataset: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_dataset.setdefault(record.get("meta", {}).get("dataset", "?"), []).append(record)
    out: list[dict[str, Any]] = []
    for name, rows in by_dataset.items():
        cap = caps.get(name, caps.get("default", 0))
        if not cap or len(rows) <= cap:
            out.extend(rows)
            continue
        kept = [r for r in rows if any(f"{name}:{v}" in keep for v in r.get("labels", {}).values())]
        rest = [r for r in rows if r not in kept] if kept else rows
        out.extend(kept + random.Random(f"{seed}:{name}").sample(rest, max(0, cap - len(kept))))
    return out
