"""The autopilot: per gate and question, answer alone only where a certified learner allows, send the rest
to the teacher, learn from every teacher answer off the request path, and withdraw when audits disagree.

How one item goes (``Autopilot.decide``):

1. An item the teacher already labelled (a resumed run, a retried request) gets that label: no second call.
2. A seeded draw, fixed per item, puts it in the *certification sample* with probability ``warm_share`` while
   the question is not certified (those items go to the teacher anyway, so the sample costs nothing) and
   ``audit`` once it is (then a would-be-automatic item goes to the teacher too: an audit). The sample is a
   uniform draw of the stream, independent of every score, so the agreement of automatic answers with the
   teacher is estimated without the bias of escalated-only labels. It never trains a learner.
3. With a certified version serving, an unsampled item whose learner confidence reaches the certified
   threshold is answered automatically; everything else goes to the teacher lane.

Learning (``Autopilot.retrain``, in a background thread unless ``background=False``): every
``retrain_every`` new labels (sooner while there are few), fit the staged learner (``learner.fit_learner``) on
the labels outside the sample, then certify it on the sample: the lowest threshold whose automatic answers
disagree with the teacher at most ``1 - target`` of the time, at ``confidence``, by Learn-then-Test
(``thresholds.fit_error_threshold``). The version is stored whole before it is swapped in (one reference
assignment), so no request sees a half-loaded learner and a kill leaves the last stored version serving.

Drift: each audit of a would-be-automatic item is checked; when the last ``drift_window`` audits hold more
disagreements than ``1 - target`` allows (binomial tail below ``drift_alpha``), automatic answering of the
question is withdrawn, and the sample restarts, until a later version is certified on new labels. A
would-be-automatic item unlike the sample its version was certified on (``novelty.NoveltyReference``) goes to the
teacher with probability ``novelty_audit`` as a drift check too: when the source changes, most items are unlike
it, so the check gets answers where the change is; on a stream that does not move, few are.

Example:
    >>> import numpy as np
    >>> pilot = Autopilot(":memory:", embeddings=False, background=False)
    >>> q = {"type": "noul", "instructions": "Is this urgent?"}
    >>> pilot.decide("triage", "urgent", q, "site is down", [0.7, 0.3]).lane
    'teacher'
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clef_agents import wire
from clef_agents.autopilot.certify import certify_answers, drift_p_value, sample_refusal
from clef_agents.autopilot.learner import ALL_KINDS, KINDS, Learner, LearnerInputs, fit_learner
from clef_agents.autopilot.novelty import NOVELTY_QUANTILE, NoveltyReference
from clef_agents.autopilot.status import question_status
from clef_agents.autopilot.store import ItemRecord, LabelStore, VersionRecord, stream_starts, was_withdrawn
from clef_agents.thresholds.stats import check_start

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AutopilotConfig:
    """The autopilot's settings, with the defaults a ``DecisionNode`` uses (the tool gate asks 0.99).

    Attributes:
        target: the agreement with the teacher that automatic answers must reach (0.95: at most 1 in 20 differ).
        confidence: how sure the certificate is that they do (0.9).
        audit: the share of items sent to the teacher once a question is certified (also would-be-automatic ones).
        warm_share: the share drawn into the certification sample while a question is not certified (0.5: chosen
            on dev streams, then measured on bench/autopilot; docs/experiments.md).
        retrain_every: fit a new version after this many new labels (after 20, 40, 80 ... while there are fewer).
        first_retrain: labels before the first fit.
        train_window: at most this many of the newest training labels are fitted on.
        cert_window: at most this many of the newest sampled labels certify a version.
        drift_window: audits of automatic answers checked for drift.
        drift_alpha: the binomial tail below which those audits withdraw automatic answering.
        novelty_audit: the chance that a would-be-automatic item unlike the certified sample (beyond its
            ``novelty_quantile``) is sent to the teacher as a drift check (0: never; needs ``embeddings``).
        novelty_quantile: the quantile of the sample's own novelty beyond which an item is unlike it.
        embeddings: give the learner the state's MiniLM sentence vector (a second, small forward per item).
        learner_kinds: the learner kinds to choose among (``learner.KINDS``; ``("embedding",)`` is the
            online-cascade baseline).
        stop_learning_after: fit no new version once this many labels are in (None: learn on).
        min_minority: certify only when the sample holds at least two answers given this many times each, so
            a teacher that says one thing to everything never hands the gate over.
        refresh_seconds: how often a process looks in the store for a version another process certified.
        sequence_start: where Learn-then-Test's fixed sequence of thresholds begins (``thresholds.START_RULES``):
            ``"robust"`` (the default: a teacher's labels carry some noise even among the surest answers, and a
            single disagreement at the top then does not void the certificate) or ``"first"`` (docs/thresholds.md).
        seed: the salt of the per-item draws.
    """

    target: float = 0.95
    confidence: float = 0.9
    audit: float = 0.05
    warm_share: float = 0.5
    retrain_every: int = 200
    first_retrain: int = 20
    train_window: int = 4000
    cert_window: int = 2000
    drift_window: int = 40
    drift_alpha: float = 0.01
    novelty_audit: float = 0.25
    novelty_quantile: float = NOVELTY_QUANTILE
    embeddings: bool = True
    learner_kinds: tuple[str, ...] = KINDS
    stop_learning_after: int | None = None
    min_minority: int = 5
    refresh_seconds: float = 10.0
    sequence_start: str = "robust"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("target", "confidence"):
            value = getattr(self, name)
            if not 0.5 <= value < 1.0:
                raise ValueError(f"{name} must be in [0.5, 1), got {value}")
        for name in ("audit", "warm_share"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        if not 0.0 <= self.novelty_audit <= 1.0:
            raise ValueError(f"novelty_audit must be in [0, 1], got {self.novelty_audit}")
        if not 0.0 < self.novelty_quantile < 1.0:
            raise ValueError(f"novelty_quantile must be in (0, 1), got {self.novelty_quantile}")
        for name in ("retrain_every", "first_retrain", "train_window", "cert_window", "drift_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        check_start(self.sequence_start)
        unknown = [k for k in self.learner_kinds if k not in ALL_KINDS]
        if unknown or not self.learner_kinds:
            raise ValueError(f"learner_kinds must be some of {', '.join(ALL_KINDS)}, got {list(self.learner_kinds)}")


@dataclass
class AutoDecision:
    """What the autopilot decided for one item of one question.

    ``lane`` is ``auto`` (answer ``label`` alone), ``teacher`` (ask the teacher) or ``known`` (the teacher already
    labelled this item: ``label`` is its answer, ``source`` who gave it). ``label`` is an option index.
    """

    item_key: str
    question_key: str
    lane: str
    label: int
    probability: float
    marked: bool
    version: int
    reason: str
    source: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The decision as plain JSON (kept in graph state)."""
        return asdict(self)


@dataclass
class Serving:
    """The version a question answers with: its learner, its certified threshold (None: not certified) and
    whether drift withdrew it."""

    version: int
    learner: Learner
    threshold: float | None
    withdrawn: bool = False
    reference: NoveltyReference | None = None
    """The sample it was certified on, for drift checks (set on certification, or after a load)."""
    reference_built: bool = False
    reference_pending: bool = False

    @property
    def active(self) -> bool:
        """Whether this version may answer alone."""
        return self.threshold is not None and not self.withdrawn


@dataclass
class _Question:
    key: str
    n_options: int
    serving: Serving
    since_seq: int = 0  # the certification sample starts after this item (moved by a withdrawal or a reset)
    train_since: int = 0  # training prefers labels after this item (moved by a withdrawal only)
    labels_at_fit: int = 0
    labels_seen: int = 0
    audits: list[bool] = field(default_factory=list)
    retrain_pending: bool = False
    last_retrain_s: float | None = None
    checked_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


def question_key(gate: str, question_id: str, question: Any) -> str:
    """The key a question's labels and versions are kept under: gate, id and a digest of its wording.

    Example:
        >>> question_key("triage", "urgent", {"type": "noul", "instructions": "Urgent?"})[:14]
        'triage/urgent/'
    """
    body = json.dumps(wire.question_to_wire(wire.validate_questions({"q": question})["q"]), sort_keys=True)
    return f"{gate}/{question_id}/{hashlib.sha256(body.encode()).hexdigest()[:12]}"


def item_key(question_key: str, state_text: str) -> str:
    """The key of one item: a question asked about one state."""
    return hashlib.sha256(f"{question_key}\x00{state_text}".encode()).hexdigest()[:32]


def uniform_draw(key: str, seed: int) -> float:
    """A number in [0, 1) fixed by the item key and the seed (the same on a resume or another replica).

    Example:
        >>> uniform_draw("abc", 0) == uniform_draw("abc", 0)
        True
    """
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class Autopilot:
    """Learn from the teacher's answers and take over, question by question, what has been certified.

    Args:
        store: a ``LabelStore`` or its SQLite path (``":memory:"`` for a replay that keeps nothing).
        config: an ``AutopilotConfig`` (or its fields as keywords).
        teacher_model: an optional ``BaseDecisionModel`` that teaches (a bigger local model, a System One
            server through ``RemoteDecisionModel``); the graph layer asks it before any LLM or person.
        background: where retrains run: ``"process"`` (a child process at lower priority, so requests keep their
            cores and the GIL: bench/autopilot/results/latency.md), ``"thread"`` (a worker thread), ``"auto"``
            (the default: a process for a file or PostgreSQL store, a thread for ``":memory:"``), or False
            (inline, in the call that brings the label: replays and tests).
        learn: fit new versions here (True); a replica with ``learn=False`` records labels and serves the versions
            the one learning process stores (it looks every ``refresh_seconds``).
        embedder: what turns states into sentence vectors (default: MiniLM, loaded on first use).

    Example:
        >>> pilot = Autopilot(":memory:", target=0.99, embeddings=False, background=False)
        >>> pilot.config.target
        0.99
    """

    def __init__(
        self,
        store: LabelStore | str | Path = "autopilot.sqlite",
        config: AutopilotConfig | None = None,
        *,
        teacher_model: Any = None,
        background: bool | str = "auto",
        learn: bool = True,
        embedder: Any = None,
        **settings: Any,
    ):
        if config is not None and settings:
            raise TypeError("give either config= or settings as keywords, not both")
        self.config = config or AutopilotConfig(**settings)
        self.store = store if isinstance(store, LabelStore) else LabelStore(store)
        self.teacher_model = teacher_model
        self.background = _background_mode(background, self.store)
        self.learn = learn
        self._embedder = embedder
        self._questions: dict[str, _Question] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._idle = threading.Condition()
        self._busy = 0

    def __repr__(self) -> str:
        return f"Autopilot({self.store!r}, target={self.config.target}, confidence={self.config.confidence})"

    # ------------------------------------------------------------------ features

    @property
    def embedder(self) -> Any:
        """The sentence embedder (created on first use when the config asks for embeddings)."""
        if self._embedder is None and self.config.embeddings:
            from clef_agents.autopilot.embedder import SentenceEmbedder  # noqa: PLC0415

            self._embedder = SentenceEmbedder()
        return self._embedder

    def inputs(
        self, texts: Sequence[str], model_probs: Sequence[Sequence[float]], with_embeddings: bool
    ) -> LearnerInputs:
        """What a learner reads for these items."""
        vectors = self.embedder.embed(list(texts)) if with_embeddings and self.config.embeddings else None
        return LearnerInputs(
            texts=list(texts), model_probs=np.asarray(model_probs, dtype=np.float64), embeddings=vectors
        )

    # ------------------------------------------------------------------ questions

    def _question(self, gate: str, question_id: str, question: Any) -> _Question:
        typed = wire.validate_questions({question_id: question})[question_id]
        key = question_key(gate, question_id, typed)
        with self._lock:
            found = self._questions.get(key)
            if found is None:
                self.store.add_question(key, gate, question_id, wire.question_to_wire(typed))
                found = self._load_question(key, len(wire.option_names(typed)))
                self._questions[key] = found
        return found

    def _load_question(self, key: str, n_options: int) -> _Question:
        """A question's state from the store: its newest certified version (or the model's answer)."""
        serving, since, train_since = self._stored_serving(key, n_options)
        latest = self.store.latest_version(key)
        at_fit = int(latest.report.get("labels", 0)) if latest else 0
        return _Question(
            key,
            n_options,
            serving,
            since_seq=since,
            train_since=train_since,
            labels_at_fit=at_fit,
            labels_seen=self.store.label_count(key),
            checked_at=time.monotonic(),
        )

    def _stored_serving(self, key: str, n_options: int) -> tuple[Serving, int, int]:
        """The newest certified version in the store (withdrawn or not), where the sample restarts and where the
        training labels restart (``stream_starts``)."""
        certified = self._usable(self.store.latest_version(key, certified=True))
        serving = Serving(0, Learner.model_answer(n_options), None)
        if certified is not None:
            serving = Serving(certified.version, Learner.from_bytes(certified.params), certified.threshold)
        events = self.store.events(key)
        since, train_since = stream_starts(events)
        stale = certified is not None and certified.report.get("since", since) != since  # certified on an old sample
        serving.withdrawn = stale or was_withdrawn(events, serving.version)
        return serving, since, train_since

    def _usable(self, version: VersionRecord | None) -> VersionRecord | None:
        """A stored certified version, if its certificate is at least as strict as this autopilot's target and
        confidence (a store certified at 0.95 does not answer alone for a gate that now asks 0.99); versions stored
        before certificates kept their target count as certified at the current settings."""
        if version is None:
            return None
        certificate = version.report.get("certificate", {})
        target = certificate.get("target", self.config.target)
        confidence = certificate.get("confidence", self.config.confidence)
        return version if target >= self.config.target and confidence >= self.config.confidence else None

    def _refresh(self, q: _Question) -> None:
        """Pick up a version, a withdrawal or a reset another process stored: replicas follow the one learner."""
        now = time.monotonic()
        if now - q.checked_at < self.config.refresh_seconds:
            return
        q.checked_at = now
        if self.learn:  # labels other replicas wrote count towards the next retrain
            with q.lock:
                q.labels_seen = max(q.labels_seen, self.store.label_count(q.key))
            self._retrain_if_due(q)
        newest = self._usable(self.store.latest_version(q.key, certified=True))
        events = self.store.events(q.key)
        withdrawn = q.serving.active and was_withdrawn(events, q.serving.version)
        moved = (newest.version if newest is not None else 0) != q.serving.version  # a new version, or a reset
        if moved or withdrawn or stream_starts(events)[0] != q.since_seq:
            serving, since, train_since = self._stored_serving(q.key, q.n_options)
            with q.lock:
                q.serving, q.since_seq, q.train_since = serving, since, train_since

    def question_of(self, key: str) -> _Question:
        """The state this process holds for a question key (loaded from the store when not asked here yet)."""
        return self._questions.get(key) or self._known_question(key)

    def _known_question(self, key: str) -> _Question:
        """A question this process has not asked yet but the store knows (a label after a restart)."""
        found = next((q for q in self.store.questions() if q["question_key"] == key), None)
        if found is None:
            raise KeyError(f"no question {key!r} in {self.store!r}")
        return self._question(found["gate"], found["question_id"], found["question"])

    # ------------------------------------------------------------------ the request path

    def decide(
        self, gate: str, question_id: str, question: Any, state_text: str, model_probs: Sequence[float]
    ) -> AutoDecision:
        """Decide one item: answer alone (``auto``), ask the teacher (``teacher``) or reuse its label (``known``).

        The same item decided again (a resume, a retry, another replica, the same text later) gets the same
        decision, except that an automatic answer is not repeated once its question has been withdrawn.
        """
        q = self._question(gate, question_id, question)
        probs = [float(p) for p in model_probs]
        if len(probs) != q.n_options:
            raise ValueError(f"{len(probs)} model probabilities for {q.n_options} options of {q.key}")
        key = item_key(q.key, state_text)
        known = self.known_label(key)
        stored = self.store.item(key)
        if known is not None:
            return AutoDecision(
                key,
                q.key,
                "known",
                known[0],
                1.0,
                bool(stored and stored.marked),
                stored.version if stored else q.serving.version,
                f"autopilot: the teacher ({known[1]}) already labelled this item; not asked again",
                source=known[1],
            )
        self._refresh(q)
        if stored is not None and not (stored.lane == "auto" and not q.serving.active):
            return self._repeat(stored, q)
        serving = q.serving
        if stored is not None:  # answered alone by a version since withdrawn: ask the teacher this time
            return AutoDecision(
                key,
                q.key,
                "teacher",
                int(stored.auto_label or 0),
                float(max(stored.model_probs)),
                stored.marked,
                serving.version,
                f"autopilot: answered alone before by version {stored.version}, since withdrawn: ask the teacher",
            )
        marked = uniform_draw(key, self.config.seed) < (self.config.audit if serving.active else self.config.warm_share)
        scored = serving.learner.predict_proba(self.inputs([state_text], [probs], serving.learner.use_embeddings))[0]
        label, probability = int(np.argmax(scored)), float(np.max(scored))
        eligible = serving.active and probability >= serving.threshold  # type: ignore[operator]
        checked = eligible and not marked and self._drawn_for_novelty(q, serving, key, state_text)
        lane = "auto" if eligible and not marked and not checked else "teacher"
        self.store.add_item(
            ItemRecord(
                key,
                q.key,
                state_text,
                probs,
                marked,
                eligible,
                lane,
                label if lane == "auto" else (label if eligible else None),
                serving.version,
            )
        )
        return AutoDecision(
            key,
            q.key,
            lane,
            label,
            probability,
            marked,
            serving.version,
            _reason(lane, marked, eligible, serving, probability, checked),
        )

    def _drawn_for_novelty(self, q: _Question, serving: Serving, key: str, state_text: str) -> bool:
        """Whether a would-be-automatic item is unlike its version's sample and drawn for a drift check."""
        if self.config.novelty_audit <= 0 or not self.config.embeddings:
            return False
        if uniform_draw(key, self.config.seed + 1) >= self.config.novelty_audit:
            return False
        reference = self._reference(q, serving)
        return reference is not None and reference.is_novel(self.embedder.embed([state_text])[0])

    def _reference(self, q: _Question, serving: Serving) -> NoveltyReference | None:
        """The serving version's reference. After a load it is rebuilt from the version's certification sample:
        off the request path in a thread of its own (no drift checks until it is there), inline without a
        background worker."""
        if serving.reference_built or serving.reference_pending:
            return serving.reference
        if not self.background:
            self._build_reference(q, serving)
        else:
            serving.reference_pending = True
            threading.Thread(
                target=self._build_reference, args=(q, serving), name="autopilot-reference", daemon=True
            ).start()
        return serving.reference

    def _build_reference(self, q: _Question, serving: Serving) -> None:
        try:
            version = next((v for v in self.store.versions(q.key) if v.version == serving.version), None)
            last = int(version.report.get("last_seq", 0)) if version is not None else 0
            serving.reference = self._reference_of(self._sample(self.store.labelled(q.key), q.since_seq, last))
        except Exception:  # no reference means no drift checks on novel items; the audits still run
            logger.exception("autopilot: the novelty reference of %s could not be built", q.key)
        finally:
            serving.reference_built, serving.reference_pending = True, False

    def _sample(self, items: Sequence[Any], since_seq: int, last_seq: int | None = None) -> list[Any]:
        """The certification sample among labelled items: the newest ``cert_window`` drawn into it after
        ``since_seq`` (and up to ``last_seq``, for the sample a stored version was certified on)."""
        drawn = [i for i in items if i.marked and i.seq > since_seq and (last_seq is None or i.seq <= last_seq)]
        return drawn[-self.config.cert_window :]

    def _reference_of(self, sample: Sequence[Any]) -> NoveltyReference | None:
        if not sample or not self.config.embeddings or self.config.novelty_audit <= 0:
            return None
        return NoveltyReference.of(self.embedder.embed([i.state_text for i in sample]), self.config.novelty_quantile)

    def _repeat(self, stored: ItemRecord, q: _Question) -> AutoDecision:
        label = stored.auto_label if stored.auto_label is not None else int(np.argmax(stored.model_probs))
        reason = "autopilot: decided before (a resume or a retry): " + (
            "answered automatically" if stored.lane == "auto" else "waiting for the teacher"
        )
        return AutoDecision(
            stored.item_key,
            q.key,
            stored.lane,
            label,
            float(max(stored.model_probs)),
            stored.marked,
            stored.version,
            reason,
        )

    # ------------------------------------------------------------------ teacher answers

    def record_label(self, item: str, label: int, source: str) -> bool:
        """Keep a teacher's answer (an option index) to an item the autopilot routed; False when the item had a
        label already. May start a retrain, and checks audits for drift."""
        stored = self.store.item(item)
        if stored is None:
            raise KeyError(f"no item {item!r} in {self.store!r}: labels are kept only for items the autopilot routed")
        q = self.question_of(stored.question_key)
        if not 0 <= int(label) < q.n_options:
            raise ValueError(f"label {label} is not an option index of {q.key} (0..{q.n_options - 1})")
        if not self.store.add_label(item, int(label), source):
            return False
        with q.lock:
            q.labels_seen += 1
            checked = stored.eligible and stored.lane == "teacher"  # an audit or a drift check on a novel item
            if checked and stored.version == q.serving.version and q.serving.active:
                self._check_drift(q, stored.auto_label == int(label))
        self._retrain_if_due(q)
        return True

    def _retrain_if_due(self, q: _Question) -> None:
        if not self.learn:
            return
        with q.lock:
            due = q.labels_seen - q.labels_at_fit >= self._retrain_gap(q) and not q.retrain_pending
            if due:
                q.retrain_pending = True
        if due:
            self._schedule(q.key)

    def known_label(self, item: str) -> tuple[int, str] | None:
        """The teacher's label of an item (an option index) and its source, or None when it has none yet."""
        return self.store.label(item)

    def record_failure(self, item: str, source: str, error: str) -> None:
        """Keep a teacher answer that failed, timed out or fell outside the options: it never becomes a label."""
        self.store.add_failure(item, source, error)

    def _retrain_gap(self, q: _Question) -> int:
        if q.labels_at_fit == 0:
            return self.config.first_retrain
        return min(self.config.retrain_every, max(self.config.first_retrain, q.labels_at_fit))

    def _check_drift(self, q: _Question, agreed: bool) -> None:
        q.audits.append(agreed)
        window = q.audits[-self.config.drift_window :]
        errors = len(window) - sum(window)
        p = drift_p_value(errors, len(window), self.config.target)
        if p < self.config.drift_alpha:
            seq = self.store.latest_seq(q.key)
            q.serving.withdrawn = True
            q.since_seq = q.train_since = seq
            q.audits = []
            self.store.add_event(
                q.key,
                "withdrawn",
                {
                    "version": q.serving.version,
                    "seq": seq,
                    "audits": len(window),
                    "disagreements": errors,
                    "p_value": p,
                },
            )
            logger.warning(
                "autopilot: %s withdrawn from automatic answering: %d of the last %d audits disagreed "
                "with the teacher (p = %.3g)",
                q.key,
                errors,
                len(window),
                p,
            )

    # ------------------------------------------------------------------ learning

    def _schedule(self, key: str) -> None:
        if not self.background:
            self.retrain(key)
            return
        with self._idle:
            self._busy += 1
        self._queue.put(key)
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="autopilot-learner", daemon=True)
            self._worker.start()

    def _work(self) -> None:
        while True:
            key = self._queue.get()
            if key is None:
                return
            try:
                if self.background == "process":
                    self._retrain_in_child(key)
                else:
                    self.retrain(key)
                self._retrain_if_due(self._questions[key])  # labels that came in while it trained
            except Exception:  # a failed retrain leaves the serving version as it is
                logger.exception("autopilot: retraining %s failed; the serving version stays", key)
                with self._questions[key].lock:
                    self._questions[key].retrain_pending = False
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()

    def _retrain_in_child(self, key: str) -> None:
        """Retrain in a child process (it stores the version), then serve what it stored."""
        import multiprocessing  # noqa: PLC0415

        child = multiprocessing.get_context("spawn").Process(
            target=retrain_in_process, args=(self.store.path, key, asdict(self.config)), name="autopilot-learner"
        )
        child.start()
        child.join()
        if child.exitcode != 0:
            raise RuntimeError(f"the learner process for {key} exited with {child.exitcode}")
        q = self._questions[key]
        latest = self.store.latest_version(key)
        serving, since, train_since = self._stored_serving(key, q.n_options)
        with q.lock:
            q.labels_at_fit = int(latest.report["labels"]) if latest else q.labels_at_fit
            q.last_retrain_s = latest.report.get("seconds") if latest else None
            q.retrain_pending = False
            if serving.version != q.serving.version:
                q.serving, q.since_seq, q.train_since, q.audits = serving, since, train_since, []

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no retrain is queued or running; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout=timeout)

    def close(self) -> None:
        """Stop the worker after the retrains queued so far."""
        if self._worker is not None and self._worker.is_alive():
            self._queue.put(None)
            self._worker.join()

    def retrain(self, key: str) -> VersionRecord:
        """Fit a new version of a question on its labels, certify it on the sample, store it, swap it in when
        certified, and return it."""
        q = self._questions[key]
        started = time.perf_counter()
        since = q.since_seq
        items = self.store.labelled(key)
        train = self._training_labels(items, q.train_since)
        sample = self._sample(items, since)
        learner = self._frozen_learner(key) or self._fit(train, q.n_options)
        versions = self.store.versions(key)
        attempt = 1 + sum(
            v.report.get("last_seq", 0) > since and v.report["certificate"].get("spent", False) for v in versions
        )
        certificate = self.certify(learner, sample, attempt)
        events = self.store.events(key)  # read after the test: a withdrawal or reset may have come meanwhile
        if certificate["certified"] and (q.since_seq != since or stream_starts(events)[0] != since):
            certificate = {
                **certificate,
                "certified": False,
                "threshold": None,
                "reason": "a withdrawal or a reset restarted the sample while this version was fitted: it is tested "
                "again on the new sample",
            }
        reference = self._reference_of(sample) if certificate["certified"] else None
        version = _next_version(versions, events)
        report = {
            "labels": len(items),
            "last_seq": items[-1].seq if items else 0,
            "since": since,
            "train": len(train),
            "sample": len(sample),
            "kind": learner.kind,
            "learner": learner.info,
            "certificate": certificate,
            "seconds": round(time.perf_counter() - started, 3),
        }
        record = VersionRecord(
            key,
            version,
            learner.kind,
            certificate["threshold"],
            certificate["certified"],
            report,
            learner.to_bytes(),
            time.time(),
        )
        self.store.add_version(record)
        with q.lock:
            q.labels_at_fit = len(items)
            q.retrain_pending = False
            q.last_retrain_s = report["seconds"]
            if record.certified and q.since_seq == since:
                q.serving = Serving(version, learner, record.threshold, reference=reference, reference_built=True)
                q.audits = []
        self.store.add_event(
            key,
            "certified" if record.certified else "retrained",
            {"version": version, "threshold": record.threshold, "kind": learner.kind, "labels": len(items)},
        )
        return record

    def _training_labels(self, items: Sequence[Any], since_seq: int) -> list[Any]:
        """The labels a version is fitted on: the newest ``train_window`` outside the sample; after a withdrawal
        only those that came after it, once there are ``first_retrain`` of them (the older ones are answers the
        teacher no longer gives)."""
        train = [i for i in items if not i.marked]
        recent = [i for i in train if i.seq > since_seq]
        if since_seq > 0 and len(recent) >= self.config.first_retrain:
            train = recent
        return train[-self.config.train_window :]

    def _fit(self, train: Sequence[Any], n_options: int) -> Learner:
        if not train:
            return Learner.model_answer(n_options)
        inputs = self.inputs([i.state_text for i in train], [i.model_probs for i in train], self.config.embeddings)
        return fit_learner(
            inputs,
            np.array([i.label for i in train]),
            n_options,
            kinds=self.config.learner_kinds,
            use_embeddings=self.config.embeddings,
        )

    def _frozen_learner(self, key: str) -> Learner | None:
        """With ``stop_learning_after`` labels reached at the last fit, that learner, to be certified again on the
        grown sample (no new fit)."""
        limit = self.config.stop_learning_after
        latest = self.store.latest_version(key)
        if limit is None or latest is None or latest.report["labels"] < limit:
            return None
        return Learner.from_bytes(latest.params)

    def certify(self, learner: Learner, sample: Sequence[Any], attempt: int = 1) -> dict[str, Any]:
        """The lowest threshold at which the learner's answers agree with the teacher's labels of the sample at
        least at ``target`` (Learn-then-Test); ``threshold`` None when none certifies.

        Every version is tested on the same, growing sample, so the ``attempt``-th test since the sample started
        runs at ``(1 - confidence) * attempt_share(attempt)``: these shares sum to 1, so the chance that any version
        of the question is certified while it falls short of the target stays within ``1 - confidence``. Only
        attempts that ran a test (``spent``) count; a withdrawal starts a new sample and a new count.
        """
        labels = np.array([i.label for i in sample], dtype=int)
        refused = sample_refusal(labels, learner.n_options, self.config.min_minority)
        if refused is not None:  # no need to read the sample's states
            return refused
        texts, model_probs = [i.state_text for i in sample], [i.model_probs for i in sample]
        return certify_answers(
            learner.predict_proba(self.inputs(texts, model_probs, learner.use_embeddings)),
            labels,
            target=self.config.target,
            confidence=self.config.confidence,
            attempt=attempt,
            min_minority=self.config.min_minority,
            sequence_start=self.config.sequence_start,
        )

    # ------------------------------------------------------------------ reading

    def serving(self, gate: str, question_id: str, question: Any) -> Serving:
        """The version a question answers with now."""
        return self._question(gate, question_id, question).serving

    def status(self) -> list[dict[str, Any]]:
        """Per question: labels by source, teacher calls saved, the certified threshold and bound, the version,
        the last retrain and the drift state."""
        return question_status(self.store)


def _next_version(versions: Sequence[VersionRecord], events: Sequence[dict[str, Any]]) -> int:
    """The next version number: after the newest stored one, and after those a reset forgot."""
    forgotten = [int(e["detail"].get("last_version", 0)) for e in events if e["kind"] == "reset"]
    return max([v.version for v in versions] + forgotten + [0]) + 1


def _background_mode(background: bool | str, store: LabelStore) -> str | bool:
    if background is True:
        return "thread"
    if background == "auto":
        return "thread" if store.path == ":memory:" else "process"
    if background not in (False, "thread", "process"):
        raise ValueError(f"background must be 'auto', 'process', 'thread', True or False, got {background!r}")
    if background == "process" and store.path == ":memory:":
        raise ValueError(
            "background='process' needs a store another process can open (a file or PostgreSQL), not ':memory:'"
        )
    return background


def retrain_in_process(store: str, key: str, settings: dict[str, Any]) -> None:
    """A child process's retrain of one question: at lower priority, torch on one thread, no progress bars in the
    server's log, the version stored."""
    import os  # noqa: PLC0415

    os.nice(10)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    settings = {**settings, "learner_kinds": tuple(settings["learner_kinds"])}
    pilot = Autopilot(store, AutopilotConfig(**settings), background=False)
    pilot.retrain(pilot.question_of(key).key)


def _reason(lane: str, marked: bool, eligible: bool, serving: Serving, probability: float, checked: bool) -> str:
    if lane == "auto":
        return (
            f"autopilot: version {serving.version} says p={probability:.3f} >= its certified threshold "
            f"{serving.threshold:.3f}: decided automatically"
        )
    if marked and eligible:
        return f"autopilot: would answer alone (p={probability:.3f}) but drawn for an audit: ask the teacher"
    if checked:
        return (
            f"autopilot: would answer alone (p={probability:.3f}) but the state is unlike those version "
            f"{serving.version} was certified on, and drawn for a drift check: ask the teacher"
        )
    if serving.withdrawn:
        return f"autopilot: version {serving.version} was withdrawn after audits disagreed: ask the teacher"
    if serving.threshold is None:
        return "autopilot: this question is not certified yet: ask the teacher (its answer becomes a label)"
    return f"autopilot: p={probability:.3f} < the certified threshold {serving.threshold:.3f}: ask the teacher"
