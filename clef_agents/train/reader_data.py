"""Many questions from every trainable set: the training data of the question reader.

The routing head learnt one instruction per data set and so answers little beyond it. The reader is
taught with each labelled row turned into several questions, each a one-question decision record:

- yes/no about one label ("Is the user asking about card arrival?"), asked of the gold label or of
  another one, in plain, terse and negated wordings (a negation flips the gold answer);
- the set's own yes/no question in several wordings, and its negations with the answer flipped;
- entailment and reading sets as yes/no ("Does the text imply that ...?") and negated ("... false or
  not established ...?", flipped);
- choices among a random subset of the labels (the gold one kept), with bare names or descriptions,
  under instructions written many ways;
- ordinal ladders from rated data, asked both ways round (levels reversed for the negative question);
- yes/no questions asked as a two-option yes/no choice.

Held-out sets (``clef_agents.train.split``) never enter, and ``exclude`` drops more (the leave-one-out
target). Every wording here is a template of this module, written without looking at the benchmark's
frozen wordings or data.

Example:
    >>> records = reader_records("train", per_set=200, seed=0)  # doctest: +SKIP
    >>> records[0]["questions"]["q"]["type"]  # doctest: +SKIP
    'noul'
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from clef_agents.train import datasets
from clef_agents.train.reader_questions import SOURCE as WRITTEN_SOURCE
from clef_agents.train.reader_questions import written_records
from clef_agents.train.recipes import TRAIN_SPLIT_OVERRIDES
from clef_agents.train.split import LEAVE_ONE_OUT, READER_PROBE, check_trainable

QID = "q"

# ----------------------------------------------------------------------------- wordings

LABEL_YES = {
    "intent": [
        "Is the user asking about {x}?",
        "Is this request about {x}?",
        "Does the user want {x}?",
        "Is the intent {x}?",
        "{X}?",
        "Does this message fall under \"{x}\"?",
        "Would you file this request under {x}?",
        "Is this a {x} request?",
        "Is the person trying to do this: {x}?",
    ],
    "emotion": [
        "Does this comment express {x}?",
        "Is the writer feeling {x}?",
        "Is the main emotion here {x}?",
        "{X}?",
        "Would a reader sense {x} in this text?",
        "Does the author sound like they feel {x}?",
    ],
    "class": [
        "Is this {x}?",
        "Is the right label {x}?",
        "Does \"{x}\" describe this text?",
        "{X}?",
        "Should this be labelled {x}?",
        "Would you classify this as {x}?",
    ],
}
LABEL_NO = {
    "intent": [
        "Is the user asking about something other than {x}?",
        "Is this request not about {x}?",
        "Is it false that the intent is {x}?",
        "Is the intent anything but {x}?",
        "Not {x}?",
        "Does this message fall outside \"{x}\"?",
        "Would it be wrong to file this under {x}?",
    ],
    "emotion": [
        "Is this comment free of {x}?",
        "Does this comment not express {x}?",
        "Is the main emotion something other than {x}?",
        "Does the writer show no {x}?",
        "Would it be wrong to say the author feels {x}?",
    ],
    "class": [
        "Is this not {x}?",
        "Is the right label something other than {x}?",
        "Would it be wrong to label this {x}?",
        "Does \"{x}\" fail to describe this text?",
        "Not {x}?",
    ],
}
DESCRIPTION_YES = [
    "Does this match the following: {d}?",
    "Is this the case here: {d}?",
    "{D}?",
    "Does this fit: \"{d}\"?",
]
DESCRIPTION_NO = [
    "Does this fail to match the following: {d}?",
    "Is this not the case here: {d}?",
    "Does this not fit: \"{d}\"?",
]
CHOICE_INSTRUCTIONS = {
    "intent": [
        "What does the user want?",
        "Which request is this?",
        "Classify the user's intent.",
        "Intent?",
        "Which of these best describes what the person is asking for?",
        "Route this message to one of the options.",
        "Pick the option that matches the request.",
        "Which of the following is the user trying to do?",
    ],
    "emotion": [
        "Which emotion does this comment express?",
        "What is the writer feeling?",
        "Emotion?",
        "Pick the emotion that best fits the text.",
        "How does the author feel?",
    ],
    "class": [
        "Which label fits this text?",
        "Classify this text.",
        "Label?",
        "Which of the options applies?",
        "Pick the best category.",
        "Which description matches the text best?",
    ],
}
CHOICE_NEGATED = [
    "Which option does not fail to describe this?",
    "Which of these is not a wrong answer here?",
    "Leaving aside the options that do not apply, which one is right?",
]
ENTAIL_YES = [
    "Does the text imply that {h}?",
    "Based only on the text, is it true that {h}?",
    "Is this statement supported by the text: \"{h}\"?",
    "According to the passage, {h}?",
    "Does it follow from the text that {h}?",
    "True or false (answer yes if true): {h}",
]
ENTAIL_NO = [
    "Based only on the text, is it false or not established that {h}?",
    "Does the text fail to show that {h}?",
    "Is this statement unsupported by the text: \"{h}\"?",
    "Is it not the case, according to the text, that {h}?",
    "Would it be wrong to conclude from the text that {h}?",
]


@dataclass(frozen=True)
class Binary:
    """A yes/no set: its positive label, wordings that ask for it, and negations (gold flipped)."""

    name: str
    positive: Callable[[Mapping[str, Any]], bool]
    text: Callable[[Mapping[str, Any]], str]
    yes: tuple[str, ...]
    no: tuple[str, ...]


def _text(row: Mapping[str, Any]) -> str:
    return str(row.get("text") or row.get("sentence") or "")


BINARIES: dict[str, Binary] = {
    "sms_spam": Binary(
        "sms_spam",
        lambda r: r["label"] == "spam",
        _text,
        (
            "Is this SMS message spam?",
            "Is this text message unsolicited advertising or a scam?",
            "Spam?",
            "Is this message junk?",
            "Was this text sent in bulk to sell something or to trick the reader?",
            "Should this message go to the spam folder?",
        ),
        (
            "Is this a genuine personal message rather than spam?",
            "Is this SMS not spam?",
            "Is this message legitimate?",
            "Is this text free of advertising and scams?",
            "Should this message stay in the inbox?",
        ),
    ),
    "youtube_spam": Binary(
        "youtube_spam",
        lambda r: r["label"] == "spam",
        _text,
        (
            "Is this YouTube comment spam?",
            "Is this comment self-promotion or a link farm?",
            "Spam comment?",
            "Is the commenter advertising something unrelated to the video?",
            "Should this comment be removed as spam?",
        ),
        (
            "Is this a genuine comment about the video?",
            "Is this comment not spam?",
            "Should this comment be kept?",
            "Is the commenter reacting to the video rather than advertising?",
        ),
    ),
    "tweeteval_offensive": Binary(
        "tweeteval_offensive",
        lambda r: r["label"] == "offensive",
        _text,
        (
            "Is this tweet offensive?",
            "Does this tweet contain insults, profanity or targeted offence?",
            "Offensive?",
            "Is the author being rude or abusive?",
            "Would many readers find this tweet offensive?",
        ),
        (
            "Is this tweet inoffensive?",
            "Is this tweet not offensive?",
            "Is this tweet free of offensive language?",
            "Is the author being civil?",
        ),
    ),
    "xstest": Binary(
        "xstest",
        lambda r: r["label"] == "unsafe",
        _text,
        (
            "Is this request harmful?",
            "Should an assistant refuse this request?",
            "Unsafe request?",
            "Is the user asking for help to cause harm?",
            "Would answering this put someone at risk?",
        ),
        (
            "Is this request safe to answer?",
            "Is this request harmless?",
            "Can an assistant safely help with this?",
            "Is this a benign question, even if it sounds alarming?",
        ),
    ),
}


# ----------------------------------------------------------------------------- records


def one_question_record(state: str, question: dict[str, Any], label: Any, source: str, form: str) -> dict[str, Any]:
    """A decision record with one question (id ``q``), its label, and where it came from (``meta``).

    Example:
        >>> one_question_record("hi", {"type": "noul", "instructions": "Greeting?"}, True, "demo", "own")["labels"]
        {'q': True}
    """
    return {
        "state": state,
        "questions": {QID: question},
        "labels": {QID: label},
        "meta": {"dataset": source, "source": "reader_data", "form": form},
    }


def _readable(name: str) -> str:
    return (
        name.replace("_", " ").replace("-", " ").strip().lower()
        if name.isupper() or "_" in name
        else name.replace("-", " ").strip()
    )


def _fill(template: str, **slots: str) -> str:
    upper = {k.upper(): (v[:1].upper() + v[1:]) for k, v in slots.items()}
    return template.format(**slots, **upper)


def _as_yes_no_choice(record: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The same yes/no question asked as a two-option choice (``yes`` / ``no``, in either order)."""
    question = record["questions"][QID]
    names = ["yes", "no"] if rng.random() < 0.7 else ["no", "yes"]
    choice = {"type": "choice", "instructions": question["instructions"], "criteria": {n: None for n in names}}
    label = "yes" if record["labels"][QID] else "no"
    return one_question_record(record["state"], choice, label, record["meta"]["dataset"], "noul_as_choice")


def label_questions(
    state: str,
    gold: str,
    names: list[str],
    descriptions: Mapping[str, str | None],
    kind: str,
    source: str,
    rng: random.Random,
    k: int,
) -> list[dict[str, Any]]:
    """``k`` yes/no records about single labels of one row: half about the gold label, half about another."""
    out = []
    for _ in range(k):
        target = gold if rng.random() < 0.5 or len(names) < 2 else rng.choice([n for n in names if n != gold])
        negated = rng.random() < 0.35
        description = descriptions.get(target)
        if description and rng.random() < 0.3:
            d = description.strip().rstrip(".")
            d = d[:1].lower() + d[1:] if d[1:2].islower() else d
            template = rng.choice(DESCRIPTION_NO if negated else DESCRIPTION_YES)
            text = _fill(template, d=d)
        else:
            template = rng.choice(LABEL_NO[kind] if negated else LABEL_YES[kind])
            text = _fill(template, x=_readable(target))
        answer = (target == gold) != negated
        record = one_question_record(
            state,
            {"type": "noul", "instructions": text},
            answer,
            source,
            "label_noul_negated" if negated else "label_noul",
        )
        out.append(_as_yes_no_choice(record, rng) if rng.random() < 0.15 else record)
    return out


def choice_question(
    state: str,
    gold: str,
    names: list[str],
    descriptions: Mapping[str, str | None],
    kind: str,
    source: str,
    rng: random.Random,
    instructions: list[str] | None = None,
) -> dict[str, Any]:
    """A choice among a random subset of the labels (the gold one kept), with bare names or descriptions."""
    others = [n for n in names if n != gold]
    size = min(len(others), rng.choice([1, 2, 3, 4, 5, 7, 10, 15, 20]))
    chosen = rng.sample(others, size) + [gold]
    rng.shuffle(chosen)
    described = rng.random() < 0.4 and any(descriptions.get(n) for n in chosen)
    criteria = {_readable(n) if rng.random() < 0.5 else n: (descriptions.get(n) if described else None) for n in chosen}
    keys = list(criteria)
    label = keys[chosen.index(gold)]
    pool = (instructions or []) + CHOICE_INSTRUCTIONS[kind]
    text = rng.choice(CHOICE_NEGATED) if rng.random() < 0.08 else rng.choice(pool)
    return one_question_record(
        state,
        {"type": "choice", "instructions": text, "criteria": criteria},
        label,
        source,
        "choice_described" if described else "choice_bare",
    )


def _canonical_choice(name: str) -> tuple[str, dict[str, str | None]]:
    question = datasets.canonical_question(name)
    return question["instructions"], dict(question["criteria"])


def _from_choice_set(
    name: str, split: str, kind: str, rng: random.Random, limit: int, k_noul: int
) -> list[dict[str, Any]]:
    instructions, descriptions = _canonical_choice(name)
    names = list(descriptions)
    out = []
    for record in datasets.load_records(name, split, limit=limit, seed=rng.randrange(1 << 30)):
        (label,) = record["labels"].values()
        state = record["state"] if isinstance(record["state"], str) else json.dumps(record["state"])
        out.append(choice_question(state, label, names, descriptions, kind, name, rng, [instructions]))
        out += label_questions(state, label, names, descriptions, kind, name, rng, k_noul)
    return out


_QUOTED = re.compile(r"[\"\u201c]([^\"\u201d]{3,400})[\"\u201d]")


def _from_entailment_set(name: str, split: str, rng: random.Random, limit: int) -> list[dict[str, Any]]:
    """The set's own yes/no question, plus the quoted statement re-asked and negated (gold flipped)."""
    out = []
    for record in datasets.load_records(name, split, limit=limit, seed=rng.randrange(1 << 30)):
        for qid, question in record["questions"].items():
            label = record["labels"][qid]
            if question.get("type") != "noul":
                continue
            state = record["state"] if isinstance(record["state"], str) else json.dumps(record["state"])
            quoted = _QUOTED.search(str(question.get("instructions", "")))
            if quoted is None or quoted.group(1).strip().endswith("?") or rng.random() < 0.3:
                own = {"type": "noul", "instructions": question["instructions"]}
                out.append(one_question_record(state, own, bool(label), name, "own"))
                continue
            statement = quoted.group(1).strip().rstrip(".")
            statement = statement[:1].lower() + statement[1:] if statement[1:2].islower() else statement
            negated = rng.random() < 0.4
            text = _fill(rng.choice(ENTAIL_NO if negated else ENTAIL_YES), h=statement)
            record_out = one_question_record(
                state,
                {"type": "noul", "instructions": text},
                bool(label) != negated,
                name,
                "entail_negated" if negated else "entail",
            )
            out.append(_as_yes_no_choice(record_out, rng) if rng.random() < 0.1 else record_out)
    return out


def raw_rows(name: str, split: str) -> list[dict[str, Any]]:
    """Rows of a staged set read straight from its JSONL (sets without a loader in ``datasets``); a set
    without the split carves it from train by a hash of the text (10 % valid)."""
    folder = datasets.data_root() / name
    path = folder / f"{split}.jsonl"
    if path.is_file():
        return [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    rows = [json.loads(line) for line in (folder / "train.jsonl").open(encoding="utf-8") if line.strip()]

    def in_valid(row: Mapping[str, Any]) -> bool:
        return int(hashlib.sha256(_text(row).encode()).hexdigest()[:8], 16) % 10 == 0

    return [r for r in rows if in_valid(r) == (split == "valid")]


def _sample(rows: list[Any], limit: int, rng: random.Random) -> list[Any]:
    return rng.sample(rows, limit) if len(rows) > limit else list(rows)


def _from_binary(spec: Binary, split: str, rng: random.Random, limit: int) -> list[dict[str, Any]]:
    out = []
    for row in _sample(raw_rows(spec.name, split), limit, rng):
        negated = rng.random() < 0.35
        text = rng.choice(spec.no if negated else spec.yes)
        record = one_question_record(
            spec.text(row),
            {"type": "noul", "instructions": text},
            spec.positive(row) != negated,
            spec.name,
            "binary_negated" if negated else "binary",
        )
        out.append(_as_yes_no_choice(record, rng) if rng.random() < 0.15 else record)
    return out


def _from_raw_choice(
    name: str,
    split: str,
    kind: str,
    rng: random.Random,
    limit: int,
    k_noul: int,
    label_of: Callable[[Mapping[str, Any]], str],
    options_of: Callable[[Mapping[str, Any]], list[str]],
    instructions_of: Callable[[Mapping[str, Any]], list[str]] | None = None,
) -> list[dict[str, Any]]:
    out = []
    for row in _sample(raw_rows(name, split), limit, rng):
        names = options_of(row)
        gold = label_of(row)
        extra = instructions_of(row) if instructions_of else None
        out.append(choice_question(_text(row), gold, names, {}, kind, name, rng, extra))
        out += label_questions(_text(row), gold, names, {}, kind, name, rng, k_noul)
    return out


SST5_LADDER = ["very negative", "negative", "neutral", "positive", "very positive"]
SST3_LADDERS = [
    ["negative", "neutral", "positive"],
    ["bad", "mixed", "good"],
    ["dislikes it", "neither", "likes it"],
    ["critical", "balanced", "favourable"],
]
SEVERITY_LADDERS = [
    ["not offensive", "offensive", "hateful"],
    ["clean", "rude", "hate speech"],
    ["harmless", "insulting", "attacks a group"],
]
SEVERITY_UP = [
    "How offensive is this tweet?",
    "Rate the toxicity of this post.",
    "How abusive is the language here?",
    "Severity of offence?",
]
SEVERITY_DOWN = ["How civil is this tweet?", "How clean is the language of this post?", "Rate how inoffensive this is."]
SCORE_UP = [
    "How positive is this review?",
    "Rate how much the writer likes the film.",
    "Sentiment, from negative to positive?",
    "How favourable is this text?",
]
SCORE_DOWN = [
    "How negative is this review?",
    "Rate how much the writer dislikes the film.",
    "How critical is this text?",
    "How unfavourable is this review?",
]


def _from_sst5(split: str, rng: random.Random, limit: int, version: int) -> list[dict[str, Any]]:
    out = []
    for record in datasets.load_records("sst5", split, limit=limit, seed=rng.randrange(1 << 30)):
        level = int(record["labels"]["sentiment"])
        state = record["state"]
        down = rng.random() < 0.4
        if version < 2 or rng.random() < 0.5:
            ladder, gold = SST5_LADDER, level
        else:
            ladder, gold = rng.choice(SST3_LADDERS), (0 if level < 2 else 1 if level == 2 else 2)
        top = len(ladder) - 1
        ladder = list(reversed(ladder)) if down else list(ladder)
        question = {"type": "score", "instructions": rng.choice(SCORE_DOWN if down else SCORE_UP), "criteria": ladder}
        out.append(
            one_question_record(
                state, question, top - gold if down else gold, "sst5", "score_down" if down else "score_up"
            )
        )
        if level != 2:
            negated = rng.random() < 0.4
            text = rng.choice(
                ["Is this review negative?", "Does the writer dislike the film?", "Is the sentiment unfavourable?"]
                if negated
                else [
                    "Is this review positive?",
                    "Does the writer like the film?",
                    "Positive?",
                    "Is the sentiment favourable?",
                ]
            )
            record_out = one_question_record(
                state, {"type": "noul", "instructions": text}, (level > 2) != negated, "sst5", "sentiment_noul"
            )
            out.append(_as_yes_no_choice(record_out, rng) if rng.random() < 0.15 else record_out)
    return out


def _from_hate_offensive(split: str, rng: random.Random, limit: int, version: int) -> list[dict[str, Any]]:
    out = _from_choice_set("hate_offensive", split, "class", rng, limit, 1)
    for record in datasets.load_records("hate_offensive", split, limit=limit // 2, seed=rng.randrange(1 << 30)):
        (label,) = record["labels"].values()
        negated = rng.random() < 0.35
        text = rng.choice(
            ["Is this tweet hateful or offensive?", "Does this tweet contain abusive language?", "Toxic?"]
            if not negated
            else [
                "Is this tweet neither hateful nor offensive?",
                "Is this tweet free of abuse?",
                "Is this tweet clean?",
            ]
        )
        out.append(
            one_question_record(
                record["state"],
                {"type": "noul", "instructions": text},
                (label != "neither") != negated,
                "hate_offensive",
                "binary",
            )
        )
        if version >= 2 and rng.random() < 0.5:
            severity = {"neither": 0, "offensive_language": 1, "hate_speech": 2}[label]
            down = rng.random() < 0.4
            ladder = list(rng.choice(SEVERITY_LADDERS))
            question = {
                "type": "score",
                "instructions": rng.choice(SEVERITY_DOWN if down else SEVERITY_UP),
                "criteria": list(reversed(ladder)) if down else ladder,
            }
            out.append(
                one_question_record(
                    record["state"],
                    question,
                    2 - severity if down else severity,
                    "hate_offensive",
                    "score_down" if down else "score_up",
                )
            )
    return out


def _bfcl(split: str, rng: random.Random, limit: int) -> list[dict[str, Any]]:
    out = []
    yes = [
        "Should one of the listed tools be called to handle the user's request?",
        "Can a listed tool serve this request?",
        "Is there a suitable tool for this request?",
        "Call a tool?",
    ]
    no = [
        "Should the assistant answer without calling any of the listed tools?",
        "Is none of the listed tools suitable for this request?",
        "Would calling any of these tools be a mistake here?",
    ]
    for record in datasets.load_records("bfcl_relevance", split, limit=limit, seed=rng.randrange(1 << 30)):
        (label,) = record["labels"].values()
        negated = rng.random() < 0.35
        out.append(
            one_question_record(
                record["state"],
                {"type": "noul", "instructions": rng.choice(no if negated else yes)},
                bool(label) != negated,
                "bfcl_relevance",
                "binary",
            )
        )
    return out


INTENT_SETS = ("clinc150", "hwu64", "banking77")
ENTAILMENT_SETS = ("mnli_taxinli", "snli_esnli", "qnli", "conjnli", "dnc_recast", "rte", "boolq", "tracie", "scitail")
EXTRA_SETS = ("goemotions", "tweeteval_stance", "nlu_eval_corpora", "climate_fever", "copa", "pubmedqa")
READER_SETS = (*INTENT_SETS, *ENTAILMENT_SETS, *BINARIES, "sst5", "hate_offensive", "bfcl_relevance", *EXTRA_SETS)
"""Every set the reader may learn from (all trainable and shippable; held-out sets are never listed)."""

_CLIMATE = {
    "SUPPORTS": "supported by the evidence",
    "REFUTES": "refuted by the evidence",
    "NOT_ENOUGH_INFO": "not enough information",
    "DISPUTED": "disputed",
}
_GOEMOTIONS = [
    line.strip()
    for line in [
        "admiration",
        "amusement",
        "anger",
        "annoyance",
        "approval",
        "caring",
        "confusion",
        "curiosity",
        "desire",
        "disappointment",
        "disapproval",
        "disgust",
        "embarrassment",
        "excitement",
        "fear",
        "gratitude",
        "grief",
        "joy",
        "love",
        "nervousness",
        "optimism",
        "pride",
        "realization",
        "relief",
        "remorse",
        "sadness",
        "surprise",
        "neutral",
    ]
]


def _one_set(name: str, split: str, rng: random.Random, per_set: int, version: int) -> list[dict[str, Any]]:
    if name in INTENT_SETS:
        return _from_choice_set(name, split, "intent", rng, per_set // 3, 2)
    if name in ENTAILMENT_SETS:
        return _from_entailment_set(name, split, rng, per_set)
    if name in BINARIES:
        return _from_binary(BINARIES[name], split, rng, per_set)
    if name == "sst5":
        return _from_sst5(split, rng, per_set if version >= 2 else per_set // 2, version)
    if name == "hate_offensive":
        return _from_hate_offensive(split, rng, per_set // 2, version)
    if name == "bfcl_relevance":
        return _bfcl(split, rng, per_set)
    if name == "goemotions":
        return _from_raw_choice(
            name, split, "emotion", rng, per_set // 3, 2, lambda r: r["label"], lambda r: _GOEMOTIONS
        )
    if name == "tweeteval_stance":
        return _from_raw_choice(
            name,
            split,
            "class",
            rng,
            per_set // 2,
            1,
            lambda r: r["label"],
            lambda r: ["favor", "against", "none"],
            lambda r: [
                f"What stance does this tweet take towards {r['target']}?",
                f"Is the author for or against {r['target']}, or neither?",
            ],
        )
    if name == "nlu_eval_corpora":
        return _from_raw_choice(
            name, split, "intent", rng, per_set, 2, lambda r: r["label"], lambda r: list(r["options"])
        )
    if name == "climate_fever":
        return _from_raw_choice(
            name,
            split,
            "class",
            rng,
            per_set,
            1,
            lambda r: _CLIMATE[r["label"]],
            lambda r: list(_CLIMATE.values()),
            lambda r: ["Does the evidence support the claim?", "What does the evidence say about the claim?"],
        )
    if name in ("copa", "pubmedqa"):
        records = datasets.load_records(name, split, limit=per_set // 2, seed=rng.randrange(1 << 30))
        return [
            one_question_record(r["state"], q, r["labels"][qid], name, "own")
            for r in records
            for qid, q in r["questions"].items()
        ]
    raise ValueError(f"no reader recipe for {name!r}; known: {', '.join(READER_SETS)}")


DATA_VERSIONS = (1, 2, 3)
"""1: the first recipe (five-level sentiment ladder only, answers as the sets have them); 2: adds
three-level sentiment and offensiveness ladders, twice the sentiment rows, and balances yes and no
within every (set, form); 3: version 2 plus the written reading questions (``reader_questions``),
each repeated ``WRITTEN_COPIES`` times in training. The shipped reader's runs name the version they used."""
WRITTEN_COPIES = 4


def reader_records(
    split: str,
    per_set: int = 3000,
    seed: int = 0,
    exclude: Iterable[str] = (),
    sets: Iterable[str] = READER_SETS,
    version: int = 2,
) -> list[dict[str, Any]]:
    """Shuffled one-question records for the reader from every set in ``sets`` but ``exclude`` (and, from
    recipe version 3, the written reading questions unless ``exclude`` names ``written_questions``).

    ``split`` is ``train`` or ``valid`` (``valid`` feeds calibration and early checks only). Raises
    ``ValueError`` when a set is held out or not shippable.

    Example:
        >>> len(reader_records("valid", per_set=50, exclude=["banking77"])) > 0  # doctest: +SKIP
        True
    """
    if version not in DATA_VERSIONS:
        raise ValueError(f"reader data version {version!r}; known: {', '.join(map(str, DATA_VERSIONS))}")
    chosen = [s for s in sets if s not in set(exclude)]
    check_trainable(chosen, shipped=True)
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for name in chosen:
        if name in TRAIN_SPLIT_OVERRIDES:
            if split != "train":
                continue  # its only labelled split trains; never used to calibrate
            out += _one_set(name, TRAIN_SPLIT_OVERRIDES[name], rng, per_set, version)
            continue
        if split == "valid" and name in datasets.DATASETS and "valid" not in datasets.available_splits(name):
            continue
        out += _one_set(name, split, rng, per_set, version)
    if version >= 3 and WRITTEN_SOURCE not in set(exclude):
        out += written_records(split) * (WRITTEN_COPIES if split == "train" else 1)
    if version >= 2:
        out = balanced_yes_no(out, rng)
    rng.shuffle(out)
    return out


def balanced_yes_no(records: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """Drop yes/no records of the commoner answer until yes and no are equally many within every
    (data set, form), so that neither a set nor a wording (a negation, say) predicts the answer by itself.

    Example:
        >>> recs = [one_question_record("s", {"type": "noul", "instructions": "?"}, i < 3, "d", "binary") for i in range(10)]
        >>> sum(r["labels"][QID] for r in balanced_yes_no(recs, random.Random(0))), len(balanced_yes_no(recs, random.Random(0)))
        (3, 6)
    """
    groups: dict[tuple[str, str], dict[Any, list[int]]] = {}
    for index, record in enumerate(records):
        (question,) = record["questions"].values()
        (label,) = record["labels"].values()
        if question.get("type") == "noul" or (
            question.get("type") == "choice" and set(question.get("criteria") or {}) == {"yes", "no"}
        ):
            answer = label in (True, "yes")
            groups.setdefault((record["meta"]["dataset"], record["meta"].get("form", "")), {}).setdefault(
                answer, []
            ).append(index)
    dropped: set[int] = set()
    for by_answer in groups.values():
        keep = min(len(by_answer.get(True, [])), len(by_answer.get(False, [])))
        for indices in by_answer.values():
            dropped.update(rng.sample(indices, len(indices) - keep))
    return [r for i, r in enumerate(records) if i not in dropped]


def leave_one_out_sets() -> list[str]:
    """The leave-one-out targets (trained without, evaluated untaught).

    Example:
        >>> leave_one_out_sets()
        ['banking77']
    """
    return sorted(LEAVE_ONE_OUT)


def reader_left_out_sets() -> list[str]:
    """What the reader's runs leave out of training: the leave-one-out targets and the probe's sets
    (``split.READER_PROBE``), on which the reader is measured and chosen untaught.

    Example:
        >>> reader_left_out_sets()
        ['banking77', 'climate_fever', 'tweeteval_offensive', 'tweeteval_stance', 'xstest']
    """
    return sorted(set(LEAVE_ONE_OUT) | set(READER_PROBE))
