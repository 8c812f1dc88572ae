"""``clef-agents teach``: fit taught questions (see ``clef_agents.model.taught``) from labelled records.

One pass of the model over the records gives, per question, the state features (each candidate
in ``FEATURE_CANDIDATES``) and the head's raw logits. Per distinct question (type + instructions)
and per candidate, on the records not held out: a one-hidden-layer network from the features to the options (AdamW, one-cycle schedule,
dropout, label smoothing; seeded) and a multinomial logistic regression (L2 strength chosen by
held-out NLL). Then the blend ``alpha * net + gamma * linear + beta * head`` is fitted on the
held-out records by NLL, which both mixes the three and calibrates the result. The candidate with
the lower held-out NLL is kept. Then a TF-IDF logistic regression on the state texts
(``clef_agents.model.lexical``) joins the blend when it lowers the held-out NLL by at least
``LEXICAL_MIN_GAIN``, and the label vote of the nearest fit records (``clef_agents.model.neighbours``)
when it lowers it by at least ``NEIGHBOUR_MIN_GAIN``, and, on an option the caller names as a
catch-all ("none of these", clinc150's ``oos``), a novelty part (the similarity to the nearest record
of any other option) when it lowers it by at least ``NOVELTY_MIN_GAIN``, and, on a yes/no question
whose states list tools, the request–tool match (``clef_agents.model.tool_match``) when it lowers it by
at least ``TOOL_MATCH_MIN_GAIN``. Last, with every choice
made, the parts are fitted again on all records, fit and held-out together (``refit_on_all``).

Example:
    >>> from clef_agents.train.teach import teach  # doctest: +SKIP
    >>> reports = teach(model, train_records, valid_records)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from clef_agents import wire
from clef_agents.model.decision_model import ClefDecisionModel
from clef_agents.model.lexical import LexicalModel, build_vocabulary, fit_lexical
from clef_agents.model.neighbours import (
    NeighbourModel,
    dequantise_bank,
    fit_projection,
    novelty,
    project,
    quantise_bank,
)
from clef_agents.model.taught import (
    FEATURES,
    LEGACY_FEATURES,
    SCALE,
    STORED_DTYPE,
    Novelty,
    TaughtQuestion,
    parse_features,
    taught_key,
)
from clef_agents.model.tool_match import KINDS as TOOL_MATCH_KINDS
from clef_agents.model.tool_match import ToolEncoder, ToolMatch, fit_token_idf, lists_tools, tool_features
from clef_agents.train.trainer import record_to_example


@dataclass
class TeachSettings:
    """How each taught question's network is trained (defaults measured on banking77 held-out data)."""

    hidden: int = 256
    epochs: int = 40
    min_steps: int = 300
    batch_size: int = 128
    lr: float = 2e-3
    weight_decay: float = 1e-4
    input_dropout: float = 0.1
    dropout: float = 0.5
    label_smoothing: float = 0.1
    seed: int = 0


CHUNK = 64
L2_GRID = (1e-5, 3e-5, 1e-4, 3e-4)
MIN_RECORDS = 20
HOLDOUT_SHARE = 0.1
MASKED = -1e4
BLEND_PRIOR_SD = 1.0
"""Blend weights get a Gaussian prior N(0, BLEND_PRIOR_SD²): on a small held-out set that some blend
separates perfectly (spam sets), the unpenalised weights grow without bound and the answers turn
overconfident; on large held-out sets the prior changes nothing measurable."""
SIGNED_MIN_HELD_OUT = 100
"""Fewest held-out records on which the routing head's blend weight may turn negative (``fit_blend``)."""
LEXICAL_L2_GRID = (1e-7, 1e-6, 1e-5)
LEXICAL_MIN_GAIN = 0.01
"""The lexical part is kept only when it lowers the held-out NLL by at least this share."""
NEIGHBOUR_K_GRID = (10, 25, 50)
NEIGHBOUR_TEMPERATURE_GRID = (0.02, 0.05, 0.1)
NEIGHBOUR_DIMS = 256
"""Principal directions the stored neighbour features keep. Held-out NLL with the vote, all 1920 dims
in fp16 vs 256 in int8: banking77 .1784 vs .1784, hwu64 .2619 vs .2627; the bank stores 15x smaller."""
NEIGHBOUR_MIN_GAIN = 0.01
"""The neighbour vote is kept only when it lowers the held-out NLL by at least this share."""
NOVELTY_MIN_GAIN = 0.01
"""The novelty part is kept only when it lowers the held-out NLL by at least this share."""
NOVELTY_PRIOR_SD = 10.0
"""The novelty part's weight and bias get a Gaussian prior N(0, NOVELTY_PRIOR_SD²) (MAP), so that a
held-out set it separates perfectly cannot send them to infinity."""
TOOL_MATCH_MIN_GAIN = 0.01
"""The tool-match part is kept only when it lowers the held-out NLL by at least this share."""
TOOL_MATCH_MIN_SHARE = 0.5
"""The tool-match part is tried on a yes/no question when at least this share of its records list tools."""
FEATURE_CANDIDATES = (FEATURES, LEGACY_FEATURES)
"""Features each question is fitted on by default; the one with the lower held-out NLL is kept
(the richer one wins on most questions; the last layer's mean pool alone on some small binary ones)."""


@dataclass
class _Group:
    """Everything collected for one taught question."""

    kind: str
    instructions: str
    names: list[str] = field(default_factory=list)
    features: dict[str, list[torch.Tensor]] = field(default_factory=dict)  # spec -> one vector per record
    head: list[dict[str, float]] = field(default_factory=list)  # option name -> raw head logit
    gold: list[str] = field(default_factory=list)
    held_out: list[bool] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    def add(
        self,
        features: dict[str, torch.Tensor],
        names: list[str],
        logits: torch.Tensor,
        gold: int,
        held_out: bool,
        text: str = "",
    ) -> None:
        for name in names:
            if name not in self.names:
                self.names.append(name)
        for spec, vector in features.items():
            self.features.setdefault(spec, []).append(vector)
        self.head.append(dict(zip(names, logits.tolist())))
        self.gold.append(names[gold])
        self.held_out.append(held_out)
        self.texts.append(text)

    def tensors(self, rows: list[int], spec: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unit ``spec`` features [N,F], head logits [N,n] (absent options masked), presence mask, gold [N]."""
        features = F.normalize(torch.stack([self.features[spec][row] for row in rows]).float(), dim=-1)
        return features, *self.targets(rows)

    def targets(self, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Head logits [N,n] (absent options masked), presence mask and gold [N], without the features."""
        index = {name: i for i, name in enumerate(self.names)}
        head = torch.full((len(rows), len(self.names)), MASKED)
        present = torch.zeros((len(rows), len(self.names)), dtype=torch.bool)
        for r, row in enumerate(rows):
            for name, value in self.head[row].items():
                head[r, index[name]] = value
                present[r, index[name]] = True
        gold = torch.tensor([index[self.gold[row]] for row in rows])
        return head, present, gold


@torch.no_grad()
def collect(
    model: ClefDecisionModel,
    records: Sequence[dict[str, Any]],
    held_out: Sequence[bool],
    specs: Sequence[str] = FEATURE_CANDIDATES,
    progress: bool = True,
) -> dict[str, _Group]:
    """One model pass over labelled records: per taught key, state features (each of ``specs``), head logits and labels."""
    from tqdm.auto import tqdm  # noqa: PLC0415

    engine = model.engine
    engine.train_mode(False)
    groups: dict[str, _Group] = {}
    order = sorted(range(len(records)), key=lambda i: len(str(records[i]["state"])))
    for start in tqdm(range(0, len(order), CHUNK), desc="teach: reading records", disable=not progress, unit="batch"):
        chunk = order[start : start + CHUNK]
        examples = [record_to_example(records[i]) for i in chunk]
        batch = engine.encode([(text, qs) for text, qs, _ in examples])
        logits, pooled = engine.logits_and_features(batch, specs)
        logits = logits.float().cpu()
        features = {spec: pooled[spec].float().cpu() for spec in specs}
        for j, (spans, (text, questions, gold)) in enumerate(zip(batch.spans, examples)):
            for (a, b), question, target in zip(spans, questions, gold):
                key = taught_key(question)
                group = groups.setdefault(key, _Group(question.type, wire.content_text(question.instructions)))
                group.add(
                    {spec: rows[j] for spec, rows in features.items()},
                    wire.option_names(question),
                    logits[j, a:b],
                    target,
                    held_out[chunk[j]],
                    text,
                )
    return groups


def _train_network(
    features: torch.Tensor, present: torch.Tensor, gold: torch.Tensor, n: int, settings: TeachSettings
) -> dict[str, torch.Tensor]:
    """Train the question's network on unit features; returns its weights (``TaughtQuestion`` parts),
    rounded as they will be stored."""
    from torch import nn  # noqa: PLC0415

    generator = torch.Generator().manual_seed(settings.seed)
    torch.manual_seed(settings.seed)
    net = nn.Sequential(
        nn.Dropout(settings.input_dropout),
        nn.Linear(features.shape[1], settings.hidden),
        nn.GELU(),
        nn.Dropout(settings.dropout),
        nn.Linear(settings.hidden, n),
    )
    per_epoch = -(-len(gold) // settings.batch_size)
    steps = max(settings.epochs * per_epoch, settings.min_steps)
    optimizer = torch.optim.AdamW(net.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=settings.lr, total_steps=steps)
    x = features * SCALE
    net.train()
    step = 0
    while step < steps:
        for idx in torch.randperm(len(gold), generator=generator).split(settings.batch_size):
            if step == steps:
                break
            z = net(x[idx]).masked_fill(~present[idx], MASKED)
            loss = F.cross_entropy(z, gold[idx], label_smoothing=settings.label_smoothing)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            step += 1
    first, last = net[1], net[4]
    parts = {"hidden_weight": first.weight, "hidden_bias": first.bias, "weight": last.weight, "bias": last.bias}
    return {name: _as_stored(value.detach()) for name, value in parts.items()}


def _as_stored(value: torch.Tensor) -> torch.Tensor:
    """The value as it reads back from ``taught.safetensors`` (so held-out fits see the saved weights)."""
    return value.to(STORED_DTYPE).float()


def _fit_linear(
    features: torch.Tensor, present: torch.Tensor, gold: torch.Tensor, l2: float, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multinomial logistic regression on ``features * SCALE`` with an L2 penalty (full-batch L-BFGS)."""
    weight = torch.zeros(n, features.shape[1], requires_grad=True)
    bias = torch.zeros(n, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1, max_iter=300, line_search_fn="strong_wolfe")
    x = features * SCALE

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        z = (x @ weight.T + bias).masked_fill(~present, MASKED)
        loss = F.cross_entropy(z, gold) + l2 * (weight**2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return _as_stored(weight.detach()), _as_stored(bias.detach())


def fit_blend(
    parts: list[torch.Tensor], present: torch.Tensor, gold: torch.Tensor, signed: Sequence[int] = ()
) -> list[float]:
    """Weights of a sum of logit sets minimising held-out NLL (absent options masked), under the
    Gaussian prior ``BLEND_PRIOR_SD`` on each weight (MAP).

    A part fitted on this question's own labels (the network, the linear map, the word model, a blend so far)
    can only count for what it predicts: a part whose weight comes out negative is left out (weight 0) and the
    rest fitted again, else a handful of held-out records that it happens to get wrong turn it round, and the
    taught question then answers the opposite of its own records. Where no weight comes out negative the fit is
    the unconstrained one. The parts at the indices ``signed`` (the routing head's logits, which were not fitted
    on these labels) may take either sign, but only on ``SIGNED_MIN_HELD_OUT`` held-out records or more: many
    records can rightly weigh the head against the taught parts (the shipped spam questions do), ten cannot.

    Example:
        >>> gold = torch.tensor([0, 1, 0, 1])
        >>> right = torch.tensor([[2.0, -2.0], [-2.0, 2.0], [2.0, -2.0], [-2.0, 2.0]])
        >>> present = torch.ones(4, 2, dtype=torch.bool)
        >>> fit_blend([-right], present, gold)  # a part wrong on every held-out record gets no weight
        [0.0]
    """
    may_flip = [i in signed and len(gold) >= SIGNED_MIN_HELD_OUT for i in range(len(parts))]
    active = list(range(len(parts)))
    weights = [0.0] * len(parts)
    while active:
        fitted = _free_blend([parts[i] for i in active], present, gold)
        against = [(w, i) for i, w in zip(active, fitted) if w < 0 and not may_flip[i]]
        if not against:
            for i, w in zip(active, fitted):
                weights[i] = w
            break
        active.remove(min(against)[1])
    return weights


def _free_blend(parts: list[torch.Tensor], present: torch.Tensor, gold: torch.Tensor) -> list[float]:
    """``fit_blend`` with every weight free in sign."""
    parts = [z.masked_fill(~present, 0.0) for z in parts]
    weights = torch.tensor([1.0] + [0.0] * (len(parts) - 1), requires_grad=True)
    optimizer = torch.optim.LBFGS([weights], lr=0.5, max_iter=100, line_search_fn="strong_wolfe")
    prior = 1.0 / (2.0 * BLEND_PRIOR_SD**2 * len(gold))

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        mixed = sum(w * z for w, z in zip(weights, parts))
        loss = F.cross_entropy(mixed.masked_fill(~present, MASKED), gold) + prior * (weights**2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return [float(w) for w in weights.detach()]


def _scores(logits: torch.Tensor, present: torch.Tensor, gold: torch.Tensor) -> dict[str, float]:
    logits = logits.masked_fill(~present, MASKED)
    return {"accuracy": float((logits.argmax(1) == gold).float().mean()), "nll": float(F.cross_entropy(logits, gold))}


def fit_best(
    group: _Group,
    settings: TeachSettings | None = None,
    lexical: bool = True,
    neighbours: bool = True,
    refit: bool = True,
    catch_all: Sequence[str] = (),
    encoder: ToolEncoder | None = None,
    identifier_words: bool = False,
) -> TaughtQuestion:
    """Fit one taught question on each feature candidate the group holds; keep the lowest held-out NLL;
    add the lexical part (``add_lexical``), the neighbour vote (``add_neighbours``), on a
    ``catch_all`` option the novelty part (``add_novelty``) and, given the frozen encoder ``encoder``,
    the request–tool match (``add_tool_match``) where asked and where they help; last, with
    ``refit``, retrain every part on all records (``refit_on_all``).

    The report's ``held_out_nll_by_features`` lists every candidate's held-out NLL.
    """
    fits = [fit_group(group, settings, spec=spec) for spec in group.features]
    best = min(fits, key=lambda taught: taught.report["held_out_taught"]["nll"])
    best.report["held_out_nll_by_features"] = {fit.features: fit.report["held_out_taught"]["nll"] for fit in fits}
    if lexical:
        best = add_lexical(group, best, identifier_words=identifier_words)
    if neighbours:
        best = add_neighbours(group, best)
    if any(name in group.names for name in catch_all):
        best = add_novelty(group, best, catch_all)
    if encoder is not None and wants_tool_match(group):
        best = add_tool_match(group, best, encoder)
    return refit_on_all(group, best, settings) if refit else best


def _rows(group: _Group) -> tuple[list[int], list[int]]:
    """Indices of the fit records and of the held-out records."""
    return [i for i, h in enumerate(group.held_out) if not h], [i for i, h in enumerate(group.held_out) if h]


def _blend_logits(
    taught: TaughtQuestion,
    features: torch.Tensor,
    head: torch.Tensor,
    present: torch.Tensor,
    texts: Sequence[str],
    tools: torch.Tensor | None = None,
) -> torch.Tensor:
    """``TaughtQuestion.blend`` for many records [N, n] (absent options' head logits count as 0;
    ``tools``: their ``ToolMatch.features``, needed once the question has a tool-match part)."""
    with torch.no_grad():
        lexical = torch.stack([taught.lexical.logits(text) for text in texts]) if taught.lexical is not None else None
        return taught.blend(features, head.masked_fill(~present, 0.0), lexical, tools)


def _neighbour_bank(
    mean: torch.Tensor,
    projection: torch.Tensor,
    features: torch.Tensor,
    labels: torch.Tensor,
    k: int,
    temperature: float,
) -> NeighbourModel:
    """A neighbour model over these records, its bank rounded as it is stored."""
    bank = dequantise_bank(quantise_bank(project(features, mean, projection)))
    return NeighbourModel(mean, projection, bank, labels, k=k, temperature=temperature)


def _fit_records_bank(group: _Group, spec: str, dims: int) -> NeighbourModel:
    """A neighbour model over the group's fit records: the projection fitted on them, mean and
    projection rounded as stored, k and temperature the first of their grids."""
    fit_rows, _ = _rows(group)
    x_fit, _, _, y_fit = group.tensors(fit_rows, spec)
    mean, projection = (_as_stored(part) for part in fit_projection(x_fit, dims))
    return _neighbour_bank(mean, projection, x_fit, y_fit, NEIGHBOUR_K_GRID[0], NEIGHBOUR_TEMPERATURE_GRID[0])


def add_neighbours(group: _Group, taught: TaughtQuestion, dims: int = NEIGHBOUR_DIMS) -> TaughtQuestion:
    """``taught`` with the neighbour vote of its fit records in the blend, if that lowers the held-out
    NLL by at least ``NEIGHBOUR_MIN_GAIN``; otherwise unchanged. k and the temperature are picked on
    held-out NLL from ``NEIGHBOUR_K_GRID`` x ``NEIGHBOUR_TEMPERATURE_GRID``; the blend so far and the
    vote are weighted by a two-part blend fit. The report's ``neighbours`` says what was measured and decided.
    """
    _, held_rows = _rows(group)
    x_held, head_held, p_held, y_held = group.tensors(held_rows, taught.features)
    so_far = _blend_logits(taught, x_held, head_held, p_held, [group.texts[i] for i in held_rows])
    n = len(group.names)
    bank = _fit_records_bank(group, taught.features, dims)
    best: tuple[dict[str, float], NeighbourModel, list[float]] | None = None
    for k in NEIGHBOUR_K_GRID:
        for temperature in NEIGHBOUR_TEMPERATURE_GRID:
            model = replace(bank, k=k, temperature=temperature)
            vote = model.logits(x_held, n)
            weights = fit_blend([so_far, vote], p_held, y_held)
            scores = _scores(weights[0] * so_far + weights[1] * vote, p_held, y_held)
            if best is None or scores["nll"] < best[0]["nll"]:
                best = (scores, model, weights)
    assert best is not None
    with_vote, model, (scale, epsilon) = best
    without = taught.report["held_out_taught"]
    kept = with_vote["nll"] <= without["nll"] * (1.0 - NEIGHBOUR_MIN_GAIN) and epsilon > 0
    taught.report["neighbours"] = {
        "kept": kept,
        "k": model.k,
        "temperature": model.temperature,
        "dims": model.projection.shape[1],
        "held_out_with_neighbours": with_vote,
        "held_out_without_neighbours": without,
    }
    if not kept:
        return taught
    blend = {name: round(value * scale, 4) for name, value in taught.report["blend"].items()} | {
        "neighbours": round(epsilon, 4)
    }
    report = {**taught.report, "blend": blend, "held_out_taught": with_vote}
    return replace(
        taught,
        alpha=taught.alpha * scale,
        gamma=taught.gamma * scale,
        beta=taught.beta * scale,
        delta=taught.delta * scale,
        neighbours=model,
        epsilon=epsilon,
        report=report,
    )


def add_novelty(
    group: _Group, taught: TaughtQuestion, catch_all: Sequence[str], dims: int = NEIGHBOUR_DIMS
) -> TaughtQuestion:
    """``taught`` with a novelty part on one of its ``catch_all`` options (see ``neighbours.novelty``),
    if that lowers the held-out NLL by at least ``NOVELTY_MIN_GAIN``; otherwise unchanged.

    For each catch-all option with held-out records, ``a · novelty + b`` on that option's logit is
    fitted on the held-out records with the blend so far fixed; the one with the lowest NLL and
    ``a < 0`` (the less the state resembles the other options' records, the likelier this option)
    is the candidate. Only named options are tried: offered every option, held-out selection also
    picked ordinary intents and spam labels, and those parts lowered test accuracy (docs/teaching.md).
    It uses the neighbour bank of the vote, or a bank of the fit records built for it (vote weight 0)
    when the vote was not kept. The report's ``novelty`` says what was measured and decided.
    """
    _, held_rows = _rows(group)
    x_held, head_held, p_held, y_held = group.tensors(held_rows, taught.features)
    so_far = _blend_logits(taught, x_held, head_held, p_held, [group.texts[i] for i in held_rows])
    bank = taught.neighbours if taught.neighbours is not None else _fit_records_bank(group, taught.features, dims)
    n = len(group.names)
    nearest = bank.nearest_by_label(bank.similarity(x_held), n)
    best: tuple[dict[str, float], Novelty] | None = None
    for option in sorted(set(y_held.tolist()) & {group.names.index(name) for name in catch_all if name in group.names}):
        feature = novelty(nearest, option)
        (weight,), bias = _fit_option_part(so_far, feature[:, None], option, p_held, y_held)
        part = Novelty(group.names[option], weight, bias)
        scores = _scores(so_far + part.logits(feature, option, n), p_held, y_held)
        if weight < 0 and (best is None or scores["nll"] < best[0]["nll"]):
            best = (scores, part)
    without = taught.report["held_out_taught"]
    kept = best is not None and best[0]["nll"] <= without["nll"] * (1.0 - NOVELTY_MIN_GAIN)
    taught.report["novelty"] = {"kept": kept, "held_out_without_novelty": without}
    if best is None:
        return taught
    with_novelty, part = best
    taught.report["novelty"] |= {
        "option": part.option,
        "weight": round(part.weight, 4),
        "bias": round(part.bias, 4),
        "held_out_with_novelty": with_novelty,
    }
    if not kept:
        return taught
    return replace(taught, neighbours=bank, novelty=part, report={**taught.report, "held_out_taught": with_novelty})


def _fit_option_part(
    base: torch.Tensor, features: torch.Tensor, option: int, present: torch.Tensor, gold: torch.Tensor
) -> tuple[list[float], float]:
    """Weights and bias of ``weights · features + bias`` [N, k] on one option's logit, over fixed ``base``
    logits, minimising held-out NLL under the prior ``NOVELTY_PRIOR_SD`` (MAP); the novelty and the
    tool-match parts are both fitted this way."""
    params = torch.zeros(features.shape[1] + 1, requires_grad=True)
    column = F.one_hot(torch.tensor(option), base.shape[1]).float()
    base = base.masked_fill(~present, MASKED)
    optimizer = torch.optim.LBFGS([params], lr=1, max_iter=100, line_search_fn="strong_wolfe")
    prior = 1.0 / (2.0 * NOVELTY_PRIOR_SD**2 * len(gold))

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = (
            F.cross_entropy(base + (features @ params[:-1] + params[-1])[:, None] * column, gold)
            + prior * (params**2).sum()
        )
        loss.backward()
        return loss

    optimizer.step(closure)
    values = params.detach().tolist()
    return values[:-1], values[-1]


def wants_tool_match(group: _Group) -> bool:
    """Whether the request–tool match is tried: a yes/no question whose records mostly list tools."""
    if group.kind != "noul" or not group.texts:
        return False
    return sum(lists_tools(text) for text in group.texts) >= TOOL_MATCH_MIN_SHARE * len(group.texts)


def add_tool_match(
    group: _Group, taught: TaughtQuestion, encoder: ToolEncoder, kinds: Sequence[str] = TOOL_MATCH_KINDS
) -> TaughtQuestion:
    """``taught`` with a request–tool match part on its "yes" option (see ``clef_agents.model.tool_match``),
    if that lowers the held-out NLL by at least ``TOOL_MATCH_MIN_GAIN``; otherwise unchanged.

    Each kind in ``kinds`` is tried (``coverage``: token-level, its IDF weights from the fit records;
    ``cosine``: pooled). The features of the held-out records are standardised by their own mean and
    spread, and ``weights · features + bias`` is fitted on the held-out NLL with the blend so far fixed
    (MAP, as the novelty part). The kind with the lower held-out NLL is the candidate. The report's
    ``tool_match`` says what was measured and decided.
    """
    fit_rows, held_rows = _rows(group)
    option = group.names.index(wire.NOUL_OPTIONS[0])
    texts = [group.texts[i] for i in held_rows]
    x_held, head_held, p_held, y_held = group.tensors(held_rows, taught.features)
    so_far = _blend_logits(taught, x_held, head_held, p_held, texts)
    tried: dict[str, tuple[ToolMatch, dict[str, float]]] = {}
    for kind in kinds:
        idf = fit_token_idf([group.texts[i] for i in fit_rows], encoder.token_ids) if kind == "coverage" else None
        raw = tool_features(kind, texts, encoder, idf)
        mean, scale = raw.mean(0), raw.std(0).clamp(min=1e-3)
        weights, bias = _fit_option_part(so_far, (raw - mean) / scale, option, p_held, y_held)
        part = ToolMatch(
            group.names[option],
            tuple(round(w, 6) for w in weights),
            round(bias, 6),
            tuple(round(m, 6) for m in mean.tolist()),
            tuple(round(s, 6) for s in scale.tolist()),
            kind=kind,
            idf=idf,
        )
        tried[kind] = part, _scores(so_far + part.logits(raw, option, len(group.names)), p_held, y_held)
    best_kind = min(tried, key=lambda kind: tried[kind][1]["nll"])
    part, with_tools = tried[best_kind]
    without = taught.report["held_out_taught"]
    kept = with_tools["nll"] <= without["nll"] * (1.0 - TOOL_MATCH_MIN_GAIN)
    taught.report["tool_match"] = {
        "kept": kept,
        "option": part.option,
        "kind": best_kind,
        "features": list(part.feature_names),
        "weight": list(part.weight),
        "bias": part.bias,
        "held_out_listing_tools": round(sum(lists_tools(t) for t in texts) / max(len(texts), 1), 4),
        "held_out_without_tool_match": without,
        "held_out_with_tool_match": with_tools,
        "held_out_by_kind": {kind: scores for kind, (_, scores) in tried.items()},
    }
    if not kept:
        return taught
    return replace(taught, tool_match=part, report={**taught.report, "held_out_taught": with_tools})


def refit_on_all(group: _Group, taught: TaughtQuestion, settings: TeachSettings | None = None) -> TaughtQuestion:
    """``taught`` with its network, linear map, word model and neighbour bank fitted again on the fit and
    held-out records together, with the hyper-parameters and blend weights chosen on held-out.

    The held-out scores in the report stay those measured before the refit (no records are left to
    measure it on); ``report["refit"]`` records how many records the shipped parts saw.
    """
    rows = list(range(len(group.gold)))
    features, _, present, gold = group.tensors(rows, taught.features)
    n = len(group.names)
    parts = _train_network(features, present, gold, n, settings or TeachSettings())
    linear_weight, linear_bias = _fit_linear(features, present, gold, taught.report["l2"], n)
    lexical = taught.lexical
    if lexical is not None:
        texts = list(group.texts)
        words = lexical.identifier_words
        lexical = _stored_lexical(
            fit_lexical(
                texts,
                present,
                gold,
                taught.report["lexical"]["l2"],
                build_vocabulary(texts, identifier_words=words),
                identifier_words=words,
            )
        )
    neighbours = taught.neighbours
    if neighbours is not None:
        neighbours = _neighbour_bank(
            neighbours.mean, neighbours.projection, features, gold, neighbours.k, neighbours.temperature
        )
    report = {**taught.report, "refit": {"records": len(rows)}}
    return replace(
        taught,
        **parts,
        linear_weight=linear_weight,
        linear_bias=linear_bias,
        lexical=lexical,
        neighbours=neighbours,
        report=report,
    )


def add_lexical(
    group: _Group, taught: TaughtQuestion, l2_grid: Sequence[float] = LEXICAL_L2_GRID, identifier_words: bool = False
) -> TaughtQuestion:
    """``taught`` with a TF-IDF logistic regression on the state texts in its blend, if that lowers the
    held-out NLL by at least ``LEXICAL_MIN_GAIN`` (the blend is refitted with the fourth part);
    otherwise ``taught`` unchanged. The report's ``lexical`` says what was measured and decided.
    ``identifier_words`` reads identifiers as words (``clef_agents.model.lexical.terms``)."""
    fit_rows, held_rows = _rows(group)
    x_held, head_held, p_held, y_held = group.tensors(held_rows, taught.features)
    _, p_fit, y_fit = group.targets(fit_rows)
    fit_texts, held_texts = [group.texts[i] for i in fit_rows], [group.texts[i] for i in held_rows]
    vocabulary = build_vocabulary(fit_texts, identifier_words=identifier_words)
    if not vocabulary[0]:
        taught.report["lexical"] = {"kept": False, "reason": "no word occurs in two or more fit records"}
        return taught
    best: tuple[float, float, LexicalModel, torch.Tensor] | None = None
    for l2 in l2_grid:
        model = _stored_lexical(fit_lexical(fit_texts, p_fit, y_fit, l2, vocabulary, identifier_words))
        lexical = torch.stack([model.logits(text) for text in held_texts])
        nll = _scores(lexical, p_held, y_held)["nll"]
        if best is None or nll < best[0]:
            best = (nll, l2, model, lexical)
    assert best is not None
    _, lexical_l2, model, lexical = best
    head_part = head_held.masked_fill(~p_held, 0.0)
    with torch.no_grad():
        net, linear = taught.parts_logits(x_held)
    alpha, gamma, beta, delta = fit_blend([net, linear, head_held, lexical], p_held, y_held, signed=(2,))
    with_lexical = _scores(alpha * net + gamma * linear + beta * head_part + delta * lexical, p_held, y_held)
    without = taught.report["held_out_taught"]
    kept = with_lexical["nll"] <= without["nll"] * (1.0 - LEXICAL_MIN_GAIN)
    taught.report["lexical"] = {
        "kept": kept,
        "terms": len(model.vocabulary),
        "l2": lexical_l2,
        "identifier_words": identifier_words,
        "held_out_lexical_alone": _scores(lexical, p_held, y_held),
        "held_out_with_lexical": with_lexical,
        "held_out_without_lexical": without,
    }
    if not kept:
        return taught
    report = {
        **taught.report,
        "blend": {
            "network": round(alpha, 4),
            "linear": round(gamma, 4),
            "head": round(beta, 4),
            "lexical": round(delta, 4),
        },
        "held_out_taught": with_lexical,
    }
    return replace(taught, alpha=alpha, gamma=gamma, beta=beta, delta=delta, lexical=model, report=report)


def _stored_lexical(model: LexicalModel) -> LexicalModel:
    """The lexical model as it reads back from ``taught.safetensors``."""
    return LexicalModel(
        model.vocabulary,
        _as_stored(model.idf),
        _as_stored(model.weight),
        _as_stored(model.bias),
        model.identifier_words,
    )


def fit_group(
    group: _Group, settings: TeachSettings | None = None, l2_grid: Sequence[float] = L2_GRID, spec: str = FEATURES
) -> TaughtQuestion:
    """Fit one taught question on ``spec`` features: network and linear map on the fit records, the blend on the held-out ones."""
    settings = settings or TeachSettings()
    fit_rows, held_rows = _rows(group)
    n = len(group.names)
    x_fit, _, p_fit, y_fit = group.tensors(fit_rows, spec)
    x_held, head_held, p_held, y_held = group.tensors(held_rows, spec)
    head_part = head_held.masked_fill(~p_held, 0.0)
    net_parts = _train_network(x_fit, p_fit, y_fit, n, settings)
    best: tuple[float, float, torch.Tensor, torch.Tensor] | None = None
    for l2 in l2_grid:
        weight, bias = _fit_linear(x_fit, p_fit, y_fit, l2, n)
        linear = x_held * SCALE @ weight.T + bias
        blend = fit_blend([linear, head_held], p_held, y_held, signed=(1,))
        nll = _scores(blend[0] * linear + blend[1] * head_part, p_held, y_held)["nll"]
        if best is None or nll < best[0]:
            best = (nll, l2, weight, bias)
    assert best is not None
    _, l2, linear_weight, linear_bias = best
    draft = TaughtQuestion(
        group.kind,
        group.instructions,
        list(group.names),
        **net_parts,
        linear_weight=linear_weight,
        linear_bias=linear_bias,
        alpha=1.0,
        beta=0.0,
        gamma=0.0,
        features=spec,
    )
    with torch.no_grad():
        net, linear = draft.parts_logits(x_held)
    alpha, gamma, beta = fit_blend([net, linear, head_held], p_held, y_held, signed=(2,))
    report = {
        "records": len(group.gold),
        "held_out": len(held_rows),
        "features": spec,
        "l2": l2,
        "blend": {"network": round(alpha, 4), "linear": round(gamma, 4), "head": round(beta, 4)},
        "held_out_head": _scores(head_held, p_held, y_held),
        "held_out_taught": _scores(alpha * net + gamma * linear + beta * head_part, p_held, y_held),
    }
    return TaughtQuestion(
        group.kind,
        group.instructions,
        list(group.names),
        **net_parts,
        linear_weight=linear_weight,
        linear_bias=linear_bias,
        alpha=alpha,
        beta=beta,
        gamma=gamma,
        report=report,
        features=spec,
    )


def teach(
    model: ClefDecisionModel,
    records: Sequence[dict[str, Any]],
    held_out_records: Sequence[dict[str, Any]] = (),
    *,
    min_records: int = MIN_RECORDS,
    settings: TeachSettings | None = None,
    priors: dict[str, float] | None = None,
    features: Sequence[str] = FEATURE_CANDIDATES,
    lexical: bool = True,
    neighbours: bool = True,
    catch_all: Sequence[str] = (),
    tool_match: bool = True,
    refit: bool = True,
    seed: int = 0,
    progress: bool = True,
    identifier_words: bool = False,
) -> dict[str, dict[str, Any]]:
    """Teach the model every question that appears in labelled records; returns a report per question.

    Without ``held_out_records``, a seeded 10% of ``records`` (``holdout_split``: exactly
    round(10% of n), stratified by question and label) is held out for the blend. Questions with
    fewer than ``min_records`` records to fit, fewer than max(5, min_records / 4) held out, or
    fewer than two labels seen are skipped (and reported as such); when that leaves no question at
    all, ``ValueError`` says, per question, what was found and what is needed, before the model
    reads any record. Existing taught questions not in the records stay as they are.
    ``priors`` (label -> expected deployment share) shifts every taught question that has that
    label from its training shares to those shares (see ``prior_offsets``). Each question is fitted
    on every spec in ``features`` (see ``taught.pool_features``) and keeps the one with the lower
    held-out NLL; with ``lexical``, a TF-IDF logistic regression on the state texts joins its
    blend where it lowers the held-out NLL (``add_lexical``), with ``neighbours`` the label vote
    of the nearest taught records (``add_neighbours``), and on every option named in ``catch_all``
    (labels meaning "none of these") a novelty part (``add_novelty``: how unlike the other options'
    records the state is); with ``tool_match``, on a yes/no question whose states list tools, how well
    the request matches the best listed tool (``add_tool_match``). With ``refit`` (the default), once every choice is made on the held-out
    records, the parts are fitted again on all records (``refit_on_all``). ``identifier_words`` makes
    the lexical part read identifiers as words (``listSharedLinks`` as ``list shared links``).

    Example:
        >>> report = teach(model, records)  # doctest: +SKIP
        >>> report["Is this SMS message spam?"]["held_out_taught"]["accuracy"]  # doctest: +SKIP
        0.99
    """
    from tqdm.auto import tqdm  # noqa: PLC0415

    if not records:
        raise ValueError("teaching needs labelled records, got none")
    _check_shares(priors or {})
    if not features:
        raise ValueError(f"teaching needs at least one feature spec, e.g. {FEATURES!r}")
    for spec in features:
        parse_features(spec)
    all_records = [*records, *held_out_records]
    if held_out_records:
        held_out = [False] * len(records) + [True] * len(held_out_records)
    else:
        held_out = holdout_split(records, HOLDOUT_SHARE, seed)
    counts = count_questions(all_records, held_out)
    options = {name for count in counts.values() for name in count.options}
    unmatched = sorted(set(priors or {}) - options)
    if unmatched:
        raise ValueError(f"prior for {unmatched}, which no question in the records has as an option")
    unmatched = sorted(set(catch_all) - options)
    if unmatched:
        raise ValueError(f"catch-all option {unmatched}, which no question in the records has as an option")
    if not any(count.skip_reason(min_records) is None for count in counts.values()):
        raise ValueError(nothing_to_teach(counts, min_records, given_held_out=bool(held_out_records)))
    groups = collect(model, all_records, held_out, list(dict.fromkeys(features)), progress=progress)
    reports: dict[str, dict[str, Any]] = {}
    for key, group in tqdm(groups.items(), desc="teach: fitting questions", disable=not progress, unit="question"):
        reason = _skip_reason(group, min_records)
        if reason:
            reports[group.instructions] = {"skipped": reason, "records": len(group.gold)}
            continue
        taught = fit_best(
            group,
            settings or TeachSettings(seed=seed),
            lexical=lexical,
            neighbours=neighbours,
            refit=refit,
            catch_all=catch_all,
            encoder=model.engine if tool_match else None,
            identifier_words=identifier_words,
        )
        wanted = {label: share for label, share in (priors or {}).items() if label in group.names}
        if wanted:
            taught = replace(taught, prior_offsets=prior_offsets(group.names, group.gold, wanted))
            taught.report["deployment_priors"] = wanted
        model.engine.taught.add(key, taught)
        reports[group.instructions] = {"type": group.kind, "options": len(group.names), **taught.report}
    return reports


def prior_offsets(names: Sequence[str], gold: Sequence[str], priors: dict[str, float]) -> dict[str, float]:
    """Logit offsets that move a calibrated model from its training label shares to deployment shares.

    ``priors`` gives the expected deployment share of some labels; the other labels share what
    is left in their training proportions (prior-shift correction of calibrated posteriors).

    Example:
        >>> offsets = prior_offsets(["a", "b"], ["a", "b", "b", "b"], {"a": 0.5})
        >>> round(offsets["a"], 3), round(offsets["b"], 3)
        (0.693, -0.405)
    """
    unknown = sorted(set(priors) - set(names))
    if unknown:
        raise ValueError(f"prior for {unknown} but the question's options are {list(names)}")
    _check_shares(priors)
    counts = {name: 0 for name in names}
    for label in gold:
        counts[label] += 1
    total = len(gold)
    missing = [name for name in priors if counts[name] == 0]
    if missing:
        raise ValueError(f"no training records labelled {missing}: a prior needs the label to be seen")
    given = sum(counts[name] for name in priors) / total
    rest = math.log((1.0 - sum(priors.values())) / (1.0 - given)) if given < 1.0 else 0.0
    return {name: math.log(priors[name] / (counts[name] / total)) if name in priors else rest for name in names}


def _check_shares(priors: dict[str, float]) -> None:
    if not all(0.0 < share < 1.0 for share in priors.values()) or sum(priors.values()) >= 1.0:
        raise ValueError(f"deployment shares must lie in (0, 1) and sum below 1, got {priors}")


def _skip_reason(group: _Group, min_records: int) -> str | None:
    count = QuestionCount(
        group.instructions,
        sum(not h for h in group.held_out),
        sum(group.held_out),
        {label: group.gold.count(label) for label in dict.fromkeys(group.gold)},
    )
    return count.skip_reason(min_records)


def held_out_needed(min_records: int) -> int:
    """Held-out records a question needs beside ``min_records`` to fit on.

    Example:
        >>> held_out_needed(20), held_out_needed(100)
        (5, 25)
    """
    return max(5, min_records // 4)


@dataclass(frozen=True)
class QuestionCount:
    """How many labelled records one taught question has: to fit on, held out, and per label; and
    every option name its records offer."""

    instructions: str
    fit: int
    held_out: int
    labels: dict[str, int]
    options: tuple[str, ...] = ()

    def skip_reason(self, min_records: int) -> str | None:
        """Why this question cannot be taught, or ``None`` when it can.

        Example:
            >>> QuestionCount("Spam?", 27, 3, {"yes": 10, "no": 20}).skip_reason(20)
            'too few records: 27 to fit and 3 held out; need 20 and 5'
        """
        if self.fit < min_records or self.held_out < held_out_needed(min_records):
            return f"too few records: {self.fit} to fit and {self.held_out} held out; need {min_records} and {held_out_needed(min_records)}"
        if len(self.labels) < 2:
            return f"only one label seen ({next(iter(self.labels))!r}); teaching needs at least two"
        return None


def count_questions(records: Sequence[dict[str, Any]], held_out: Sequence[bool]) -> dict[str, QuestionCount]:
    """Per taught key, the records to fit on, held out and per label (no model needed).

    Example:
        >>> q = {"spam": {"type": "noul", "instructions": "Spam?"}}
        >>> counts = count_questions([{"state": "a", "questions": q, "labels": {"spam": True}}], [False])
        >>> next(iter(counts.values())).labels
        {'yes': 1}
    """
    found: dict[str, tuple[str, list[int], dict[str, int], dict[str, None]]] = {}
    for record, held in zip(records, held_out):
        _, questions, gold = record_to_example(record)
        for question, index in zip(questions, gold):
            text, split, labels, options = found.setdefault(
                taught_key(question), (wire.content_text(question.instructions), [0, 0], {}, {})
            )
            split[int(held)] += 1
            names = wire.option_names(question)
            options.update(dict.fromkeys(names))
            labels[names[index]] = labels.get(names[index], 0) + 1
    return {
        key: QuestionCount(text, split[0], split[1], labels, tuple(options))
        for key, (text, split, labels, options) in found.items()
    }


def holdout_split(records: Sequence[dict[str, Any]], share: float = HOLDOUT_SHARE, seed: int = 0) -> list[bool]:
    """Which records to hold out: exactly round(``share`` × n), spread over the questions and labels
    in proportion (records are grouped by their questions and labels, shuffled with ``seed``, and
    every 1/share-th one is held out).

    Example:
        >>> q = {"spam": {"type": "noul", "instructions": "Spam?"}}
        >>> records = [{"state": str(i), "questions": q, "labels": {"spam": i % 2 == 0}} for i in range(60)]
        >>> sum(holdout_split(records, 0.1))
        6
    """
    if not 0.0 <= share < 1.0:
        raise ValueError(f"the held-out share must lie in [0, 1), got {share}")
    rng = random.Random(seed)
    strata: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for i, record in enumerate(records):
        _, questions, gold = record_to_example(record)
        strata.setdefault(tuple(sorted((taught_key(q), g) for q, g in zip(questions, gold))), []).append(i)
    groups = list(strata.values())
    rng.shuffle(groups)
    order = [i for group in groups for i in rng.sample(group, len(group))]
    held_out = [False] * len(records)
    for position, i in enumerate(order):
        held_out[i] = math.floor((position + 1) * share + 0.5) > math.floor(position * share + 0.5)
    return held_out


def records_needed(min_records: int, share: float = HOLDOUT_SHARE) -> int:
    """Fewest labelled records of one question that a ``share`` hold-out leaves teachable.

    Example:
        >>> records_needed(20)
        45
    """
    n = min_records
    while n - math.floor(n * share + 0.5) < min_records or math.floor(n * share + 0.5) < held_out_needed(min_records):
        n += 1
    return n


def nothing_to_teach(counts: dict[str, QuestionCount], min_records: int, given_held_out: bool = False) -> str:
    """The error when no question in the records can be taught: what each has and what is needed."""
    found = "; ".join(
        f"{count.instructions[:60]!r}: {count.fit} to fit, {count.held_out} held out, labels "
        + ", ".join(f"{label} {n}" for label, n in count.labels.items())
        for count in counts.values()
    )
    split = (
        "held-out records come from --valid-records"
        if given_held_out
        else f"with {HOLDOUT_SHARE:.0%} held out that is at least {records_needed(min_records)} labelled records per question"
    )
    return (
        f"nothing to teach: no question has enough labelled records. Each question needs at least {min_records} "
        f"records to fit and {held_out_needed(min_records)} held out ({split}), with at least two different labels. "
        f"Found: {found}. Add labelled records, or lower --min-records (now {min_records})"
    )
