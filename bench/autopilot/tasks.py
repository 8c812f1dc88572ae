"""The autopilot benchmark's streams and their questions, frozen before the first run (2026-12-07).

Each task replays up to 5,000 items of a labelled set that ``mini`` never trained on (banking77 is
asked with bare label names and a user's wording, not the taught question), in the user's words.
Items come from every split of the set (train first, then valid and test), so a stream is long
enough; the learner sees no item before the stream reaches it.

``sentiment_drift`` changes source midway: 2,500 tweets (tweeteval_sentiment), then 2,500 film
review phrases (sst5, its five levels folded into three), asked the same question. ``spam_drift`` (added
2026-12-07, its wording frozen before its first run, after ``sentiment_drift`` never certified) asks whether
a message is spam: 2,500 text messages (sms_spam, 13 % spam), then YouTube comments (youtube_spam, about
half spam, a different kind of spam), so a certified question meets a changed source and label mix.

Example:
    >>> sorted(TASKS)[:3]
    ['ag_news', 'banking77', 'clickbait']
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STREAM_LENGTH = 5000
SEEDS = (0, 1, 2, 3, 4)


@dataclass(frozen=True)
class Task:
    """One replayed stream: where its items come from and the question a user asks about them."""

    name: str
    kind: str  # "choice" | "noul" | "score"
    instructions: str
    options: tuple[str, ...]  # choice option names, or the label named yes (noul), or the levels (score)
    sources: tuple[str, ...] = ()
    label_map: dict[str, str] = field(default_factory=dict)  # dataset label -> option
    drift_at: int | None = None

    def question(self) -> dict[str, Any]:
        """The question in System One wire form."""
        if self.kind == "noul":
            return {"type": "noul", "instructions": self.instructions}
        if self.kind == "score":
            return {"type": "score", "instructions": self.instructions, "criteria": list(self.options)}
        return {"type": "choice", "instructions": self.instructions, "criteria": {name: None for name in self.options}}


TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task("ag_news", "choice", "What is this news story about?", ("World", "Sports", "Business", "Sci/Tech")),
        Task(
            "trec",
            "choice",
            "What kind of answer does this question ask for?",
            ("abbreviation", "description", "entity", "human", "location", "numeric"),
        ),
        Task(
            "snips",
            "choice",
            "What does the user want to do?",
            (
                "AddToPlaylist",
                "BookRestaurant",
                "GetWeather",
                "PlayMusic",
                "RateBook",
                "SearchCreativeWork",
                "SearchScreeningEvent",
            ),
        ),
        Task(
            "tweeteval_emotion",
            "choice",
            "Which emotion does this tweet express?",
            ("anger", "joy", "optimism", "sadness"),
        ),
        Task("tweeteval_offensive", "noul", "Is this tweet offensive?", ("offensive",)),
        Task("clickbait", "noul", "Is this headline clickbait?", ("clickbait",)),
        Task(
            "financial_phrasebank",
            "score",
            "How positive is this financial news for the company?",
            ("negative", "neutral", "positive"),
        ),
        Task("banking77", "choice", "What does the customer need help with?", ()),  # options: labels.txt
        Task(
            "sentiment_drift",
            "score",
            "How positive is this text?",
            ("negative", "neutral", "positive"),
            sources=("tweeteval_sentiment", "sst5"),
            label_map={"0": "negative", "1": "negative", "2": "neutral", "3": "positive", "4": "positive"},
            drift_at=2500,
        ),
        Task(
            "spam_drift",
            "noul",
            "Is this message spam?",
            ("spam",),
            sources=("sms_spam", "youtube_spam"),
            drift_at=2500,
        ),
    )
}
"""The frozen tasks: wordings are not to be edited after the first measured run."""

DRIFT_TASKS = tuple(name for name, task in TASKS.items() if task.drift_at is not None)
MAIN_TASKS = tuple(name for name in TASKS if name not in DRIFT_TASKS)


def options_of(task: Task, data: Path) -> tuple[str, ...]:
    """The task's options (banking77's come from its labels.txt)."""
    if task.options:
        return task.options
    return tuple(line.strip() for line in (data / task.name / "labels.txt").read_text().splitlines() if line.strip())


def _rows(folder: Path) -> list[dict[str, Any]]:
    rows = []
    for split in ("train", "valid", "test"):
        path = folder / f"{split}.jsonl"
        if path.exists():
            rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def load_stream(task: Task, data: Path, length: int = STREAM_LENGTH) -> tuple[list[str], list[int]]:
    """Texts and gold option indices of a task's items (a fixed, seed-free selection; orders come later).

    For a noul task index 0 is yes (``wire.label_index``); for a drift task the first ``drift_at`` items come
    from the first source and the rest from the second.
    """
    if task.drift_at is not None:
        first = _select(_rows(data / task.sources[0]), task.drift_at)
        second = _select(_rows(data / task.sources[1]), length - task.drift_at)
        rows = first + second
    else:
        rows = _select(_rows(data / task.name), length)
    options = options_of(task, data)
    texts, gold = [], []
    for row in rows:
        label = task.label_map.get(str(row["label"]), str(row["label"]))
        if task.kind == "noul":
            gold.append(0 if label == task.options[0] else 1)
        else:
            gold.append(options.index(label))
        texts.append(row["text"])
    return texts, gold


def _select(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """Every k-th row, so that a capped stream spans the whole set rather than its first file."""
    if len(rows) <= n:
        return rows
    step = len(rows) / n
    return [rows[int(i * step)] for i in range(n)]
