"""The autopilot's per-question learner: what it answers a question with once the teacher has labelled some.

Three kinds, fitted in stages as labels come in, the one kept chosen on the newest quarter of the training
labels (never on the certification set):

- ``model``: the decision model's own answer, untouched (no labels needed);
- ``recalibrated``: a logistic map of the model's log-probabilities, fitted on this question's labels (a few
  dozen are enough);
- ``learned``: a logistic model on the words of the state (hashed uni- and bigrams), its MiniLM sentence
  vector and the model's log-probabilities (from ``min_learned`` labels on);
- ``embedding``: a logistic model on the sentence vector alone (the online-cascade baseline of Nie et al.,
  ICML 2024; kept for comparison, not among the default kinds).

A fitted learner saves to bytes (a ``.npz`` without pickles, plus JSON) so the store can keep every version.

Example:
    >>> import numpy as np
    >>> inputs = LearnerInputs(texts=["refund please", "app crashes"] * 20,
    ...                        model_probs=np.full((40, 2), 0.5), embeddings=None)
    >>> learner = fit_learner(inputs, np.array([0, 1] * 20), n_options=2)
    >>> learner.kind, int(learner.predict_proba(inputs)[0].argmax())
    ('learned', 0)
"""

from __future__ import annotations

import io
import json
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

WORD_DIMS = 2**16
PROB_FLOOR = 1e-4
LEARNED_C = (3.0, 30.0)
"""Inverse L2 strengths tried for the learned kind (chosen per question on the holdout, like the kind)."""
RECALIBRATED_C = 1.0
MAX_ITER = 150
KINDS = ("model", "recalibrated", "learned")
"""The kinds the autopilot chooses among by default (``embedding`` is the baseline's)."""
ALL_KINDS = (*KINDS, "embedding")
EMBEDDING_C = 1.0


@dataclass
class LearnerInputs:
    """What a learner reads per item: the state text, the model's option probabilities and (optionally) the
    state's sentence vector."""

    texts: list[str]
    model_probs: np.ndarray
    embeddings: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def take(self, index: np.ndarray) -> LearnerInputs:
        """The inputs of the items at ``index``."""
        return LearnerInputs(
            texts=[self.texts[i] for i in index],
            model_probs=self.model_probs[index],
            embeddings=None if self.embeddings is None else self.embeddings[index],
        )


def _vectorizer() -> Any:
    from sklearn.feature_extraction.text import HashingVectorizer  # noqa: PLC0415  (on first fit)

    return HashingVectorizer(n_features=WORD_DIMS, ngram_range=(1, 2), alternate_sign=False, norm="l2")


def _model_columns(model_probs: np.ndarray) -> np.ndarray:
    return np.log(np.clip(np.asarray(model_probs, dtype=np.float64), PROB_FLOOR, 1.0))


def design_matrix(inputs: LearnerInputs, kind: str, use_embeddings: bool) -> Any:
    """The feature matrix of a learner kind (sparse for ``learned``)."""
    model_cols = _model_columns(inputs.model_probs)
    if kind == "recalibrated":
        return model_cols
    if kind == "embedding":
        if inputs.embeddings is None:
            raise ValueError("the embedding learner needs sentence vectors; none were given")
        return np.asarray(inputs.embeddings, dtype=np.float64)
    from scipy import sparse  # noqa: PLC0415

    blocks = [_vectorizer().transform(inputs.texts), sparse.csr_matrix(model_cols / 4.0)]
    if use_embeddings and inputs.embeddings is not None:
        blocks.append(sparse.csr_matrix(np.asarray(inputs.embeddings, dtype=np.float64)))
    return sparse.hstack(blocks, format="csr")


@dataclass
class Learner:
    """A fitted learner: its kind, the options it saw, and its weights.

    Example:
        >>> import numpy as np
        >>> int(Learner.model_answer(3).predict_proba(LearnerInputs(["x"], np.array([[0.2, 0.7, 0.1]])))[0].argmax())
        1
    """

    kind: str
    n_options: int
    classes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    coef: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    intercept: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    use_embeddings: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    columns: np.ndarray | None = None
    """The design-matrix columns ``coef`` weighs (those seen in training); ``None``: all of them."""

    @classmethod
    def model_answer(cls, n_options: int) -> Learner:
        """The learner that answers with the decision model's own probabilities."""
        return cls(kind="model", n_options=n_options)

    def predict_proba(self, inputs: LearnerInputs) -> np.ndarray:
        """Option probabilities ``[n, n_options]`` (options never labelled get 0 unless the model kind)."""
        probs = np.asarray(inputs.model_probs, dtype=np.float64)
        if self.kind == "model":
            return probs / probs.sum(axis=1, keepdims=True)
        x = design_matrix(inputs, self.kind, self.use_embeddings)
        if self.columns is not None:
            x = x[:, self.columns]
        logits = np.asarray(x @ self.coef.T.astype(np.float64)) + self.intercept.astype(np.float64)
        if len(self.classes) == 2 and self.coef.shape[0] == 1:  # sklearn's binary form: one row for class 1
            logits = np.concatenate([-logits / 2, logits / 2], axis=1)
        logits -= logits.max(axis=1, keepdims=True)
        seen = np.exp(logits)
        seen /= seen.sum(axis=1, keepdims=True)
        out = np.zeros((len(inputs), self.n_options))
        out[:, self.classes] = seen
        return out

    def to_bytes(self) -> bytes:
        """The learner as ``.npz`` bytes (no pickles); ``Learner.from_bytes`` reads it back."""
        buffer = io.BytesIO()
        meta = {
            "kind": self.kind,
            "n_options": self.n_options,
            "use_embeddings": self.use_embeddings,
            "info": self.info,
        }
        arrays = {
            "classes": self.classes,
            "coef": self.coef.astype(np.float16),
            "intercept": self.intercept.astype(np.float32),
            "meta": np.array(json.dumps(meta)),
        }
        if self.columns is not None:
            arrays["columns"] = self.columns.astype(np.int64)
        np.savez_compressed(buffer, **arrays)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> Learner:
        """Read a learner written by ``to_bytes``."""
        with np.load(io.BytesIO(data), allow_pickle=False) as saved:
            meta = json.loads(str(saved["meta"]))
            return cls(
                kind=meta["kind"],
                n_options=meta["n_options"],
                classes=saved["classes"],
                coef=saved["coef"].astype(np.float32),
                intercept=saved["intercept"],
                use_embeddings=meta["use_embeddings"],
                info=meta.get("info", {}),
                columns=saved["columns"] if "columns" in saved.files else None,
            )


def _active_columns(x: Any) -> np.ndarray | None:
    """The columns of a sparse design matrix that hold a value (hashed words mostly do not): fitting on these
    alone gives the same model, several times faster. ``None`` for a dense matrix."""
    if not hasattr(x, "indices"):
        return None
    return np.unique(x.indices).astype(np.int64)


def _fit_logistic(
    x: Any, labels: np.ndarray, kind: str, n_options: int, c: float, use_embeddings: bool, start: Learner | None = None
) -> Learner:
    classes = np.unique(labels).astype(np.int64)
    columns = _active_columns(x)
    if columns is not None:
        x = x[:, columns]
    if len(classes) == 1:  # one answer so far: a constant learner (certification decides whether it may act)
        return Learner(
            kind=kind,
            n_options=n_options,
            classes=classes,
            coef=np.zeros((1, x.shape[1]), np.float32),
            intercept=np.zeros(1, np.float32),
            use_embeddings=use_embeddings,
            info={"constant": True},
            columns=columns,
        )
    from sklearn.linear_model import LogisticRegression  # noqa: PLC0415

    model = LogisticRegression(C=c, max_iter=MAX_ITER, tol=1e-3)
    initial = _initial_weights(start, classes, columns)
    if initial is not None:
        model.set_params(warm_start=True)
        model.coef_, model.intercept_ = initial
    with warnings.catch_warnings():  # an unconverged fit is still a fit; the holdout and the certificate judge it
        warnings.simplefilter("ignore")
        fitted = model.fit(x, labels)
    return Learner(
        kind=kind,
        n_options=n_options,
        classes=fitted.classes_.astype(np.int64),
        coef=fitted.coef_.astype(np.float32),
        intercept=fitted.intercept_.astype(np.float32),
        use_embeddings=use_embeddings,
        info={"C": c},
        columns=columns,
    )


def _initial_weights(start: Learner | None, classes: np.ndarray, columns: np.ndarray | None) -> tuple | None:
    """A fitted learner's weights laid out for a refit on more labels (new columns start at 0), or ``None`` where
    the refit sees other classes or the start is not a fitted multi-class model."""
    if start is None or start.info.get("constant") or not np.array_equal(start.classes, classes):
        return None
    if start.coef.shape[0] != len(classes):  # sklearn's binary form; a cold start is cheap there
        return None
    coef = start.coef.astype(np.float64)
    if columns is not None:
        if start.columns is None:
            return None
        full = np.zeros((coef.shape[0], len(columns)))
        shared, in_start, in_new = np.intersect1d(start.columns, columns, return_indices=True)
        full[:, in_new] = coef[:, in_start]
        coef = full
    return coef, start.intercept.astype(np.float64)


def _candidates(n_labels: int, min_learned: int) -> list[tuple[str, float]]:
    kinds: list[tuple[str, float]] = [("model", 0.0)]
    if n_labels >= 8:
        kinds.append(("recalibrated", RECALIBRATED_C))
    if n_labels >= min_learned:
        kinds += [("learned", c) for c in LEARNED_C]
    if n_labels >= 2:
        kinds.append(("embedding", EMBEDDING_C))
    return kinds


def _fit(
    inputs: LearnerInputs,
    labels: np.ndarray,
    kind: str,
    c: float,
    n_options: int,
    use_embeddings: bool,
    start: Learner | None = None,
) -> Learner:
    if kind == "model":
        return Learner.model_answer(n_options)
    needs_vectors = kind == "embedding" or (kind == "learned" and use_embeddings)
    return _fit_logistic(design_matrix(inputs, kind, needs_vectors), labels, kind, n_options, c, needs_vectors, start)


def log_loss(probs: np.ndarray, labels: np.ndarray) -> float:
    """Mean negative log-probability of the labels (probabilities floored at 1e-4).

    Example:
        >>> round(log_loss(np.array([[0.5, 0.5]]), np.array([0])), 3)
        0.693
    """
    picked = probs[np.arange(len(labels)), labels]
    return float(-np.log(np.clip(picked, PROB_FLOOR, 1.0)).mean())


def fit_learner(
    inputs: LearnerInputs,
    labels: np.ndarray,
    n_options: int,
    *,
    kinds: tuple[str, ...] = KINDS,
    use_embeddings: bool = True,
    min_learned: int = 20,
    holdout: float = 0.25,
) -> Learner:
    """Fit every allowed kind on the older labels, keep the one with the lowest log loss on the newest
    ``holdout`` share, and refit it on all labels (labels in arrival order, option indices).

    Example:
        >>> import numpy as np
        >>> x = LearnerInputs(["a"] * 4, np.array([[0.9, 0.1], [0.8, 0.2], [0.2, 0.8], [0.3, 0.7]]))
        >>> fit_learner(x, np.array([0, 0, 1, 1]), 2).kind
        'model'
    """
    labels = np.asarray(labels, dtype=np.int64)
    if len(labels) != len(inputs):
        raise ValueError(f"{len(labels)} labels for {len(inputs)} items; expected one label per item")
    if len(labels) and (labels.min() < 0 or labels.max() >= n_options):
        raise ValueError(f"labels must be option indices 0..{n_options - 1}, got {labels.min()}..{labels.max()}")
    candidates = [(k, c) for k, c in _candidates(len(labels), min_learned) if k in kinds] or [("model", 0.0)]
    fitted_on_old: dict[tuple[str, float], Learner] = {}
    if len(candidates) == 1:
        best, scores = candidates[0], {}
    else:
        n_old = len(labels) - max(1, math.ceil(holdout * len(labels)))
        old, new = np.arange(n_old), np.arange(n_old, len(labels))
        scores = {}
        for kind, c in candidates:
            fitted = fitted_on_old[(kind, c)] = _fit(inputs.take(old), labels[old], kind, c, n_options, use_embeddings)
            scores[(kind, c)] = log_loss(fitted.predict_proba(inputs.take(new)), labels[new])
        best = min(scores, key=scores.get)
    learner = _fit(inputs, labels, best[0], best[1], n_options, use_embeddings, start=fitted_on_old.get(best))
    learner.info.update(
        {"n_labels": int(len(labels)), "holdout_log_loss": {f"{k}:{c:g}": round(v, 4) for (k, c), v in scores.items()}}
    )
    return learner
