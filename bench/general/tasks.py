"""The untaught-question tasks of ``tasks.yaml``: items sampled from the staged data and the
questions (variants) each item is asked.

A *variant* is one question asked alone in its own request: a wording of the task, and for choice
tasks bare option names or one-line descriptions; noul tasks add the plain wording asked as a
two-option yes/no choice. ``gold`` is the index of the right entry of the variant's probability
vector (``clef_agents.wire.option_names`` order).

Example:
    >>> task = Task.from_dict({"id": "t", "dataset": "d", "type": "noul", "yes": "a",
    ...     "label_names": {"a": "A", "b": "B"}, "wordings": dict.fromkeys(WORDINGS, "Is it a?")})
    >>> [v.key for v in task.variants()]
    ['plain', 'formal', 'terse', 'paraphrase', 'negated', 'plain_as_choice']
    >>> task.variant("negated").gold("a")
    1
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clef_agents.train.datasets import staged_labels

TASKS_FILE = Path(__file__).with_name("tasks.yaml")
WORDINGS = ("plain", "formal", "terse", "paraphrase", "negated")
YES_NO = ("yes", "no")
DESCRIPTIONS_DIR = Path(__file__).resolve().parents[2] / "clef_agents"


@dataclass(frozen=True)
class Variant:
    """One question form of a task; ``question`` is its System One JSON object."""

    key: str
    wording: str
    question: dict[str, Any]
    gold_index: dict[str, int]
    """label → index of the right entry in the probability vector."""

    def gold(self, label: str) -> int:
        return self.gold_index[label]


@dataclass
class Item:
    """One sampled row: the state and its label."""

    state: str
    label: str
    row: int


@dataclass
class Task:
    """A task of ``tasks.yaml``."""

    id: str
    dataset: str
    type: str
    wordings: dict[str, str]
    family: str | None = None
    split: str | None = None
    leave_one_out: str | None = None
    yes: tuple[str, ...] = ()
    label_names: dict[str, str] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)
    levels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], labels: list[str] | None = None) -> "Task":
        missing = [w for w in WORDINGS if w not in raw.get("wordings", {})]
        if missing:
            raise ValueError(f"task {raw.get('id')!r} lacks wordings {missing}; every task needs {list(WORDINGS)}")
        yes = raw.get("yes", raw.get(True, ()))  # YAML 1.1 reads the bare key `yes` as True
        options = dict(raw.get("options", {}))
        descriptions = dict(raw.get("descriptions", {}))
        if raw.get("options_from_labels"):
            options = {label: _humanise(label) for label in labels or []}
        if raw.get("descriptions_from"):
            described = json.loads((DESCRIPTIONS_DIR / raw["descriptions_from"]).read_text())
            descriptions = {label: _description_text(described, label) for label in options}
        return cls(
            id=raw["id"],
            dataset=raw["dataset"],
            type=raw["type"],
            wordings=dict(raw["wordings"]),
            family=raw.get("family"),
            split=raw.get("split"),
            leave_one_out=raw.get("leave_one_out"),
            yes=tuple([yes] if isinstance(yes, str) else yes),
            label_names=dict(raw.get("label_names", {})),
            options=options,
            descriptions=descriptions,
            levels=dict(raw.get("levels", {})),
        )

    @property
    def labels(self) -> list[str]:
        """The data set's labels this task scores."""
        if self.type == "noul":
            return list(self.label_names)
        return list(self.options or self.levels)

    def variants(self) -> list[Variant]:
        """Every question form this task asks, in a fixed order."""
        if self.type == "noul":
            return [self._noul(w) for w in WORDINGS] + [self._noul_as_choice()]
        if self.type == "choice":
            return [self._choice(w, described) for described in (False, True) for w in WORDINGS]
        if self.type == "score":
            return [self._score(w) for w in WORDINGS]
        raise ValueError(f"task {self.id!r}: type {self.type!r} is not one of noul, choice, score")

    def variant(self, key: str) -> Variant:
        return next(v for v in self.variants() if v.key == key)

    def _yes_index(self, negated: bool) -> dict[str, int]:
        return {label: int((label in self.yes) == negated) for label in self.label_names}

    def _noul(self, wording: str) -> Variant:
        question = {"type": "noul", "instructions": self.wordings[wording]}
        return Variant(wording, wording, question, self._yes_index(wording == "negated"))

    def _noul_as_choice(self) -> Variant:
        question = {"type": "choice", "instructions": self.wordings["plain"], "criteria": dict.fromkeys(YES_NO)}
        return Variant("plain_as_choice", "plain", question, self._yes_index(False))

    def _choice(self, wording: str, described: bool) -> Variant:
        names = list(self.options.values())
        criteria = {self.options[k]: self.descriptions[k] for k in self.options} if described else dict.fromkeys(names)
        question = {"type": "choice", "instructions": self.wordings[wording], "criteria": criteria}
        key = f"{wording}_described" if described else wording
        return Variant(key, wording, question, {label: i for i, label in enumerate(self.options)})

    def _score(self, wording: str) -> Variant:
        labels = list(self.levels)
        reverse = wording == "negated"
        ordered = labels[::-1] if reverse else labels
        question = {
            "type": "score",
            "instructions": self.wordings[wording],
            "criteria": [self.levels[k] for k in ordered],
        }
        return Variant(wording, wording, question, {label: i for i, label in enumerate(ordered)})


def _humanise(label: str) -> str:
    """A label as a user would type it: ``card_arrival`` → ``card arrival``."""
    return label.replace("_", " ").rstrip("?").strip().lower()


def _description_text(described: dict[str, Any], label: str) -> str:
    """A label's one-line description from a ``clef_agents/train/descriptions`` table."""
    canonical = described.get("rename", {}).get(label, label)
    return str(described["options"][canonical])


def tasks_sha256(path: Path = TASKS_FILE) -> str:
    """The frozen wordings file's digest, recorded with every result."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_tasks(data_root: Path, path: Path = TASKS_FILE, only: list[str] | None = None) -> list[Task]:
    """The tasks of ``path`` (those in ``only`` when given), checked against the staged labels."""
    raw = yaml.safe_load(path.read_text())
    tasks = []
    for entry in raw["tasks"]:
        if only and entry["id"] not in only:
            continue
        labels = staged_labels(entry["dataset"], data_root)
        task = Task.from_dict(entry, labels)
        if task.type == "noul" and not set(task.yes) < set(task.labels):
            raise ValueError(
                f"task {task.id!r}: `yes` {list(task.yes)} must name some, not all, of its labels {task.labels}"
            )
        unknown = sorted(set(task.labels) - set(labels))
        if unknown or (task.type == "noul" and set(task.labels) != set(labels)):
            raise ValueError(
                f"task {task.id!r}: labels {task.labels} do not match {entry['dataset']}/labels.txt {labels}"
            )
        tasks.append(task)
    if only:
        unknown_ids = sorted(set(only) - {t.id for t in tasks})
        if unknown_ids:
            raise ValueError(f"unknown task id(s) {unknown_ids}; tasks.yaml has {[e['id'] for e in raw['tasks']]}")
    return tasks


def sample_items(task: Task, data_root: Path, n: int | None, seed: int = 0) -> list[Item]:
    """``n`` rows (all when ``None``) drawn with a seed from the task's split, or from every split
    pooled for a held-out set; rows whose label the task does not score are skipped."""
    folder = data_root / task.dataset
    files = [folder / f"{task.split}.jsonl"] if task.split else sorted(folder.glob("*.jsonl"))
    rows = []
    for path in files:
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                if row["label"] in task.labels:
                    rows.append(row)
    indices = list(range(len(rows)))
    if n is not None and n < len(rows):
        indices = sorted(random.Random(f"{seed}:{task.id}").sample(indices, n))
    return [Item(state=rows[i]["text"], label=rows[i]["label"], row=i) for i in indices]
