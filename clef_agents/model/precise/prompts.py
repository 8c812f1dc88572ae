"""The precise tier's prompt texts: the question after the state, the question preview, the answer words and
the worked examples shown before every state.

Nothing here needs torch: these are the texts the LM reads and the words whose next-token mass is an answer.

Example:
    >>> print(question_prompt(wire.Noul(instructions="Is this urgent?")))
    Question about the text above: Is this urgent?
    Answer yes or no.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

from langchain_core.decisions import Choice, Noul, Score
from pydantic import BaseModel, ConfigDict, Field, model_validator

from clef_agents import wire
from clef_agents.model.reader import question_text, reader_option_texts

LETTERS = string.ascii_uppercase
MAX_OPTIONS = len(LETTERS)
YES_WORDS = ("yes", "Yes", "YES", " yes", " Yes")
NO_WORDS = ("no", "No", "NO", " no", " No")
ANSWER_MODES = ("letter", "name")
MARK = "\u2063CLEF_STATE\u2063"
"""Where the state goes in the chat template's text (split there into the prompt's head and tail)."""


def question_prompt(question: wire.TextQuestion, answer: str = "letter") -> str:
    """The text after the state: the question, its options (choice and score) and how to answer.

    ``answer="letter"`` lists the options under letters and asks for one; ``answer="name"`` lists them
    as a bulleted list and asks for the option's name (each name is then scored as the continuation).

    Example:
        >>> print(question_prompt(wire.Choice(instructions="Which team?", criteria={"billing": None, "tech": "Bugs."})))
        Question about the text above: Which team?
        Options:
        A. billing
        B. tech: Bugs.
        Answer with the letter of the best option.
    """
    if answer not in ANSWER_MODES:
        raise ValueError(f"answer must be one of {', '.join(ANSWER_MODES)}, got {answer!r}")
    head = f"Question about the text above: {question_text(question)}"
    if isinstance(question, wire.Noul):
        return f"{head}\nAnswer yes or no."
    options = reader_option_texts(question)
    if answer == "letter" and len(options) > MAX_OPTIONS:
        raise ValueError(
            f"the language-model tier reads at most {MAX_OPTIONS} options a question when it answers with "
            f"letters, got {len(options)}; use answer='name', ask 'mini' or shortlist them first"
        )
    marks = [f"{LETTERS[i]}." for i in range(len(options))] if answer == "letter" else ["-"] * len(options)
    listed = "\n".join(f"{mark} {text}" for mark, text in zip(marks, options))
    what = "letter" if answer == "letter" else "name"
    if isinstance(question, wire.Score):
        return f"{head}\nLevels, lowest first:\n{listed}\nAnswer with the {what} of the level that fits best."
    return f"{head}\nOptions:\n{listed}\nAnswer with the {what} of the best option."


def questions_preview(questions: Sequence[wire.TextQuestion]) -> str:
    """What ``questions_first`` puts before the state: the questions' texts (without options), so that the text
    is read knowing what will be asked, each text once; each question is asked again after the state.

    Example:
        >>> print(questions_preview([wire.Noul(instructions="Is this urgent?")]))
        Questions that will be asked about the text below:
        - Is this urgent?
        Text:
        <BLANKLINE>
    """
    listed = "\n".join(f"- {text}" for text in dict.fromkeys(question_text(q) for q in questions))
    return f"Questions that will be asked about the text below:\n{listed}\nText:\n"


def first_token_ids(tokenizer: Any, words: Sequence[str]) -> list[int]:
    """The distinct first tokens of ``words`` (e.g. ``YES_WORDS``): the tokens whose next-token mass is an answer's.

    Example:
        >>> first_token_ids(tokenizer, YES_WORDS)  # doctest: +SKIP
        [9454, 9693, 14004, 297, 7414]
    """
    ids = {
        tokenizer.encode(w, add_special_tokens=False)[0] for w in words if tokenizer.encode(w, add_special_tokens=False)
    }
    return sorted(ids)


def answer_names(question: wire.TextQuestion) -> list[str]:
    """What each option is scored as when the LM answers with names: the option's name in words, or
    the level's text.

    Example:
        >>> answer_names(wire.Choice(instructions="?", criteria={"card_arrival": "Card delivery.", "refund": None}))
        ['card arrival', 'refund']
    """
    if isinstance(question, wire.Choice):
        return [name.replace("_", " ").replace("-", " ").strip() or name for name in question.criteria]
    if isinstance(question, wire.Score):
        return [wire.content_text(level) or f"level {i}" for i, level in enumerate(question.criteria)]
    return ["yes", "no"]


class Demonstration(BaseModel):
    """A worked example the LM sees before every state: a text, a question about it and the question's answer
    (``yes`` or ``no``, an option's name, or a level's text).

    Example:
        >>> demo = Demonstration(state="The parcel came early.", question=Noul(instructions="Was it late?"), answer="no")
        >>> demo.answer_text("name")
        'No'
    """

    model_config = ConfigDict(extra="forbid")

    state: str = Field(min_length=1)
    question: Noul | Choice | Score
    answer: str

    @model_validator(mode="after")
    def _answer_is_an_option(self) -> Demonstration:
        allowed = self.allowed_answers()
        if self.answer not in allowed:
            raise ValueError(f"a worked example's answer must be one of {allowed}, got {self.answer!r}")
        return self

    def allowed_answers(self) -> list[str]:
        """What ``answer`` may be: yes and no, the option names, or the levels' texts."""
        if isinstance(self.question, Noul):
            return list(wire.NOUL_OPTIONS)
        if isinstance(self.question, Choice):
            return list(self.question.criteria)
        return answer_names(self.question)

    def answer_text(self, answer: str) -> str:
        """The answer as the LM is asked to give it: "Yes" or "No", an option's letter (``answer="letter"``),
        or its name or level as the prompt reads it."""
        if isinstance(self.question, Noul):
            return self.answer.capitalize()
        index = self.allowed_answers().index(self.answer)
        return LETTERS[index] if answer == "letter" else answer_names(self.question)[index]


def template_parts(
    tokenizer: Any, system_prompt: str | None, demonstrations: Sequence[Demonstration], answer: str = "letter"
) -> tuple[str, str]:
    """The prompt's text before the state and after the question: the chat template's, with the system
    prompt and the worked examples as earlier turns (or, without a template, the system prompt as the
    first paragraph, each example as a paragraph, and an "Answer:" cue).

    Example:
        >>> class Plain:
        ...     chat_template = None
        >>> template_parts(Plain(), "Be brief.", [])
        ('Be brief.\\n\\n', '\\nAnswer:')
    """
    if getattr(tokenizer, "chat_template", None):
        system = [{"role": "system", "content": system_prompt}] if system_prompt else []
        shown = [
            turn
            for demo in demonstrations
            for turn in (
                {"role": "user", "content": f"{demo.state}\n\n{question_prompt(demo.question, answer)}"},
                {"role": "assistant", "content": demo.answer_text(answer)},
            )
        ]
        text = tokenizer.apply_chat_template(
            [*system, *shown, {"role": "user", "content": MARK}], tokenize=False, add_generation_prompt=True
        )
        head, _, tail = text.partition(MARK)
        return head, tail
    shown_text = "".join(
        f"{demo.state}\n\n{question_prompt(demo.question, answer)}\nAnswer: {demo.answer_text(answer)}\n\n"
        for demo in demonstrations
    )
    return (f"{system_prompt}\n\n" if system_prompt else "") + shown_text, "\nAnswer:"
