"""Who answers the untaught questions: any decision model, and the label-name cosine baseline.

Every answerer takes a task, one of its variants and the items, and returns one probability
vector per item (``clef_agents.wire.option_names`` order), one request per item holding that one
question alone. Decision models also report how many answers came from a taught question
(``x_taught``): on an untaught benchmark that count should be 0.

Example:
    >>> from clef_agents.testing import FakeDecisionModel
    >>> from bench.general.tasks import Item, Task, WORDINGS
    >>> task = Task.from_dict({"id": "t", "dataset": "d", "type": "noul", "yes": "a",
    ...     "label_names": {"a": "A", "b": "B"}, "wordings": dict.fromkeys(WORDINGS, "Is it a?")})
    >>> answerer = ModelAnswerer("fake", FakeDecisionModel(answers={"q": 0.75}))
    >>> answerer.answer(task, task.variant("plain"), [Item("some text", "a", 0)])
    [[0.75, 0.25]]
"""

from __future__ import annotations

from typing import Any

from bench.baselines.methods import SIMILARITY_SCALE, softmax
from bench.general.tasks import Item, Task, Variant
from clef_agents import wire

QUESTION_ID = "q"
BATCH = 32


class Answerer:
    """A contender: ``key`` names it in the results, ``title`` describes it."""

    key = "answerer"
    title = "answerer"

    def answer(self, task: Task, variant: Variant, items: list[Item]) -> list[list[float]]:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        return {"key": self.key, "title": self.title}

    def saw(self, task: Task) -> bool:
        """Whether this contender trained on the task's data set (then the task is left out of its means)."""
        return task.dataset in getattr(self, "trained_on", [])


class ModelAnswerer(Answerer):
    """Any ``BaseDecisionModel``: one request per item, batched ``BATCH`` at a time."""

    def __init__(
        self,
        key: str,
        model: Any,
        title: str | None = None,
        trained_on: list[str] | None = None,
        reader_trained_on: list[str] | None = None,
    ):
        self.key = key
        self.title = title or key
        self.model = model
        self.trained_on = sorted(trained_on or [])
        self.reader_trained_on = None if reader_trained_on is None else sorted(reader_trained_on)
        self.taught_answers = 0
        self.head_answered: set[str] = set()

    def answer(self, task: Task, variant: Variant, items: list[Item]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(items), BATCH):
            requests = [
                {"state": item.state, "questions": {QUESTION_ID: variant.question}}
                for item in items[start : start + BATCH]
            ]
            for response in self.model.batch(requests):
                if isinstance(response, Exception):
                    raise response
                extensions = getattr(response, "extensions", None) or {}
                self.taught_answers += QUESTION_ID in extensions.get("x_taught", [])
                if QUESTION_ID not in extensions.get("x_reader", []):
                    self.head_answered.add(task.id)
                out.append(wire.answer_probabilities(response.answers[QUESTION_ID]))
        return out

    def saw(self, task: Task) -> bool:
        """Seen by the part that answered: the question reader's sets when it answered every question of
        the task, else the whole model's data card (the routing head answered some)."""
        if self.reader_trained_on is not None and task.id not in self.head_answered:
            return task.dataset in self.reader_trained_on
        return task.dataset in self.trained_on

    def info(self) -> dict[str, Any]:
        return {
            **super().info(),
            "trained_on": self.trained_on,
            "reader_trained_on": self.reader_trained_on,
            "taught_answers": self.taught_answers,
            "tasks_with_head_answers": sorted(self.head_answered),
        }


class SparrowAnswerer(Answerer):
    """``sparrow-decider`` (its bundled default model) through ``bench.baselines``' ``SparrowMethod``,
    one encoder pass per question."""

    key = "sparrow"
    title = "sparrow-decider"

    def __init__(self) -> None:
        from bench.baselines.methods import SparrowMethod

        self.method = SparrowMethod()

    def answer(self, task: Task, variant: Variant, items: list[Item]) -> list[list[float]]:
        return [
            self.method.predict({"state": item.state, "questions": {QUESTION_ID: variant.question}})[QUESTION_ID]
            for item in items
        ]

    def info(self) -> dict[str, Any]:
        return {**super().info(), "model": self.method.model_name}


class LabelCosineAnswerer(Answerer):
    """Label-name cosine with the frozen MiniLM backbone: softmax over the cosine of the state's
    mean-pooled embedding with each label text. It never reads the question's wording: choice and
    score use the option texts (``name: description`` when described), yes/no the two label names
    of the task, mapped to yes/no by the wording's meaning (so it cannot invert on a negation)."""

    key = "label_cosine"
    title = "label-name cosine (MiniLM)"

    def __init__(self, minilm: Any):
        self.minilm = minilm
        self._states: dict[str, Any] = {}
        self._labels: dict[tuple[str, ...], Any] = {}

    def answer(self, task: Task, variant: Variant, items: list[Item]) -> list[list[float]]:
        states = self._state_matrix(task, items)
        texts, slots = self._label_texts(task, variant)
        sims = states @ self._label_matrix(texts).T
        out = []
        for row in sims.tolist():
            logits = [max(SIMILARITY_SCALE * row[i] for i in members) for members in slots]
            out.append(softmax(logits))
        return out

    def _state_matrix(self, task: Task, items: list[Item]) -> Any:
        key = f"{task.id}:{len(items)}"
        if key not in self._states:
            self._states[key] = self.minilm.embed([item.state for item in items])
        return self._states[key]

    def _label_matrix(self, texts: list[str]) -> Any:
        key = tuple(texts)
        if key not in self._labels:
            self._labels[key] = self.minilm.embed(texts)
        return self._labels[key]

    @staticmethod
    def _label_texts(task: Task, variant: Variant) -> tuple[list[str], list[list[int]]]:
        """Texts to embed, and for each probability slot the text indices it takes the best of."""
        question = wire.validate_questions({QUESTION_ID: variant.question})[QUESTION_ID]
        if task.type != "noul":
            from bench.baselines.data import option_texts

            texts = option_texts(question)
            return texts, [[i] for i in range(len(texts))]
        texts = list(task.label_names.values())
        slots: list[list[int]] = [[], []]
        for i, label in enumerate(task.label_names):
            slots[variant.gold(label)].append(i)
        return texts, slots
