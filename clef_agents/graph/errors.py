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
