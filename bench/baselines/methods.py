"""The contenders: the decision model under test and the baselines (b)–(e) of issue 6.

Each ``Method`` answers a System One request with ``{qid: probabilities}`` indexed like
``clef_agents.wire.option_names``. ``fit(dataset)`` is called once per dataset before timing
(only the logistic-regression baseline learns anything there).

Example:
    >>> from clef_agents.testing import FakeDecisionModel
    >>> m = DecisionModelMethod(FakeDecisionModel(answers={"spam": 0.8}))
    >>> answer = m.predict({"state": "win cash", "questions": {"spam": {"type": "noul", "instructions": "Spam?"}}})
    >>> [round(p, 6) for p in answer["spam"]]
    [0.8, 0.2]
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from bench.baselines.data import option_texts
from clef_agents import wire
from clef_agents.train.datasets import load_records

SIMILARITY_SCALE = 20.0
"""Cosine → logit scale for the zero-shot similarity baselines (temperature 0.05, the scale
sentence-transformers trains MiniLM with); fixed, not tuned on any split."""

CACHE_DIR = Path(__file__).resolve().parents[2] / ".cache" / "bench"


class Method:
    """A contender. Subclasses set ``key``/``title`` and implement ``predict``."""

    key = "method"
    title = "method"
    batch_size = 1
    """Requests per call in the throughput measurement (1: the method has no batched path)."""

    def fit(self, dataset: str) -> None:
        """Prepare for ``dataset`` (train on its train split when the method needs it)."""

    def predict(self, request: dict[str, Any]) -> dict[str, list[float]]:
        raise NotImplementedError

    def predict_batch(self, requests: list[dict[str, Any]]) -> list[dict[str, list[float]]]:
        return [self.predict(r) for r in requests]

    def info(self) -> dict[str, Any]:
        return {"key": self.key, "title": self.title, "batch_size": self.batch_size}


def softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = sum(exps)
    return [e / total for e in exps]


# --------------------------------------------------------------------------- the model under test


class DecisionModelMethod(Method):
    """Any ``BaseDecisionModel`` (the clef_agents model, or a fake in the smoke test)."""

    key = "clef"
    title = "clef_agents decision model"
    batch_size = 32

    def __init__(self, model: Any, title: str | None = None):
        self.model = model
        if title:
            self.title = title

    def predict(self, request: dict[str, Any]) -> dict[str, list[float]]:
        return _probabilities(self.model.invoke(request))

    def predict_batch(self, requests: list[dict[str, Any]]) -> list[dict[str, list[float]]]:
        return [_probabilities(r) for r in self.model.batch(requests)]


def _probabilities(response: Any) -> dict[str, list[float]]:
    return {qid: wire.answer_probabilities(answer) for qid, answer in response.answers.items()}


# --------------------------------------------------------------------------- (b) one pass per option


class PerOptionMethod(Method):
    """(b) Zero-shot cross-encoder style: one MiniLM pass per (state, option) pair, batched per
    question; score = cosine of the pair's contextualised state and option tokens."""

    key = "per_option"
    title = "(b) one MiniLM pass per option"

    def __init__(self, minilm: Any):
        self.minilm = minilm

    def predict(self, request: dict[str, Any]) -> dict[str, list[float]]:
        state = wire.state_text(request["state"])
        out = {}
        for qid, question in wire.validate_questions(request["questions"]).items():
            sims = self.minilm.pair_similarities(state, option_texts(question))
            out[qid] = softmax([SIMILARITY_SCALE * float(s) for s in sims])
        return out


# --------------------------------------------------------------------------- (c) sparrow-decider


class SparrowMethod(Method):
    """(c) ``sparrow-decider`` (its bundled default model), one encoder pass per question."""

    key = "sparrow"
    title = "(c) sparrow-decider"

    def __init__(self, model_name: str | None = None):
        from sparrow_decider import DEFAULT_MODEL, Decider

        self.model_name = model_name or DEFAULT_MODEL
        self.decider = Decider.load(self.model_name)

    def predict(self, request: dict[str, Any]) -> dict[str, list[float]]:
        state = wire.state_text(request["state"])
        out = {}
        for qid, question in request["questions"].items():
            kind, _, _, p = self.decider.probs(state, question)
            probs = [float(x) for x in p]
            out[qid] = [probs[1], probs[0]] if kind == "noul" else probs  # sparrow orders noul as (false, true)
        return out

    def info(self) -> dict[str, Any]:
        return {**super().info(), "model": self.model_name}


# --------------------------------------------------------------------------- (d) embedding routing


class EmbeddingRouteMethod(Method):
    """(d) Semantic-router style: cosine between the MiniLM embedding of the state and of each
    option text (option embeddings computed once per schema and cached)."""

    key = "embed_route"
    title = "(d) MiniLM embedding routing"
    batch_size = 32

    def __init__(self, minilm: Any):
        self.minilm = minilm
        self._routes: dict[tuple[str, ...], Any] = {}

    def _route_matrix(self, texts: list[str]) -> Any:
        key = tuple(texts)
        if key not in self._routes:
            self._routes[key] = self.minilm.embed(texts)
        return self._routes[key]

    def predict(self, request: dict[str, Any]) -> dict[str, list[float]]:
        return self.predict_batch([request])[0]

    def predict_batch(self, requests: list[dict[str, Any]]) -> list[dict[str, list[float]]]:
        states = self.minilm.embed([wire.state_text(r["state"]) for r in requests])
        out = []
        for row, request in zip(states, requests):
            answers = {}
            for qid, question in wire.validate_questions(request["questions"]).items():
                sims = self._route_matrix(option_texts(question)) @ row
                answers[qid] = softmax([SIMILARITY_SCALE * float(s) for s in sims])
            out.append(answers)
        return out


# --------------------------------------------------------------------------- (e) embeddings + LR


class LogRegMethod(Method):
    """(e) Frozen MiniLM mean-pooled embeddings + logistic regression per dataset and question,
    trained on the dataset's train split (``C`` fixed up front, not tuned on test)."""

    key = "logreg"
    title = "(e) MiniLM embeddings + logistic regression"
    batch_size = 32

    def __init__(self, minilm: Any, train_limit: int | None = None, c: float = 10.0, seed: int = 0):
        self.minilm = minilm
        self.train_limit = train_limit
        self.c = c
        self.seed = seed
        self._classifiers: dict[str, Any] = {}
        self.train_sizes: dict[str, int] = {}

    def fit(self, dataset: str) -> None:
        import random

        from sklearn.linear_model import LogisticRegression

        records = load_records(dataset, "train")
        if self.train_limit is not None and len(records) > self.train_limit:
            records = random.Random(self.seed).sample(records, self.train_limit)
        texts = [wire.state_text(r["state"]) for r in records]
        embeddings = self._cached_embeddings(dataset, texts).numpy()
        self._classifiers = {}
        for qid, question in wire.validate_questions(records[0]["questions"]).items():
            rows = [i for i, r in enumerate(records) if qid in r["labels"]]
            targets = [wire.label_index(question, records[i]["labels"][qid]) for i in rows]
            clf = LogisticRegression(C=self.c, max_iter=2000)
            clf.fit(embeddings[rows], targets)
            self._classifiers[qid] = (clf, len(wire.option_names(question)))
        self.train_sizes[dataset] = len(records)

    def _cached_embeddings(self, dataset: str, texts: list[str]) -> Any:
        import torch

        digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
        path = CACHE_DIR / "embeddings" / f"{dataset}-train-{digest}.pt"
        if path.exists():
            return torch.load(path)
        vectors = self.minilm.embed(texts)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(vectors, path)
        return vectors

    def predict(self, request: dict[str, Any]) -> dict[str, list[float]]:
        return self.predict_batch([request])[0]

    def predict_batch(self, requests: list[dict[str, Any]]) -> list[dict[str, list[float]]]:
        states = self.minilm.embed([wire.state_text(r["state"]) for r in requests]).numpy()
        out: list[dict[str, list[float]]] = [{} for _ in requests]
        for qid, (clf, n_options) in self._classifiers.items():
            probs = clf.predict_proba(states)
            for i, row in enumerate(probs):
                full = [0.0] * n_options
                for cls, p in zip(clf.classes_, row):
                    full[int(cls)] = float(p)
                out[i][qid] = full
        return out

    def info(self) -> dict[str, Any]:
        return {**super().info(), "C": self.c, "train_sizes": dict(self.train_sizes)}


# --------------------------------------------------------------------------- the floor


class BareBackboneMethod(Method):
    """The bare MiniLM forward over the state (the floor in the scaling sweeps; answers nothing)."""

    key = "bare_backbone"
    title = "bare MiniLM forward (floor)"

    def __init__(self, minilm: Any):
        self.minilm = minilm

    def predict(self, request: dict[str, Any]) -> dict[str, list[float]]:
        self.minilm.forward([wire.state_text(request["state"])])
        return {}
