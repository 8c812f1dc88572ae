"""``clef-agents teach``: fit taught questions (see ``clef_agents.model.taught``) from labelled records.

One pass of the model over the records gives, per question, the pooled states and the head's
raw logits. Per distinct question (type + instructions) a multinomial logistic regression from
the unit pooled state to the options is fitted with L2 (strength chosen on held-out records),
then the blend ``alpha * own + beta * head`` is fitted on the held-out records by NLL, which
both mixes the two and calibrates the result. Weights are refitted on all records at the end.

Example:
    >>> from clef_agents.train.teach import teach  # doctest: +SKIP
    >>> reports = teach(model, train_records, valid_records)  # doctest: +SKIP
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from clef_agents import wire
from clef_agents.model.decision_model import ClefDecisionModel
from clef_agents.model.taught import SCALE, TaughtQuestion, taught_key
from clef_agents.train.trainer import record_to_example

CHUNK = 64
L2_GRID = (1e-5, 3e-5, 1e-4, 3e-4)
MIN_RECORDS = 20
HOLDOUT_SHARE = 0.1
MASKED = -1e4


@dataclass
class _Group:
    """Everything collected for one taught question."""

    kind: str
    instructions: str
    names: list[str] = field(default_factory=list)
    pooled: list[torch.Tensor] = field(default_factory=list)
    head: list[dict[str, float]] = field(default_factory=list)  # option name -> raw head logit
    gold: list[str] = field(default_factory=list)
    held_out: list[bool] = field(default_factory=list)

    def add(self, pooled: torch.Tensor, names: list[str], logits: torch.Tensor, gold: int, held_out: bool) -> None:
        for name in names:
            if name not in self.names:
                self.names.append(name)
        self.pooled.append(pooled)
        self.head.append(dict(zip(names, logits.tolist())))
        self.gold.append(names[gold])
        self.held_out.append(held_out)

    def tensors(self, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unit pooled states [N,H], head logits [N,n] (absent options masked), presence mask, gold [N]."""
        index = {name: i for i, name in enumerate(self.names)}
        head = torch.full((len(rows), len(self.names)), MASKED)
        present = torch.zeros((len(rows), len(self.names)), dtype=torch.bool)
        for r, row in enumerate(rows):
            for name, value in self.head[row].items():
                head[r, index[name]] = value
                present[r, index[name]] = True
        pooled = F.normalize(torch.stack([self.pooled[row] for row in rows]).float(), dim=-1)
        gold = torch.tensor([index[self.gold[row]] for row in rows])
        return pooled, head, present, gold


@torch.no_grad()
def collect(model: ClefDecisionModel, records: Sequence[dict[str, Any]], held_out: Sequence[bool], progress: bool = True) -> dict[str, _Group]:
    """One model pass over labelled records: per taught key, pooled states, head logits and labels."""
    from tqdm.auto import tqdm  # noqa: PLC0415

    engine = model.engine
    engine.train_mode(False)
    groups: dict[str, _Group] = {}
    order = sorted(range(len(records)), key=lambda i: len(str(records[i]["state"])))
    for start in tqdm(range(0, len(order), CHUNK), desc="teach: reading records", disable=not progress, unit="batch"):
        chunk = order[start : start + CHUNK]
        examples = [record_to_example(records[i]) for i in chunk]
        batch = engine.encode([(text, qs) for text, qs, _ in examples])
        logits, pooled = engine.logits_and_pooled(batch)
        logits, pooled = logits.float().cpu(), pooled.float().cpu()
        for j, (spans, (_, questions, gold)) in enumerate(zip(batch.spans, examples)):
            for (a, b), question, target in zip(spans, questions, gold):
                key = taught_key(question)
                group = groups.setdefault(key, _Group(question.type, wire.content_text(question.instructions)))
                if group.kind != question.type:
                    continue
                group.add(pooled[j], wire.option_names(question), logits[j, a:b], target, held_out[chunk[j]])
    return groups


def _fit_weights(pooled: torch.Tensor, present: torch.Tensor, gold: torch.Tensor, l2: float, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    weight = torch.zeros(n, pooled.shape[1], requires_grad=True)
    bias = torch.zeros(n, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1, max_iter=300, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        z = (pooled @ weight.T * SCALE + bias).masked_fill(~present, MASKED)
        loss = F.cross_entropy(z, gold) + l2 * (weight**2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return weight.detach(), bias.detach()


def _fit_blend(own: torch.Tensor, head: torch.Tensor, present: torch.Tensor, gold: torch.Tensor) -> tuple[float, float]:
    alpha = torch.ones((), requires_grad=True)
    beta = torch.zeros((), requires_grad=True)
    optimizer = torch.optim.LBFGS([alpha, beta], lr=0.5, max_iter=100, line_search_fn="strong_wolfe")
    head = head.masked_fill(~present, 0.0)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy((alpha * own + beta * head).masked_fill(~present, MASKED), gold)
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(alpha.detach()), float(beta.detach())


def _scores(logits: torch.Tensor, present: torch.Tensor, gold: torch.Tensor) -> dict[str, float]:
    logits = logits.masked_fill(~present, MASKED)
    return {"accuracy": float((logits.argmax(1) == gold).float().mean()), "nll": float(F.cross_entropy(logits, gold))}


def fit_group(group: _Group, l2_grid: Sequence[float] = L2_GRID) -> TaughtQuestion:
    """Fit one taught question: L2 by held-out NLL, then the blend, then weights on all records."""
    fit_rows = [i for i, h in enumerate(group.held_out) if not h]
    held_rows = [i for i, h in enumerate(group.held_out) if h]
    n = len(group.names)
    x_fit, _, p_fit, y_fit = group.tensors(fit_rows)
    x_held, head_held, p_held, y_held = group.tensors(held_rows)
    best: tuple[float, float, float, float] | None = None
    for l2 in l2_grid:
        weight, bias = _fit_weights(x_fit, p_fit, y_fit, l2, n)
        own = x_held @ weight.T * SCALE + bias
        alpha, beta = _fit_blend(own, head_held, p_held, y_held)
        nll = _scores(alpha * own + beta * head_held.masked_fill(~p_held, 0.0), p_held, y_held)["nll"]
        if best is None or nll < best[0]:
            best = (nll, l2, alpha, beta)
    assert best is not None
    _, l2, alpha, beta = best
    weight, bias = _fit_weights(x_fit, p_fit, y_fit, l2, n)
    own = x_held @ weight.T * SCALE + bias
    report = {
        "records": len(group.gold),
        "held_out": len(held_rows),
        "l2": l2,
        "held_out_head": _scores(head_held, p_held, y_held),
        "held_out_taught": _scores(alpha * own + beta * head_held.masked_fill(~p_held, 0.0), p_held, y_held),
    }
    x_all, _, p_all, y_all = group.tensors(list(range(len(group.gold))))
    weight, bias = _fit_weights(x_all, p_all, y_all, l2, n)
    return TaughtQuestion(group.kind, group.instructions, list(group.names), weight, bias, alpha, beta, report)


def teach(
    model: ClefDecisionModel,
    records: Sequence[dict[str, Any]],
    held_out_records: Sequence[dict[str, Any]] = (),
    *,
    min_records: int = MIN_RECORDS,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, dict[str, Any]]:
    """Teach the model every question that appears in labelled records; returns a report per question.

    Without ``held_out_records``, a seeded 10% of ``records`` is held out for the blend. Questions
    with fewer than ``min_records`` records, or with fewer than two labels seen, are skipped (and
    reported as such); existing taught questions not in the records stay as they are.

    Example:
        >>> report = teach(model, records)  # doctest: +SKIP
        >>> report["Is this SMS message spam?"]["held_out_taught"]["accuracy"]  # doctest: +SKIP
        0.99
    """
    if not records:
        raise ValueError("teaching needs labelled records, got none")
    all_records = [*records, *held_out_records]
    if held_out_records:
        held_out = [False] * len(records) + [True] * len(held_out_records)
    else:
        rng = random.Random(seed)
        held_out = [rng.random() < HOLDOUT_SHARE for _ in records]
    from tqdm.auto import tqdm  # noqa: PLC0415

    groups = collect(model, all_records, held_out, progress=progress)
    reports: dict[str, dict[str, Any]] = {}
    for key, group in tqdm(groups.items(), desc="teach: fitting questions", disable=not progress, unit="question"):
        reason = _skip_reason(group, min_records)
        if reason:
            reports[group.instructions] = {"skipped": reason, "records": len(group.gold)}
            continue
        taught = fit_group(group)
        model.engine.taught.add(key, taught)
        reports[group.instructions] = {"type": group.kind, "options": len(group.names), **taught.report}
    return reports


def _skip_reason(group: _Group, min_records: int) -> str | None:
    n_fit = sum(not h for h in group.held_out)
    n_held = sum(group.held_out)
    if n_fit < min_records or n_held < max(5, min_records // 4):
        return f"too few records: {n_fit} to fit and {n_held} held out; need {min_records} and {max(5, min_records // 4)}"
    if len(set(group.gold)) < 2:
        return f"only one label seen ({group.gold[0]!r}); teaching needs at least two"
    return None
