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

TRAIN_SPLIT_OVERRIDES = {"snli_esnli": "valid", "scitail": "valid"}
"""Sets published without a train split: their validation split is used for training, and they
are never used for calibration or reported as held-out results."""


def mixture_records(mixture: dict[str, float], split: str, exclude: tuple[str, ...] = ()) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Records of every dataset in a mixture for a split, and per-dataset sampling weights that
    turn the mixture's shares into ``RecordSampler`` weights (which multiply by pool size)."""
    from clef_agents.train.datasets import available_splits, load_records  # noqa: PLC0415

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
