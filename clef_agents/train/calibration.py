"""Post-hoc calibration: Platt scaling for nouls, one temperature for choices and one for scores,
fitted by minimising the NLL of held-out records and saved in the checkpoint config.

Example:
    >>> from clef_agents.train.calibration import fit_calibration  # doctest: +SKIP
    >>> fit_calibration(model, valid_records)  # doctest: +SKIP
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from clef_agents import wire
from clef_agents.model.config import Calibration
from clef_agents.model.decision_model import ClefDecisionModel
from clef_agents.train.trainer import record_to_example

CHUNK = 64


@dataclass
class RawLogits:
    """Uncalibrated head logits of one question, with its type and gold index, and the
    probabilities the model answers with (``answered``: calibrated; by taught weights where taught,
    by the question reader where the model has one and the question is not taught)."""

    kind: str
    logits: torch.Tensor
    gold: int
    dataset: str
    answered: list[float] | None = None
    taught: bool = False
    read: bool = False


@torch.no_grad()
def collect_logits(
    model: ClefDecisionModel, records: Sequence[dict[str, Any]], progress: bool = True
) -> list[RawLogits]:
    """Run the model over labelled records and keep the raw logits of every question."""
    from tqdm.auto import tqdm

    engine = model.engine
    engine.train_mode(False)
    out: list[RawLogits] = []
    for start in tqdm(range(0, len(records), CHUNK), desc="logits", disable=not progress, unit="batch"):
        chunk = records[start : start + CHUNK]
        examples = [record_to_example(r) for r in chunk]
        batch = engine.encode([(text, qs) for text, qs, _ in examples])
        questions = [qs for _, qs, _ in examples]
        taught = engine.taught_entries(questions)
        logits, features = engine.logits_and_features(batch, engine.taught_specs(taught))
        logits, features = logits.float().cpu(), {spec: value.float().cpu() for spec, value in features.items()}
        answered = engine.calibrated_log_probs(logits, batch, questions, features, taught)
        read = _reader_answers(engine, examples, taught, answered)
        for i, (spans, (text, row, gold)) in enumerate(zip(batch.spans, examples)):
            dataset = chunk[i].get("meta", {}).get("dataset", "?")
            for q, ((a, b), question, target) in enumerate(zip(spans, row, gold)):
                by_reader = read.get((i, q))
                out.append(
                    RawLogits(
                        question.type,
                        logits[i, a:b].clone(),
                        target,
                        dataset,
                        by_reader if by_reader is not None else answered[i][q].exp().tolist(),
                        taught[i][q] is not None,
                        by_reader is not None,
                    )
                )
    return out


def _reader_answers(
    engine: Any,
    examples: Sequence[tuple[str, list[Any], list[int]]],
    taught: Sequence[Sequence[Any]],
    head: Sequence[Sequence[torch.Tensor]],
) -> dict[tuple[int, int], list[float]]:
    """The model's answers to the questions its reader answers, by (request, question) index: the reader's,
    with the head's calibrated answer (``head``: log-probabilities) mixed in and the final temperature, as
    ``DecisionEngine.predict`` answers them."""
    reader = engine.reader
    if reader is None:
        return {}
    keys = [
        (i, q)
        for i, (_, row, _) in enumerate(examples)
        for q, flag in enumerate(engine.read_by_reader(row, taught[i]))
        if flag
    ]
    probabilities = reader.predict([(examples[i][0], examples[i][1][q]) for i, q in keys]) if keys else []
    return {
        (i, q): reader.final_answer(examples[i][1][q], p, head[i][q].exp().tolist())
        for (i, q), p in zip(keys, probabilities)
    }


@dataclass(frozen=True)
class Lbfgs:
    """Settings of the L-BFGS fit behind ``fit_temperature`` and ``fit_platt``."""

    lr: float = 0.1
    max_iter: int = 100
    line_search_fn: str | None = None


def fit_temperature(logits: Sequence[torch.Tensor], gold: Sequence[int], settings: Lbfgs = Lbfgs()) -> float:
    """The softmax temperature (clamped to [0.05, 20]) that minimises the NLL of ``gold`` under ``logits``; 1 when empty.

    Example:
        >>> round(fit_temperature([torch.tensor([4.0, 0.0])] * 3 + [torch.tensor([0.0, 4.0])], [0, 0, 0, 0]), 1) > 1
        True
    """
    if not logits:
        return 1.0
    log_t = torch.zeros((), requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [log_t], lr=settings.lr, max_iter=settings.max_iter, line_search_fn=settings.line_search_fn
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.stack(
            [F.cross_entropy((z / log_t.exp()).unsqueeze(0), torch.tensor([g])) for z, g in zip(logits, gold)]
        ).mean()
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(log_t.detach().exp().clamp(0.05, 20.0))


def fit_platt(margins: torch.Tensor, yes: torch.Tensor, settings: Lbfgs = Lbfgs()) -> tuple[float, float]:
    """``(a, b)`` of Platt scaling ``sigmoid(a·margin + b)`` by NLL against ``yes`` (1.0 / 0.0); ``(1, 0)`` when empty.

    Example:
        >>> a, b = fit_platt(torch.tensor([2.0, -2.0, 1.0, -1.0]), torch.tensor([1.0, 0.0, 1.0, 0.0]))
        >>> a > 1
        True
    """
    if not len(margins):
        return 1.0, 0.0
    a = torch.ones((), requires_grad=True)
    b = torch.zeros((), requires_grad=True)
    optimizer = torch.optim.LBFGS(
        [a, b], lr=settings.lr, max_iter=settings.max_iter, line_search_fn=settings.line_search_fn
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(a * margins + b, yes)
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(a.detach()), float(b.detach())


def _fit_temperature(items: list[RawLogits]) -> float:
    return fit_temperature([it.logits for it in items], [it.gold for it in items])


def _fit_platt(items: list[RawLogits]) -> tuple[float, float]:
    if not items:
        return 1.0, 0.0
    margins = torch.stack([it.logits[0] - it.logits[1] for it in items])
    return fit_platt(margins, torch.tensor([1.0 if it.gold == 0 else 0.0 for it in items]))


def _per_dataset_sample(records: Sequence[dict[str, Any]], cap: int, seed: int) -> list[dict[str, Any]]:
    """At most ``cap`` records per dataset (seeded), so no one set dominates the fit."""
    by_dataset: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_dataset.setdefault(record.get("meta", {}).get("dataset", "?"), []).append(record)
    rng = random.Random(seed)
    chosen: list[dict[str, Any]] = []
    for name in sorted(by_dataset):
        rows = by_dataset[name]
        chosen.extend(rng.sample(rows, cap) if len(rows) > cap else rows)
    return chosen


def fit_calibration(
    model: ClefDecisionModel,
    records: Sequence[dict[str, Any]],
    *,
    max_per_dataset: int = 300,
    seed: int = 0,
    progress: bool = True,
) -> Calibration:
    """Fit calibration on held-out labelled records and store it in the model's config.

    Example:
        >>> cal = fit_calibration(model, valid_records)  # doctest: +SKIP
        >>> cal.choice_temperature  # doctest: +SKIP
        1.3
    """
    records = _per_dataset_sample(records, max_per_dataset, seed)
    if not records:
        raise ValueError("calibration needs labelled records, got none")
    items = collect_logits(model, records, progress=progress)
    a, b = _fit_platt([it for it in items if it.kind == "noul"])
    calibration = Calibration(
        noul_a=a,
        noul_b=b,
        choice_temperature=_fit_temperature([it for it in items if it.kind == "choice"]),
        score_temperature=_fit_temperature([it for it in items if it.kind == "score"]),
        fitted_on={
            "records": len(records),
            "questions": {kind: sum(it.kind == kind for it in items) for kind in wire.QUESTION_TYPES},
            "datasets": sorted({it.dataset for it in items}),
        },
    )
    model.engine.config.calibration = calibration
    return calibration


READER_REFIT_MIN = 20
"""Questions of a type the reader must answer among the records before ``fit_reader_temperature`` refits its temperature."""


def fit_reader_temperature(
    model: ClefDecisionModel,
    records: Sequence[dict[str, Any]],
    *,
    max_per_dataset: int = 300,
    seed: int = 0,
    min_questions: int = READER_REFIT_MIN,
    progress: bool = True,
) -> dict[str, Any]:
    """Refit the question reader's final temperature (``ReaderConfig.final_temperature``) per question type on
    labelled records, from the answers the model gives to the records' questions that its reader answers (not
    taught). A type with fewer than ``min_questions`` such questions keeps its temperature. The argmax of every
    answer stays as it was. Returns the refitted temperatures and how many questions each was fitted on.

    Example:
        >>> fit_reader_temperature(model, my_labelled_records)  # doctest: +SKIP
        {'temperatures': {'noul': 2.7}, 'questions': {'noul': 412, 'choice': 3, 'score': 0}}
    """
    reader = model.engine.reader
    if reader is None:
        return {"temperatures": {}, "questions": {}}
    records = _per_dataset_sample(records, max_per_dataset, seed)
    read = [it for it in collect_logits(model, records, progress=progress) if it.read]
    current = reader.describe()["final_temperature"]
    refitted: dict[str, float] = {}
    counts = {kind: sum(it.kind == kind for it in read) for kind in wire.QUESTION_TYPES}
    for kind, count in counts.items():
        if count < min_questions:
            continue
        chosen = [it for it in read if it.kind == kind]
        factor = fit_temperature(
            [torch.tensor(it.answered).clamp_min(1e-12).log() for it in chosen], [it.gold for it in chosen]
        )
        refitted[kind] = round(current.get(kind, 1.0) * factor, 4)
    if refitted:
        reader.set_final_temperature({**current, **refitted})
    return {"temperatures": refitted, "questions": counts}
