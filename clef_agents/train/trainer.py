"""Training: frozen backbone, LoRA + routing head, label-smoothed CE + Brier + an ordinal term.

Four stages share one loop (``TrainSettings.stage``):

- ``full``: LoRA + head, one backbone pass per step;
- ``adapter``: LoRA alone, through linear probes on pooled states of recurring questions
  (``adapter_stage``; the head is left as it was and must be trained again after);
- ``head``: the whole head on cached final-layer states of the training texts (backbone and
  adapter fixed: the states are computed once, so a step costs only the head);
- ``match``: only the pooled part of the head (prior and match path) on the same cache, which
  is cheap enough for many passes over every intent set.

Seeded and resumable: the run folder keeps ``last/`` (a loadable checkpoint) and
``train_state.pt`` (optimizer, scheduler, step; loaded with ``weights_only=True``). A progress bar
shows loss, throughput and ETA; every ``log_every`` steps a JSON line goes to ``train_log.jsonl``.

Example:
    >>> from clef_agents.train.trainer import TrainSettings, train  # doctest: +SKIP
    >>> train(model, train_records, valid_records, TrainSettings(steps=2000), "runs/mini")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from clef_agents import wire
from clef_agents.model.decision_model import ClefDecisionModel
from clef_agents.model.engine import DecisionEngine
from clef_agents.model.scorer import EncodedBatch
from clef_agents.model.taught import TaughtQuestions
from clef_agents.records import Example, record_to_example
from clef_agents.train import adapter_stage, augment


@dataclass
class TrainSettings:
    """Hyper-parameters of one training run (saved into the checkpoint's data card)."""

    steps: int = 2000
    batch_size: int = 32
    lr_head: float = 1e-3
    lr_lora: float = 5e-4
    weight_decay: float = 0.01
    warmup_steps: int = 100
    label_smoothing: float = 0.05
    brier_weight: float = 0.5
    ordinal_weight: float = 0.5
    grad_clip: float = 1.0
    seed: int = 0
    log_every: int = 25
    save_every: int = 250
    augment: bool = True
    max_train_state_tokens: int | None = 128
    threads: int | None = None
    micro_batches: int = 2
    dataset_weights: dict[str, float] = field(default_factory=dict)
    label_weights: dict[str, float] = field(default_factory=dict)
    """Draw records of ``"dataset:label"`` this many times as often within their data set
    (e.g. ``{"clinc150:oos": 20}`` for a rare out-of-scope class)."""
    stage: str = "full"
    """``full`` (LoRA + head), ``adapter`` (LoRA through probes), ``head`` or ``match`` (cached states;
    see the module docstring)."""
    state_cache: str | None = None
    """File to keep the cached states in between runs (reused when it was made with the same adapter)."""


def question_losses(
    engine: DecisionEngine,
    logits: torch.Tensor,
    batch: EncodedBatch,
    examples: Sequence[Example],
    settings: TrainSettings,
) -> torch.Tensor:
    """Mean over all questions of label-smoothed CE + Brier (+ ordinal spread for scores)."""
    terms = []
    for i, spans in enumerate(batch.spans):
        _, questions, gold = examples[i]
        for (start, end), question, target in zip(spans, questions, gold):
            z = logits[i, start:end]
            log_p = F.log_softmax(z, dim=-1)
            p = log_p.exp()
            n = end - start
            smooth = torch.full_like(p, settings.label_smoothing / n)
            smooth[target] += 1.0 - settings.label_smoothing
            loss = -(smooth * log_p).sum()
            one_hot = torch.zeros_like(p)
            one_hot[target] = 1.0
            loss = loss + settings.brier_weight * ((p - one_hot) ** 2).sum()
            if isinstance(question, wire.Score):
                distance = (torch.arange(n, device=p.device, dtype=p.dtype) - target).abs() / (n - 1)
                loss = loss + settings.ordinal_weight * (p * distance).sum()
            terms.append(loss)
    return torch.stack(terms).mean()


class RecordSampler:
    """Draws training records with per-dataset weights and applies schema augmentation."""

    def __init__(self, records: Sequence[dict[str, Any]], settings: TrainSettings):
        self.settings = settings
        by_dataset: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            by_dataset.setdefault(record.get("meta", {}).get("dataset", "?"), []).append(record)
        self.datasets = sorted(by_dataset)
        self.pools = [by_dataset[name] for name in self.datasets]
        sizes = [len(pool) for pool in self.pools]
        weights = [settings.dataset_weights.get(name, 1.0) * size for name, size in zip(self.datasets, sizes)]
        total = sum(weights)
        self.probabilities = [w / total for w in weights]
        self.cumulative = [
            _cumulative_label_weights(name, pool, settings.label_weights)
            for name, pool in zip(self.datasets, self.pools)
        ]
        self._augment = _augmenter(settings)

    def texts(self) -> list[str]:
        """Every distinct state text the sampler can draw."""
        return list(dict.fromkeys(wire.state_text(r["state"]) for pool in self.pools for r in pool))

    def draw(self, rng: random.Random, count: int) -> list[Example]:
        examples = []
        while len(examples) < count:
            index = rng.choices(range(len(self.pools)), weights=self.probabilities)[0]
            pool, cumulative = self.pools[index], self.cumulative[index]
            raw = rng.choices(pool, cum_weights=cumulative)[0] if cumulative else rng.choice(pool)
            record = self._augment(raw, rng)
            try:
                examples.append(record_to_example(record))
            except (ValueError, wire.InvalidRequestError):
                continue
        return examples


def _cumulative_label_weights(
    dataset: str, pool: list[dict[str, Any]], label_weights: dict[str, float]
) -> list[float] | None:
    """Cumulative draw weights for a pool when some of its labels are boosted, else None."""
    boosts = {key.split(":", 1)[1]: w for key, w in label_weights.items() if key.split(":", 1)[0] == dataset}
    if not boosts:
        return None
    total, cumulative = 0.0, []
    for record in pool:
        labels = [str(v) for v in record.get("labels", {}).values()]
        total += max([boosts.get(label, 1.0) for label in labels] or [1.0])
        cumulative.append(total)
    return cumulative


def _augmenter(settings: TrainSettings) -> Callable[[dict[str, Any], random.Random], dict[str, Any]]:
    if not settings.augment:
        return lambda record, rng: record
    config = augment.AugmentConfig()
    return lambda record, rng: augment.augment_record(record, rng, config)


def _lr_lambda(settings: TrainSettings) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < settings.warmup_steps:
            return (step + 1) / settings.warmup_steps
        progress = (step - settings.warmup_steps) / max(1, settings.steps - settings.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def train(
    model: ClefDecisionModel,
    train_records: Sequence[dict[str, Any]],
    settings: TrainSettings,
    run_dir: str | Path,
    *,
    resume: bool = True,
    progress: bool = True,
    held_out: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Train LoRA + head in place (what a stage trains: see the module docstring); returns a summary
    (losses, wall time, throughput; for the ``adapter`` stage the probes' accuracy on ``held_out``).

    Example:
        >>> summary = train(model, records, TrainSettings(steps=10), "runs/tiny")  # doctest: +SKIP
    """
    from tqdm.auto import tqdm

    if settings.threads:
        torch.set_num_threads(settings.threads)
    engine = model.engine
    if len(engine.taught):
        # taught weights are fitted to this adapter and head: training makes them stale
        print(
            f"dropping {len(engine.taught)} taught question(s): they no longer fit once the model trains; teach again after"
        )
        engine.taught = TaughtQuestions()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(settings.seed)
    params = _stage_parameters(engine, settings.stage)
    probes = None
    if settings.stage == "adapter":
        probes = adapter_stage.Probes(adapter_stage.probe_questions(train_records), engine).to(engine.device)
        train_records = adapter_stage.probed_records(train_records, probes)
        settings = replace(
            settings, augment=False
        )  # probes are keyed by the exact question; augmentation would rename it
        params = params + list(probes.parameters())
    lora_ids = {id(p) for n, p in engine.network.named_parameters() if "lora_" in n}
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for p in params if id(p) in lora_ids], "lr": settings.lr_lora},
            {"params": [p for p in params if id(p) not in lora_ids], "lr": settings.lr_head},
        ],
        weight_decay=settings.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_lambda(settings))
    start_step, earlier_s = _maybe_resume(engine, optimizer, scheduler, run_dir, probes) if resume else (0, 0.0)
    sampler = RecordSampler(train_records, settings)
    saved_window = engine.config.max_state_tokens
    if settings.max_train_state_tokens:
        engine.config.max_state_tokens = min(saved_window, settings.max_train_state_tokens)
    cache = None
    if settings.stage in ("head", "match"):
        cache = StateCache(engine)
        if settings.state_cache:
            cache.load(settings.state_cache)
        cache.fill(sampler.texts(), progress=progress)
        if settings.state_cache:
            cache.save(settings.state_cache)
    log_path = run_dir / "train_log.jsonl"
    losses: list[float] = []
    began = time.time()
    bar = tqdm(
        total=settings.steps, initial=start_step, disable=not progress, desc="train", unit="step", dynamic_ncols=True
    )
    engine.train_mode(True)
    if settings.stage in ("head", "match"):
        engine.network.eval()  # cached states were computed without dropout; keep the backbone as it was
    try:
        for step in range(start_step, settings.steps):
            rng = random.Random(settings.seed * 1_000_003 + step)
            examples = sampler.draw(rng, settings.batch_size)
            optimizer.zero_grad(set_to_none=True)
            if probes is not None:
                loss = adapter_stage.accumulate(engine, probes, examples, settings.label_smoothing)
            else:
                loss = _accumulate(engine, examples, settings, cache)
            torch.nn.utils.clip_grad_norm_(params, settings.grad_clip)
            optimizer.step()
            scheduler.step()
            losses.append(float(loss.detach()))
            done = step + 1 - start_step
            rate = done * settings.batch_size / max(1e-9, time.time() - began)
            bar.set_postfix(loss=f"{sum(losses[-25:]) / len(losses[-25:]):.4f}", ex_s=f"{rate:.1f}")
            bar.update(1)
            if (step + 1) % settings.log_every == 0:
                with log_path.open("a") as handle:
                    handle.write(
                        json.dumps(
                            {
                                "step": step + 1,
                                "loss": sum(losses[-settings.log_every :]) / settings.log_every,
                                "examples_per_s": rate,
                                "elapsed_s": time.time() - began,
                            }
                        )
                        + "\n"
                    )
            if (step + 1) % settings.save_every == 0 or step + 1 == settings.steps:
                engine.config.max_state_tokens = saved_window
                _save_state(engine, optimizer, scheduler, step + 1, run_dir, earlier_s + time.time() - began, probes)
                if settings.max_train_state_tokens:
                    engine.config.max_state_tokens = min(saved_window, settings.max_train_state_tokens)
        if cache is not None and settings.state_cache:
            cache.save(
                settings.state_cache
            )  # keeps the schema embeddings this run computed (training window still set)
    finally:
        bar.close()
        engine.config.max_state_tokens = saved_window
        engine.train_mode(False)
    wall = time.time() - began
    extra = {}
    if probes is not None and held_out:
        extra["probe_held_out"] = adapter_stage.probe_accuracy(engine, probes, held_out)
    return {
        **extra,
        "steps": settings.steps,
        "resumed_from": start_step,
        "first_loss": losses[0] if losses else None,
        "final_loss": sum(losses[-25:]) / max(1, len(losses[-25:])) if losses else None,
        "wall_time_s": earlier_s + wall,
        "wall_time_before_resume_s": earlier_s,
        "examples_per_s": (settings.steps - start_step) * settings.batch_size / max(1e-9, wall),
        "losses": losses,
        "settings": asdict(settings),
    }


STAGES = ("full", "adapter", "head", "match")


def _stage_parameters(engine: DecisionEngine, stage: str) -> list[torch.nn.Parameter]:
    """What a stage trains: LoRA + head (full), LoRA (adapter), the head (head) or its pooled part (match)."""
    if stage not in STAGES:
        raise ValueError(f"unknown training stage {stage!r}; choose one of {', '.join(STAGES)}")
    if stage == "full":
        return engine.trainable_parameters()
    if stage == "adapter":
        if engine.config.lora is None:
            raise ValueError("the adapter stage trains LoRA, but this model has none (config.lora is null)")
        for p in engine.head.parameters():
            p.requires_grad_(False)
        lora = [p for name, p in engine.network.named_parameters() if "lora_" in name]
        for p in lora:
            p.requires_grad_(True)
        return lora
    for p in engine.network.parameters():
        p.requires_grad_(False)
    head = list(engine.head.parameters()) if stage == "head" else engine.head.match_parameters()
    for p in head:
        p.requires_grad_(True)
    return head


def _accumulate(
    engine: DecisionEngine, examples: list[Example], settings: TrainSettings, cache: StateCache | None = None
) -> torch.Tensor:
    """Forward/backward in length-sorted micro-batches (less padding), gradients summed so the
    step equals one pass over the whole batch; returns the batch loss (detached)."""
    ordered = sorted(examples, key=lambda ex: len(ex[0]))
    parts = 1 if settings.stage == "match" else settings.micro_batches
    size = max(1, math.ceil(len(ordered) / parts))
    total = torch.zeros(())
    for start in range(0, len(ordered), size):
        part = ordered[start : start + size]
        if cache is None:
            batch = engine.encode([(text, qs) for text, qs, _ in part])
            logits = engine.logits(batch)
        else:
            batch = engine.encode_schemas([qs for _, qs, _ in part])
            logits = _cached_logits(engine, cache, batch, [text for text, _, _ in part], settings.stage)
        loss = question_losses(engine, logits, batch, part, settings) * (len(part) / len(ordered))
        loss.backward()
        total = total + loss.detach()
    return total


def _cached_logits(
    engine: DecisionEngine, cache: StateCache, batch: EncodedBatch, texts: list[str], stage: str
) -> torch.Tensor:
    if stage == "match":
        pooled = cache.pooled(texts).to(engine.device)
        dev = engine.device
        return engine.head.pooled_logits(
            pooled,
            batch.option_vec.to(dev),
            batch.question_vec.to(dev),
            batch.option_type.to(dev),
            batch.option_question.to(dev),
        )
    hidden, mask = cache.padded(texts)
    return engine.head_logits(hidden, mask, batch)


class StateCache:
    """Final-layer token states of state texts, computed once (backbone and adapter fixed) and kept
    in float16, so head-only stages skip the backbone.

    Example:
        >>> cache = StateCache(engine); cache.fill(["where is my card?"])  # doctest: +SKIP
        >>> hidden, mask = cache.padded(["where is my card?"])  # doctest: +SKIP
    """

    def __init__(self, engine: DecisionEngine, chunk: int = 64):
        self.engine = engine
        self.chunk = chunk
        self.states: dict[str, torch.Tensor] = {}

    def fill(self, texts: Sequence[str], progress: bool = True) -> None:
        """Compute the states of texts not yet cached (length-sorted chunks, little padding)."""
        from tqdm.auto import tqdm

        missing = sorted((t for t in dict.fromkeys(texts) if t not in self.states), key=len)
        for start in tqdm(range(0, len(missing), self.chunk), desc="cache states", unit="batch", disable=not progress):
            chunk = missing[start : start + self.chunk]
            self.states.update(zip(chunk, self.engine.state_hidden(chunk)))

    def fingerprint(self) -> str:
        """What the states depend on: backbone name, window and adapter weights."""
        import hashlib

        digest = hashlib.sha256(f"{self.engine.config.backbone}|{self.engine.config.max_state_tokens}".encode())
        for name, p in sorted(self.engine.network.named_parameters()):
            if "lora_" in name:
                digest.update(p.detach().float().cpu().numpy().tobytes())
        return digest.hexdigest()

    def save(self, path: str | Path) -> None:
        """Write the cache, and the engine's schema text embeddings beside it (a weights-only torch file).

        Schema embeddings come from the frozen backbone with the adapter off, so a later run reuses
        them even when its adapter differs; the states are reused only with the same adapter.
        """
        texts = list(self.states)
        schema = self.engine.encoder.cached_vectors()
        tmp = Path(f"{path}.tmp")
        torch.save(
            {
                "fingerprint": self.fingerprint(),
                "texts": texts,
                "states": [self.states[t] for t in texts],
                "schema_backbone": self.engine.config.backbone,
                "schema_texts": list(schema),
                "schema_vectors": list(schema.values()),
            },
            tmp,
        )
        tmp.replace(path)

    def load(self, path: str | Path) -> int:
        """Load a saved cache if it was made with this backbone, window and adapter; returns the count
        of states (schema text embeddings are loaded whenever the backbone matches)."""
        if not Path(path).exists():
            return 0
        saved = torch.load(path, weights_only=True)
        if saved.get("schema_backbone") == self.engine.config.backbone:
            self.engine.encoder.cache_vectors(dict(zip(saved["schema_texts"], saved["schema_vectors"])))
        if saved["fingerprint"] != self.fingerprint():
            print(f"state cache {path} was made with other weights; recomputing")
            return 0
        self.states.update(zip(saved["texts"], saved["states"]))
        return len(saved["texts"])

    def padded(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """States [B, T, H] (float32) and mask [B, T] for texts, filling any that are missing."""
        self.fill(texts, progress=False)
        rows = [self.states[t] for t in texts]
        hidden = torch.zeros(len(rows), max(r.shape[0] for r in rows), rows[0].shape[1])
        mask = torch.zeros(hidden.shape[:2], dtype=torch.long)
        for i, row in enumerate(rows):
            hidden[i, : row.shape[0]] = row.float()
            mask[i, : row.shape[0]] = 1
        return hidden, mask

    def pooled(self, texts: Sequence[str]) -> torch.Tensor:
        """Mean-pooled states [B, H] for texts."""
        self.fill(texts, progress=False)
        return torch.stack([self.states[t].float().mean(0) for t in texts])


def _save_state(
    engine: DecisionEngine,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    step: int,
    run_dir: Path,
    elapsed_s: float,
    probes: torch.nn.Module | None = None,
) -> None:
    engine.save(run_dir / "last")
    state = {
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "step": step,
        "elapsed_s": elapsed_s,
    }
    if probes is not None:
        state["probes"] = probes.state_dict()
    tmp = run_dir / "train_state.pt.tmp"
    torch.save(state, tmp)
    tmp.replace(run_dir / "train_state.pt")


def _maybe_resume(
    engine: DecisionEngine,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    run_dir: Path,
    probes: torch.nn.Module | None = None,
) -> tuple[int, float]:
    """Load the last saved state of a run; returns its step and the training time spent so far."""
    state_file = run_dir / "train_state.pt"
    if not state_file.exists() or not (run_dir / "last" / "config.json").exists():
        return 0, 0.0
    engine.load_weights(run_dir / "last")
    state = torch.load(state_file, weights_only=True)
    if probes is not None:
        probes.load_state_dict(state["probes"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return int(state["step"]), float(state.get("elapsed_s", 0.0))
