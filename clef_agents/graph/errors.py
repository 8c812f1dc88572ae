"""Errors raised by the graph layer. Each says what was found and what was expected."""

from __future__ import annotations


class GraphInputError(ValueError):
    """A gate could not read its input or its questions from the graph state.

    Example:
        >>> str(GraphInputError("gate 'triage' expected the state key 'ticket'"))
        "gate 'triage' expected the state key 'ticket'"
    """


class DecisionModelError(RuntimeError):
    """The decision model raised, or answered something other than the questions it was asked.

    The original exception is chained as ``__cause__``.
    """


class ReviewInputError(ValueError):
    """A resume value (a reviewer's answer) had the wrong shape or an illegal label.

    ``expected`` describes the shape that would have been accepted.
    """

    def __init__(self, message: str, expected: str):
        self.expected = expected
        super().__init__(f"{message}; expected {expected}")


class UntaughtQuestionWarning(UserWarning):
    """A gate's model answered one of its questions without having been taught it (the response's ``x_untaught``
    lists the question): its answers are close to chance on questions nobody taught (``bench/general``). Teach the
    question (``clef-agents teach``) or ask a stronger tier.

    Silence it where that is known and accepted:
    ``warnings.filterwarnings("ignore", category=UntaughtQuestionWarning)``.
    """


class NoChatModelWarning(UserWarning):
    """A gate without a chat model sent a question of its ``llm`` lane (between ``human_below`` and ``auto_at``) to a
    person: nobody asked an LLM. Said once per gate; the question's route trace notes it too, as the escalation
    ``{"to": "llm", "model": None, "outcome": "no chat model"}``.

    Give the gate a chat model (``DecisionGate(..., chat_model=...)``), or, to send the middle band to people on
    purpose, set ``human_below`` equal to ``auto_at`` in the lane policy (no llm lane), or silence it:
    ``warnings.filterwarnings("ignore", category=NoChatModelWarning)``.
    """


def untaught_question_ids(response: object) -> list[str]:
    """The question ids a response says its model answered without taught weights: ``x_untaught`` (or, from
    servers older than issue 44, ``x_reader``); empty for models that do not say (remote models without the extension).

    Example:
        >>> from clef_agents import wire
        >>> untaught_question_ids(wire.DecisionResponse(model="m", answers={}, extensions={"x_untaught": ["urgent"]}))
        ['urgent']
    """
    extensions = getattr(response, "extensions", None) or {}
    return [str(qid) for qid in extensions.get("x_untaught") or extensions.get("x_reader") or ()]
