"""Which staged data sets may be trained on, and which are held out for the untaught-question benchmark.

Decided on 2026-12-04, before any model was trained on the sets added that day, and frozen: a set
moves from ``HELD_OUT`` to ``TRAINABLE`` only with a new benchmark version, never to fix a number.
``bench/general`` evaluates on the held-out sets; every training mixture is checked against them
(``check_trainable``), and ``LEAVE_ONE_OUT`` names trainable sets that a leave-one-out run drops
from its mixture so that they can be evaluated as untaught.

``shippable=False`` marks sets whose terms (non-commercial, research use, none found) keep them
out of a shipped model's training; evaluating on them is fine.

Example:
    >>> "ag_news" in HELD_OUT and "banking77" in TRAINABLE
    True
    >>> check_trainable(["banking77", "sst5"])
    >>> check_trainable(["ag_news"])
    Traceback (most recent call last):
    ...
    ValueError: held-out data set(s) ['ag_news'] in a training mixture; bench/general evaluates on them (clef_agents.train.split.HELD_OUT), train on TRAINABLE sets only
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

SPLIT_VERSION = "2026-12-04"


@dataclass(frozen=True)
class SetEntry:
    """One staged data set: its question type(s), whether a shipped model may train on it, and why."""

    kinds: tuple[str, ...]
    shippable: bool
    reason: str


HELD_OUT: dict[str, SetEntry] = {
    # yes/no
    "clickbait": SetEntry(("noul",), True, "headline yes/no with no relative in training"),
    "tweeteval_irony": SetEntry(("noul",), True, "figurative yes/no; nothing like it in training"),
    "tweeteval_hate": SetEntry(("noul",), True, "hate towards groups: near hate_offensive, other source and wording"),
    "openai_moderation": SetEntry(("noul",), True, "content moderation, one of the everyday agent questions"),
    # tool-use risk (yes/no on agent records)
    "rjudge": SetEntry(("noul", "tool"), False, "agent interaction records safe/unsafe; research use"),
    "agent_safetybench": SetEntry(
        ("noul", "tool"), False, "task + tools: safe to fulfil or not; licence not verifiable"
    ),
    "safeagentbench": SetEntry(("noul", "tool"), False, "embodied plans safe/unsafe; no licence stated"),
    "safe_os": SetEntry(("noul", "tool"), False, "shell-agent requests safe/unsafe; no licence found"),
    # tool-call decision
    "when2call": SetEntry(("choice", "noul", "tool"), True, "call / ask / decline; test split only"),
    # choice
    "ag_news": SetEntry(("choice",), False, "news topics; non-commercial research terms"),
    "tweeteval_emotion": SetEntry(("choice",), True, "emotion among four, bare names and descriptions"),
    "trec": SetEntry(("choice",), True, "question type; no relative in training"),
    "snips": SetEntry(("choice",), True, "an intent set never trained on: voice-assistant intents"),
    # score (ordinal)
    "financial_phrasebank": SetEntry(("score",), False, "3-level financial sentiment; CC BY-NC-SA"),
    "liar": SetEntry(("score",), False, "6-level truthfulness; research use only"),
    "tweeteval_sentiment": SetEntry(("score",), True, "3-level tweet sentiment; no train split"),
    "onestop_readability": SetEntry(("score",), True, "3 reading levels; nothing like it in training"),
}
"""Whole sets never in any training mixture (every split of them): evaluation only."""

TRAINABLE: dict[str, SetEntry] = {
    "banking77": SetEntry(("choice",), True, "intent; leave-one-out target of the intent family"),
    "clinc150": SetEntry(("choice",), True, "intent"),
    "hwu64": SetEntry(("choice",), True, "intent"),
    "nlu_eval_corpora": SetEntry(("choice",), True, "intent (per-corpus options); CC BY-SA"),
    "sms_spam": SetEntry(("noul",), True, "spam"),
    "youtube_spam": SetEntry(("noul",), True, "spam"),
    "hate_offensive": SetEntry(("choice", "noul"), True, "hate / offensive / neither"),
    "sst5": SetEntry(("score",), True, "5-level review sentiment"),
    "bfcl_relevance": SetEntry(("noul", "tool"), True, "call / no call"),
    "assebench_security": SetEntry(
        ("noul", "tool"),
        True,
        "agent records safe/unsafe; Apache-2.0; failure_mode and risk_description never in the input",
    ),
    "injecagent": SetEntry(
        ("choice", "tool"), True, "harm type of an injected instruction; MIT; expected_achievements never in the input"
    ),
    "xstest": SetEntry(("noul",), True, "request safety incl. safe look-alikes; CC BY 4.0"),
    "tweeteval_offensive": SetEntry(("noul",), True, "offensive tweet"),
    "tweeteval_stance": SetEntry(("choice",), True, "stance towards a target"),
    "goemotions": SetEntry(("choice",), True, "28 emotions; CC BY 4.0"),
    "climate_fever": SetEntry(("choice",), True, "claim vs evidence, NLI-like"),
    "subj": SetEntry(
        ("noul",),
        False,
        "subjective/objective; 1,805 sentences occur verbatim in sst5, so never held out; research terms",
    ),
    "mnli_taxinli": SetEntry(("noul", "choice"), True, "NLI"),
    "snli_esnli": SetEntry(("noul", "choice"), True, "NLI"),
    "qnli": SetEntry(("noul",), True, "NLI"),
    "conjnli": SetEntry(("noul", "choice"), True, "NLI"),
    "dnc_recast": SetEntry(("noul",), True, "NLI"),
    "rte": SetEntry(("noul",), True, "NLI"),
    "boolq": SetEntry(("noul",), True, "yes/no reading"),
    "tracie": SetEntry(("noul",), True, "temporal NLI"),
    "pubmedqa": SetEntry(("choice",), True, "yes/no/maybe reading"),
    "copa": SetEntry(("choice",), True, "cause/effect"),
    "scitail": SetEntry(("noul",), True, "science entailment"),
}
"""Sets a training mixture may use (a shipped model only those with ``shippable=True``)."""

READER_PROBE: dict[str, str] = {
    "xstest": "noul",
    "tweeteval_offensive": "noul",
    "tweeteval_stance": "choice",
    "climate_fever": "choice",
}
"""Trainable sets the question reader is trained without (type asked of each), so that what is chosen
after training (the checkpoint, the calibration of untaught answers) rests on questions it was never
taught; the gate's sets (assebench_security, injecagent) are never in its mixture and probe it too.
Never the benchmark's held-out sets: those are measured once, after every choice is made."""

LEAVE_ONE_OUT: dict[str, str] = {"banking77": "intent"}
"""Trainable sets that a leave-one-out run drops from its mixture to evaluate them untaught (family)."""


def held_out_in(names: Iterable[str]) -> list[str]:
    """The held-out sets among ``names``, sorted.

    Example:
        >>> held_out_in(["sst5", "trec", "liar"])
        ['liar', 'trec']
    """
    return sorted(set(names) & set(HELD_OUT))


def check_trainable(names: Iterable[str], shipped: bool = False) -> None:
    """Raise ``ValueError`` when a training mixture names a held-out set (or, for a shipped model,
    a set whose terms keep it out of shipped training).

    Example:
        >>> check_trainable(["subj"], shipped=True)
        Traceback (most recent call last):
        ...
        ValueError: data set(s) ['subj'] may not train a shipped model (non-commercial, research-only or unknown terms); see clef_agents.train.split.TRAINABLE
    """
    names = list(names)
    held = held_out_in(names)
    if held:
        raise ValueError(
            f"held-out data set(s) {held} in a training mixture; bench/general evaluates on them "
            "(clef_agents.train.split.HELD_OUT), train on TRAINABLE sets only"
        )
    if shipped:
        barred = sorted(n for n in names if n in TRAINABLE and not TRAINABLE[n].shippable)
        if barred:
            raise ValueError(
                f"data set(s) {barred} may not train a shipped model (non-commercial, research-only or unknown terms); "
                "see clef_agents.train.split.TRAINABLE"
            )


def split_table() -> list[dict[str, object]]:
    """Every set with its role (``held_out`` / ``trainable``), kinds, shippability and reason.

    Example:
        >>> row = next(r for r in split_table() if r["name"] == "liar")
        >>> row["role"], row["shippable"]
        ('held_out', False)
    """
    rows: list[dict[str, object]] = []
    for role, table in (("held_out", HELD_OUT), ("trainable", TRAINABLE)):
        for name, entry in sorted(table.items()):
            rows.append(
                {
                    "name": name,
                    "role": role,
                    "kinds": list(entry.kinds),
                    "shippable": entry.shippable,
                    "leave_one_out": LEAVE_ONE_OUT.get(name),
                    "reason": entry.reason,
                }
            )
    return rows
