"""Training and calibrating the question reader (``clef_agents.model.reader``).

One loop: every step draws a batch of one-question records (``reader_data``), lays each out as its
passes, runs them in one padded forward, and takes a yes/no loss (label-smoothed binary cross-entropy
on the ``[CLS]`` margin) or an option loss (cross-entropy over the options' scores). Checkpoints go to
``out/last`` every ``save_every`` steps and when ``time_limit_s`` is reached, so a run cut short keeps
its work; ``out/final`` is written after calibration on the validation records.

Example:
    >>> summary = train_reader("runs/reader", steps=3000, exclude=("banking77",))  # doctest: +SKIP
    >>> summary["final"]  # doctest: +SKIP
    'runs/reader/final'
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from clef_agents import wire
from clef_agents.model.config import Calibration
from clef_agents.model.encoder import cuda_autocast, default_device
from clef_agents.model.reader import QuestionReader, ReaderConfig
from clef_agents.train.calibration import Lbfgs, fit_platt, fit_temperature
from clef_agents.train.reader_data import reader_records

LABEL_SMOOTHING = 0.05
READER_LBFGS = Lbfgs(lr=1.0, max_iter=200, line_search_fn="strong_wolfe")
"""The reader's calibration fit (strong Wolfe line search; the head's fit keeps its own settings)."""


def typed_items(records: Sequence[dict[str, Any]]) -> list[tuple[str, wire.TextQuestion, int]]:
    """(state text, typed question, gold option index) for one-question records; bad records raise ``ValueError``.

    Example:
        >>> typed_items([{"state": "hi", "questions": {"q": {"type": "noul", "instructions": "Greeting?"}}, "labels": {"q": True}}])[0][2]
        0
    """
    out = []
    for n, record in enumerate(records):
        if len(record.get("questions", {})) != 1:
            raise ValueError(
                f"record {n}: the reader learns from one-question records, got {len(record.get('questions', {}))}"
            )
        ((qid, raw),) = record["questions"].items()
        question = wire.validate_questions({qid: raw})[qid]
        out.append((wire.state_text(record["state"]), question, wire.label_index(question, record["labels"][qid])))
    return out


def batch_loss(reader: QuestionReader, items: Sequence[tuple[str, wire.TextQuestion, int]]) -> torch.Tensor:
    """Mean loss of one batch of (state, question, gold index) with gradients."""
    passes, owners = [], []
    for k, (state, question, _) in enumerate(items):
        for p in reader.layout(state, question):
            passes.append(p)
            owners.append(k)
    yes, scores = reader.forward(passes)
    per_item: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = [([], []) for _ in items]
    for i, k in enumerate(owners):
        per_item[k][0].append(yes[i])
        per_item[k][1].append(scores[i, : len(passes[i].option_spans)])
    losses = []
    for k, (_, question, gold) in enumerate(items):
        z = reader.raw_logits(question, *per_item[k])
        if isinstance(question, wire.Noul):
            target = torch.tensor(1.0 - LABEL_SMOOTHING if gold == 0 else LABEL_SMOOTHING, device=z.device)
            losses.append(F.binary_cross_entropy_with_logits(z[0], target))
        else:
            losses.append(
                F.cross_entropy(z[None], torch.tensor([gold], device=z.device), label_smoothing=LABEL_SMOOTHING)
            )
    return torch.stack(losses).mean()


def length_buckets(lengths: Sequence[int], batch_size: int, rng: random.Random, pool: int = 50) -> list[list[int]]:
    """Batches of indices with similar lengths (sorted within shuffled pools of ``pool`` batches), in random order,
    so padding stays small.

    Example:
        >>> sorted(len(b) for b in length_buckets([5, 1, 9, 3], 2, random.Random(0)))
        [2, 2]
    """
    order = list(range(len(lengths)))
    rng.shuffle(order)
    batches = []
    for start in range(0, len(order), pool * batch_size):
        chunk = sorted(order[start : start + pool * batch_size], key=lambda i: lengths[i])
        batches += [chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def _schedule(step: int, steps: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, steps - warmup))))


def train_reader(
    out: str | Path,
    steps: int = 4000,
    batch_size: int = 32,
    lr: float = 5e-5,
    lr_heads: float = 1e-3,
    seed: int = 0,
    exclude: Sequence[str] = ("banking77",),
    per_set: int = 4000,
    time_limit_s: float | None = None,
    save_every: int = 250,
    config: ReaderConfig | None = None,
    init: str | Path | None = None,
    progress: bool = True,
    command: str | None = None,
    data_version: int = 2,
    keep_every: int | None = None,
    records: Sequence[dict[str, Any]] | None = None,
    valid_records: Sequence[dict[str, Any]] | None = None,
    device: str | torch.device | None = None,
) -> dict[str, Any]:
    """Train a reader from the backbone (or ``init``), calibrate it on validation records, save ``out/final``.

    ``keep_every`` also keeps ``out/step<N>`` every that many steps, for choosing a checkpoint afterwards
    (``clef_agents.train.reader_probe``). ``records`` / ``valid_records``: one-question records staged
    beforehand (``clef-agents reader-records``) instead of a draw from the data sets (``per_set``,
    ``exclude`` and ``data_version`` then play no part in the data). ``device``: CUDA when there is one
    (bfloat16 autocast there), else the CPU; ``CLEF_AGENTS_DEVICE`` overrides the default.

    Returns a summary (steps run, examples/s, losses, wall time, data) that is also written to
    ``out/summary.json``. Example: see the module docstring.
    """
    torch.manual_seed(seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    device = torch.device(device) if device is not None else default_device()
    staged = records is not None
    if records is None:
        records = reader_records("train", per_set=per_set, seed=seed, exclude=exclude, version=data_version)
    if not records:
        raise ValueError("no training records: the draw or the staged file is empty")
    items = typed_items(records)
    reader = QuestionReader.load(init, device) if init else QuestionReader.create(config, device)
    previous = reader.config.trained_on or None
    sets = sorted({str((r.get("meta") or {}).get("dataset", "?")) for r in records})

    def provenance(steps_done: int, finished: bool) -> dict[str, Any]:
        """What a checkpoint saved after ``steps_done`` steps was trained on (kept and last ones included)."""
        return {
            "command": command,
            "sets": sets,
            "excluded": sorted(exclude),
            "records": len(records),
            "staged": staged,
            "steps": steps_done,
            "finished": finished,
            "batch_size": batch_size,
            "seed": seed,
            "per_set": per_set,
            "lr": lr,
            "data_version": data_version,
            "init": str(init) if init else None,
            "previous": previous,
            "device": device.type,
        }

    heads = [p for n, p in reader.network.named_parameters() if not n.startswith("encoder.")]
    body = [p for p in reader.iter_parameters() if all(p is not h for h in heads)]
    for p in body + heads:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW([{"params": body, "lr": lr}, {"params": heads, "lr": lr_heads}], weight_decay=0.01)
    base = [lr, lr_heads]
    warmup = max(1, min(300, steps // 10))
    rng = random.Random(seed)
    lengths = [sum(len(p.input_ids) for p in reader.layout(s, q)) for s, q, _ in items]
    batches: list[list[int]] = []
    log = (out / "log.jsonl").open("a", encoding="utf-8")
    losses: list[float] = []
    bar = _progress(steps, progress)
    reader.train_mode(True)
    step = 0
    for step in range(steps):
        if not batches:
            batches = length_buckets(lengths, batch_size, rng)
        batch = [items[i] for i in batches.pop()]
        for group, rate in zip(optimizer.param_groups, base):
            group["lr"] = rate * _schedule(step, steps, warmup)
        with cuda_autocast(device):
            loss = batch_loss(reader, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(body + heads, 1.0)
        optimizer.step()
        losses.append(loss.item())
        bar.update(1)
        if (step + 1) % 50 == 0:
            mean = sum(losses[-50:]) / len(losses[-50:])
            bar.set_postfix(loss=f"{mean:.3f}")
            log.write(json.dumps({"step": step + 1, "loss": mean, "elapsed_s": round(time.time() - started, 1)}) + "\n")
            log.flush()
        out_of_time = time_limit_s is not None and time.time() - started > time_limit_s
        keep = keep_every is not None and (step + 1) % keep_every == 0
        if (step + 1) % save_every == 0 or out_of_time or keep:
            reader.train_mode(False)
            reader.config = reader.config.model_copy(update={"trained_on": provenance(step + 1, finished=False)})
            reader.save(out / "last")
            if keep:
                reader.save(out / f"step{step + 1}")
            reader.train_mode(True)
        if out_of_time:
            break
    bar.close()
    reader.train_mode(False)
    train_s = time.time() - started
    if valid_records is None and not staged:
        valid_records = reader_records(
            "valid", per_set=max(50, per_set // 20), seed=seed + 1, exclude=exclude, version=data_version
        )
    valid = typed_items(valid_records or [])
    calibration = (
        fit_calibration(reader, valid) if valid else Calibration(fitted_on={"nouls": 0, "choices": 0, "scores": 0})
    )
    reader.set_calibration(calibration)
    trained_on = provenance(step + 1, finished=True)
    reader.config = reader.config.model_copy(update={"trained_on": trained_on})
    reader.save(out / "final")
    summary = {
        **trained_on,
        "examples_per_s": round((step + 1) * batch_size / train_s, 2),
        "train_wall_s": round(train_s, 1),
        "wall_s": round(time.time() - started, 1),
        "loss_first": _mean(losses[:50]),
        "loss_last": _mean(losses[-50:]),
        "calibration": calibration.model_dump(),
        "final": str(out / "final"),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _progress(total: int, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="reader", unit="step", disable=not enabled, mininterval=10)


def _temperature(pairs: Sequence[tuple[torch.Tensor, int]]) -> float:
    return fit_temperature([z for z, _ in pairs], [g for _, g in pairs], READER_LBFGS)


def fit_calibration(reader: QuestionReader, items: Sequence[tuple[str, wire.TextQuestion, int]]) -> Calibration:
    """Platt scaling for yes/no and one temperature each for choice and score, by NLL on ``items``
    (on the logits the reader answers from: after its ``prior_correction``)."""
    logits = reader.corrected_logits([(s, q) for s, q, _ in items])
    return fit_logit_calibration([q for _, q, _ in items], logits, [g for _, _, g in items])


def fit_logit_calibration(
    questions: Sequence[wire.TextQuestion], logits: Sequence[torch.Tensor], gold: Sequence[int]
) -> Calibration:
    """``fit_calibration`` on logits already read (a type with fewer than 20 items keeps the identity).

    Example:
        >>> q = wire.Noul(instructions="Spam?")
        >>> cal = fit_logit_calibration([q] * 40, [torch.tensor([4.0 * (i % 2) - 2.0]) for i in range(40)], [1 - i % 2 for i in range(40)])
        >>> cal.noul_a > 0, cal.fitted_on["nouls"]
        (True, 40)
    """
    nouls = [(z[0], g) for q, z, g in zip(questions, logits, gold) if isinstance(q, wire.Noul)]
    choices = [(z, g) for q, z, g in zip(questions, logits, gold) if isinstance(q, wire.Choice)]
    scores = [(z, g) for q, z, g in zip(questions, logits, gold) if isinstance(q, wire.Score)]
    a, b = (
        fit_platt(
            torch.stack([z for z, _ in nouls]).float(),
            torch.tensor([1.0 if g == 0 else 0.0 for _, g in nouls]),
            READER_LBFGS,
        )
        if len(nouls) >= 20
        else (1.0, 0.0)
    )
    return Calibration(
        noul_a=a,
        noul_b=b,
        choice_temperature=_temperature(choices) if len(choices) >= 20 else 1.0,
        score_temperature=_temperature(scores) if len(scores) >= 20 else 1.0,
        fitted_on={"nouls": len(nouls), "choices": len(choices), "scores": len(scores)},
    )


def attach_reader(model: str | Path, reader_folder: str | Path, out: str | Path) -> Path:
    """Write ``out``: the checkpoint ``model`` (a folder or ``"mini"``) with the reader of ``reader_folder``
    attached, its data card noting what the reader learnt from (and the run's ``summary.json``, when
    the reader folder sits in a ``train-reader`` run folder: wall time, examples/s, losses).

    Example:
        >>> attach_reader("mini", "runs/reader/final", "runs/mini_reader")  # doctest: +SKIP
        PosixPath('runs/mini_reader')
    """
    import warnings

    from clef_agents.model import ClefDecisionModel, UntrainedModelWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedModelWarning)
        decision_model = ClefDecisionModel.from_pretrained(model, reader=False)
    reader = QuestionReader.load(reader_folder)
    decision_model.engine.attach_reader(reader)
    summary = Path(reader_folder).parent / "summary.json"
    run = json.loads(summary.read_text(encoding="utf-8")) if summary.is_file() else {}
    card = {**decision_model.config.data_card, "reader": {**run, **reader.config.trained_on}}
    decision_model.engine.config = decision_model.config.model_copy(update={"data_card": card})
    return decision_model.save_pretrained(out)
