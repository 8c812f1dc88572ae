"""The System One contract: validation, limits, probabilities → answers, JSON both ways.

This module is the single owner of the rules in DESIGN §2. The local model, the server and the
remote client all call it, so a request that one of them accepts, all of them accept, and an answer
that one of them produces has the same shape everywhere. It imports pydantic and langchain-core
only.

Example:
    >>> from langchain_core.decisions import Choice
    >>> qs = validate_questions({"dept": Choice(instructions="Team?", criteria={"a": None, "b": None})})
    >>> to_answer(qs["dept"], [0.25, 0.75]).choice
    'b'
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from langchain_core.decisions import (
    Answer,
    Box,
    Choice,
    ChoiceAnswer,
    ClassifierResponse,
    Noul,
    NoulAnswer,
    Score,
    ScoreAnswer,
)
from langchain_core.messages import BaseMessage
from pydantic import Field, ValidationError

MIN_CHOICE_OPTIONS = 2
MAX_CHOICE_OPTIONS = 255
MIN_SCORE_LEVELS = 2
MAX_SCORE_LEVELS = 10
QUESTION_TYPES = ("noul", "choice", "score")
NOUL_OPTIONS = ("yes", "no")
"""Canonical option names of a noul: its probability vector is ``[p(yes), p(no)]``."""

BLANK_CHARACTERS = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
"""White space as Python's ``str.isspace`` and JSON Schema's ``\\s`` both see it (a regex class body)."""
OPTION_NAME_PATTERN = f"[^{BLANK_CHARACTERS}]"
"""An option name must contain a match: a character that is not white space (same in the OpenAPI schema)."""
_OPTION_NAME = re.compile(OPTION_NAME_PATTERN)

MAX_QUESTIONS = 64
"""Most questions in one request (each unseen question costs the model one encoder pass)."""
MAX_TOTAL_OPTIONS = 1024
"""Most options over all questions of one request (a noul counts 2, a score its levels)."""
MAX_STATE_CHARS = 1_000_000
"""Most characters of text in one state (strings and object keys, at any depth)."""
MAX_QUESTION_CHARS = 100_000
"""Most characters of text over all questions of one request (ids, instructions, options, descriptions)."""
MAX_DEPTH = 64
"""Deepest nesting of objects and arrays in a state or a question's JSON content."""

TextQuestion = Noul | Choice | Score


class DecisionResponse(ClassifierResponse):
    """A ``ClassifierResponse`` that also carries System One ``x_`` extensions.

    ``extensions`` holds what the wire sends as ``x_`` fields (for example ``x_truncation``,
    which reports how a long state was cut). It is still a ``ClassifierResponse`` everywhere.

    Example:
        >>> DecisionResponse(model="m", answers={}, extensions={"x_truncation": None}).extensions
        {'x_truncation': None}
    """

    extensions: dict[str, Any] = Field(default_factory=dict)


class InvalidRequestError(ValueError):
    """A request broke a System One rule.

    ``errors`` holds one entry per broken rule, shaped like FastAPI's 422 ``detail[]``
    (``loc``, ``msg``, ``type``); ``str(error)`` joins them as ``path: message`` lines, e.g.
    ``questions.dept: a choice needs 2 to 255 options, got 1``.

    Example:
        >>> try:
        ...     validate_questions({})
        ... except InvalidRequestError as e:
        ...     print(e)
        questions: at least one question is required, got none
    """

    def __init__(self, errors: list[dict[str, Any]]):
        self.errors = errors
        super().__init__("; ".join(f"{_dotted(e['loc'])}: {e['msg']}" for e in errors))


def _dotted(loc: Sequence[Any]) -> str:
    return ".".join(str(part) for part in loc)


_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` with lone UTF-16 surrogates written as ``\\udXXX`` escapes, so it can be UTF-8 encoded.

    Error messages and ``loc`` entries echo user input; this keeps them renderable as JSON.

    Example:
        >>> print(printable("a" + chr(0xD800)))
        a\\ud800
    """
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _error(loc: Sequence[Any], msg: str, kind: str = "value_error") -> dict[str, Any]:
    return {
        "loc": [printable(part) if isinstance(part, str) else part for part in loc],
        "msg": printable(msg),
        "type": kind,
    }


@dataclass(frozen=True)
class RequestLimits:
    """Bounds on the work one request may ask for; a request beyond any of them is refused.

    The defaults are the module constants (``MAX_QUESTIONS`` …); every entry point (local model,
    fake model, remote client, server) applies them, and a server can be given its own.

    Example:
        >>> RequestLimits(max_questions=8).max_questions
        8
    """

    max_questions: int = MAX_QUESTIONS
    max_total_options: int = MAX_TOTAL_OPTIONS
    max_state_chars: int = MAX_STATE_CHARS
    max_question_chars: int = MAX_QUESTION_CHARS
    max_depth: int = MAX_DEPTH

    def __post_init__(self) -> None:
        for name in ("max_questions", "max_total_options", "max_state_chars", "max_question_chars", "max_depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


DEFAULT_LIMITS = RequestLimits()


@dataclass
class _Scan:
    """What one walk over a JSON-like value found: rule breaks (with their loc) and text size."""

    errors: list[dict[str, Any]] = field(default_factory=list)
    chars: int = 0


_MAX_SCAN_ERRORS = 8


def _scan(value: Any, loc: list[Any], max_depth: int, finite: bool, scan: _Scan) -> _Scan:
    """Walk ``value`` without recursion: lone surrogates, (optionally) NaN/Infinity, nesting depth.

    Only mappings, sequences and message contents are entered; other objects are left alone.
    """
    stack: list[tuple[Any, list[Any], int]] = [(value, loc, 0)]
    while stack and len(scan.errors) < _MAX_SCAN_ERRORS:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            scan.chars += len(item)
            if not item.isascii() and (found := _SURROGATE.search(item)):
                scan.errors.append(_surrogate_error(where, item, found.start()))
        elif isinstance(item, float):
            if finite and not math.isfinite(item):
                shown = "NaN" if math.isnan(item) else ("Infinity" if item > 0 else "-Infinity")
                scan.errors.append(
                    _error(where, f"{shown} is not a JSON number; allowed: finite numbers", "finite_number")
                )
        elif isinstance(item, BaseMessage):
            stack.append((item.content, [*where, "content"], depth))
        elif isinstance(item, (Mapping, list, tuple)):
            if depth >= max_depth:
                scan.errors.append(
                    _error(
                        where,
                        f"nested deeper than {max_depth} levels of objects and arrays; allowed: at most {max_depth}",
                        "too_deep",
                    )
                )
                continue
            if isinstance(item, Mapping):
                for key, child in item.items():
                    if isinstance(key, str):
                        scan.chars += len(key)
                        if not key.isascii() and (found := _SURROGATE.search(key)):
                            scan.errors.append(_surrogate_error([*where, key], key, found.start(), "key"))
                            continue
                    stack.append((child, [*where, key], depth + 1))
            else:
                stack.extend((child, [*where, i], depth + 1) for i, child in enumerate(item))
    return scan


def _surrogate_error(loc: list[Any], text: str, at: int, what: str = "string") -> dict[str, Any]:
    return _error(
        loc,
        f"the {what} holds a lone UTF-16 surrogate ({printable(text[at])!s} at character {at}), which is not text; "
        "allowed: valid Unicode (surrogates only as a pair, i.e. one character)",
        "string_unicode",
    )


# --------------------------------------------------------------------------- cancellation


class RequestCancelled(RuntimeError):
    """The work was abandoned: every request it was for has timed out or gone away."""


_CANCELLED: ContextVar[Callable[[], bool] | None] = ContextVar("clef_agents_cancelled", default=None)


@contextmanager
def cancellable(is_cancelled: Callable[[], bool]) -> Iterator[None]:
    """Run a block whose model work stops at the next ``raise_if_cancelled`` once ``is_cancelled()``.

    A server wraps each model call in it, so a request that timed out stops using the worker.

    Example:
        >>> with cancellable(lambda: True):
        ...     raise_if_cancelled()
        Traceback (most recent call last):
        ...
        clef_agents.wire.RequestCancelled: the request was abandoned (timed out or disconnected)
    """
    token = _CANCELLED.set(is_cancelled)
    try:
        yield
    finally:
        _CANCELLED.reset(token)


def raise_if_cancelled() -> None:
    """A checkpoint for long model work: raise ``RequestCancelled`` if the surrounding
    ``cancellable`` block was cancelled (a no-op outside one).

    Example:
        >>> raise_if_cancelled()
    """
    check = _CANCELLED.get()
    if check is not None and check():
        raise RequestCancelled("the request was abandoned (timed out or disconnected)")


# --------------------------------------------------------------------------- questions


def validate_questions(questions: Any, limits: RequestLimits = DEFAULT_LIMITS) -> dict[str, TextQuestion]:
    """Check a question mapping against every System One rule and ``limits``; return typed questions.

    Accepts typed questions (``Noul``/``Choice``/``Score``) or their wire dicts. Raises
    ``InvalidRequestError`` naming each question id and the rule it broke. Text with a lone UTF-16
    surrogate, NaN/Infinity and content nested deeper than ``limits.max_depth`` are refused.

    Example:
        >>> validate_questions({"spam": {"type": "noul", "instructions": "Is it spam?"}})["spam"].type
        'noul'
    """
    if not isinstance(questions, Mapping):
        raise InvalidRequestError(
            [
                _error(
                    ["questions"],
                    f"questions must be an object of id → question, got {type(questions).__name__}",
                    "dict_type",
                )
            ]
        )
    if not questions:
        raise InvalidRequestError([_error(["questions"], "at least one question is required, got none", "too_short")])
    if len(questions) > limits.max_questions:
        raise InvalidRequestError(
            [
                _error(
                    ["questions"],
                    f"at most {limits.max_questions} questions per request, got {len(questions)}",
                    "too_long",
                )
            ]
        )
    typed: dict[str, TextQuestion] = {}
    errors: list[dict[str, Any]] = []
    scan = _Scan()
    for qid, question in questions.items():
        try:
            typed[qid] = _validate_question(qid, question, limits, scan)
        except InvalidRequestError as exc:
            errors.extend(exc.errors)
    if errors:
        raise InvalidRequestError(errors)
    _check_request_size(typed, scan.chars, limits)
    return typed


def _check_request_size(typed: Mapping[str, TextQuestion], chars: int, limits: RequestLimits) -> None:
    options = question_size(typed)
    if options > limits.max_total_options:
        raise InvalidRequestError(
            [
                _error(
                    ["questions"],
                    f"at most {limits.max_total_options} options over all questions (a noul counts 2, a score its levels), got {options}",
                    "too_long",
                )
            ]
        )
    if chars > limits.max_question_chars:
        raise InvalidRequestError(
            [
                _error(
                    ["questions"],
                    f"at most {limits.max_question_chars} characters of question text (ids, instructions, options, descriptions), got {chars}",
                    "too_long",
                )
            ]
        )


def question_size(questions: Mapping[str, TextQuestion]) -> int:
    """How many options a (validated) question mapping asks the model to weigh.

    Example:
        >>> question_size({"a": Noul(instructions="?"), "b": Score(instructions="?", criteria=["x", "y", "z"])})
        5
    """
    return sum(len(option_names(q)) for q in questions.values())


def _validate_question(qid: Any, question: Any, limits: RequestLimits, scan: _Scan) -> TextQuestion:
    loc = ["questions", qid]
    if not isinstance(qid, str) or not qid:
        raise InvalidRequestError([_error(loc, f"a question id must be a non-empty string, got {qid!r}")])
    scan.chars += len(qid)
    if not qid.isascii() and (found := _SURROGATE.search(qid)):
        raise InvalidRequestError([_surrogate_error(loc, qid, found.start(), "question id")])
    before = len(scan.errors)
    for where, content in _question_contents(loc, question):
        _scan(content, where, limits.max_depth, True, scan)
    if len(scan.errors) > before:
        found = scan.errors[before:]
        del scan.errors[before:]
        raise InvalidRequestError(found)
    if isinstance(question, Box) or (isinstance(question, Mapping) and question.get("type") == "box"):
        raise InvalidRequestError(
            [
                _error(
                    loc,
                    "box questions need an image model; clef_agents models read text only (allowed: noul, choice, score)",
                    "unsupported_type",
                )
            ]
        )
    if isinstance(question, Mapping):
        question = _question_from_dict(loc, question)
    if not isinstance(question, (Noul, Choice, Score)):
        raise InvalidRequestError(
            [
                _error(
                    loc,
                    f"a question must be a Noul, Choice or Score (or its JSON object), got {type(question).__name__}",
                    "model_type",
                )
            ]
        )
    _check_limits(loc, question)
    return question


def _question_contents(loc: list[Any], question: Any) -> list[tuple[list[Any], Any]]:
    """The parts of a question (wire dict or typed) that hold user text or JSON, with their loc."""
    if isinstance(question, Mapping):
        return [(loc, question)]
    parts: list[tuple[list[Any], Any]] = []
    if isinstance(question, (Noul, Choice, Score)):
        parts.append(([*loc, "instructions"], question.instructions))
        criteria = question.criteria
        if isinstance(question, Noul) and criteria is not None:
            parts.append(([*loc, "criteria"], {"true": criteria.true, "false": criteria.false}))
        elif criteria is not None:
            parts.append(([*loc, "criteria"], criteria))
    return parts


def _question_from_dict(loc: list[Any], raw: Mapping[str, Any]) -> TextQuestion:
    kind = raw.get("type")
    if kind not in QUESTION_TYPES:
        raise InvalidRequestError(
            [_error([*loc, "type"], f"unknown question type {kind!r}; allowed: noul, choice, score", "literal_error")]
        )
    body = dict(raw)
    if kind == "noul" and "instructions" not in body:
        body["instructions"] = ""
    if kind == "score" and isinstance(body.get("criteria"), Mapping):
        raise InvalidRequestError(
            [
                _error(
                    [*loc, "criteria"],
                    "score criteria must be a list of level descriptions (level 0 first), got an object",
                    "list_type",
                )
            ]
        )
    if kind == "choice" and "criteria" in body and not isinstance(body["criteria"], Mapping):
        raise InvalidRequestError(
            [
                _error(
                    [*loc, "criteria"],
                    f"choice criteria must be an object of option name → description, got {type(body['criteria']).__name__}",
                    "dict_type",
                )
            ]
        )
    criteria = body.get("criteria")
    if kind == "score" and isinstance(criteria, list) and len(criteria) < MIN_SCORE_LEVELS:
        raise InvalidRequestError(
            [_error(loc, f"a score needs {MIN_SCORE_LEVELS} to {MAX_SCORE_LEVELS} levels, got {len(criteria)}")]
        )
    if kind == "choice" and isinstance(criteria, Mapping) and len(criteria) < MIN_CHOICE_OPTIONS:
        raise InvalidRequestError(
            [_error(loc, f"a choice needs {MIN_CHOICE_OPTIONS} to {MAX_CHOICE_OPTIONS} options, got {len(criteria)}")]
        )
    cls = {"noul": Noul, "choice": Choice, "score": Score}[kind]
    try:
        return cls.model_validate(body)
    except ValidationError as exc:
        raise InvalidRequestError(_pydantic_errors(loc, kind, body, exc.errors())) from None


_CONTENT = "text or JSON content (a string, an object or an array)"
_ALLOWED_VALUES: dict[tuple[Any, ...], str] = {
    ("instructions",): _CONTENT,
    ("noul", "criteria"): "an object with a description of 'true' and/or of 'false' (or null)",
    ("choice", "criteria"): "an object of option name → description",
    ("score", "criteria"): "a list of level descriptions (level 0 first)",
}
"""What each field of a question may hold, as the 422 for a wrong type says it."""
_ALLOWED_FIELDS = {(): "type, instructions, criteria", ("criteria",): "true, false"}


def _pydantic_errors(
    loc: list[Any], kind: str, body: Mapping[str, Any], errors: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """pydantic's errors for one question as System One 422 entries: each names the field (never a
    pydantic type such as ``dict[str,json-or-python[...]]``), what was found and what is allowed.

    A value that fails every member of a union (e.g. ``instructions: 5``) gives one entry, not one
    per member.

    Example:
        >>> [e["msg"] for e in _pydantic_errors(["questions", "q"], "noul", {"instructions": 5}, [
        ...     {"loc": ("instructions", "str"), "msg": "Input should be a valid string", "type": "string_type"},
        ...     {"loc": ("instructions", "list[json]"), "msg": "Input should be a valid list", "type": "list_type"}])]
        ['instructions must be text or JSON content (a string, an object or an array), got int']
    """
    entries: dict[tuple[Any, ...], dict[str, Any]] = {}
    for err in sorted(errors, key=lambda e: not _is_key_error(e)):  # a bad key says more than its union's other members
        if _is_key_error(err):
            container = list(err["loc"])[: -2 if err["loc"][-1] == "[key]" else -1]  # without the key (and "[key]")
            where, _, _ = _input_at(body, {**err, "loc": container})
            message = f"keys must be strings, got {_found(err['input'])} {err['input']!r}"
            entries.setdefault(tuple(where), _error([*loc, *where], f"{_dotted(where)}: {message}", "invalid_key"))
            continue
        where, value, is_union = _input_at(body, err)
        key = tuple(where)
        if key in entries:
            entries[key]["type"] = entries[key]["type"] if entries[key]["type"] == "invalid_key" else "union_type"
            continue
        entries[key] = _error(
            [*loc, *where], _pydantic_message(kind, where, value, err), "union_type" if is_union else err["type"]
        )
    return list(entries.values())


def _is_key_error(err: Mapping[str, Any]) -> bool:
    """pydantic's error for a mapping key that is not a string (in-process input; JSON keys are strings)."""
    return err["type"] == "invalid_key" or (bool(err["loc"]) and err["loc"][-1] == "[key]")


def _input_at(body: Mapping[str, Any], err: Mapping[str, Any]) -> tuple[list[Any], Any, bool]:
    """The part of ``err["loc"]`` that is a path in ``body`` (pydantic appends union member names
    such as ``"str"``), the value found there, and whether union member names were cut off."""
    loc = list(err["loc"])
    if err["type"] == "missing":
        return loc, None, False
    where: list[Any] = []
    value: Any = body
    for part in loc:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
            value = value[part]
        else:
            return where, value, True
        where.append(part)
    return where, value, False


def _pydantic_message(kind: str, where: list[Any], value: Any, err: Mapping[str, Any]) -> str:
    if err["type"] == "missing":
        return "field required"
    if err["type"] == "extra_forbidden":
        allowed = _ALLOWED_FIELDS.get(tuple(where[:-1]) if kind == "noul" else (), _ALLOWED_FIELDS[()])
        return f"unknown field; allowed: {allowed}"
    if len(where) == 1:
        allowed = _ALLOWED_VALUES.get(tuple(where)) or _ALLOWED_VALUES.get((kind, *where))
    else:
        allowed = _CONTENT if where[:1] == ["criteria"] else None  # one description of a criteria entry
    if allowed is None:
        return f"{err['msg']}, got {_found(value)}"
    return f"{_dotted(where)} must be {allowed}, got {_found(value)}"


def _found(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check_limits(loc: list[Any], question: TextQuestion) -> None:
    if isinstance(question, Choice):
        n = len(question.criteria)
        if not MIN_CHOICE_OPTIONS <= n <= MAX_CHOICE_OPTIONS:
            raise InvalidRequestError(
                [_error(loc, f"a choice needs {MIN_CHOICE_OPTIONS} to {MAX_CHOICE_OPTIONS} options, got {n}")]
            )
        empty = [name for name in question.criteria if not _OPTION_NAME.search(name)]
        if empty:
            raise InvalidRequestError(
                [_error([*loc, "criteria"], f"option names need a character that is not white space, got {empty[0]!r}")]
            )
    elif isinstance(question, Score):
        n = len(question.criteria)
        if not MIN_SCORE_LEVELS <= n <= MAX_SCORE_LEVELS:
            raise InvalidRequestError(
                [_error(loc, f"a score needs {MIN_SCORE_LEVELS} to {MAX_SCORE_LEVELS} levels, got {n}")]
            )
        missing = [i for i, level in enumerate(question.criteria) if level is None]
        if missing:
            # the legend echoes each level, and SDKs reject a null legend value
            raise InvalidRequestError(
                [
                    _error([*loc, "criteria", i], "a score level needs a description (text or JSON), got null")
                    for i in missing
                ]
            )


def option_names(question: TextQuestion) -> list[str]:
    """The names a question's probability vector is indexed by.

    Example:
        >>> option_names(Score(instructions="How bad?", criteria=["mild", "severe"]))
        ['0', '1']
    """
    if isinstance(question, Choice):
        return list(question.criteria)
    if isinstance(question, Score):
        return [str(i) for i in range(len(question.criteria))]
    return list(NOUL_OPTIONS)


def yes_no_choice(question: Noul) -> Choice:
    """The yes/no ``question`` asked as the two-option choice ``yes`` / ``no``: the same instructions, and a yes/no
    criterion's texts (when given) as the options' descriptions.

    Example:
        >>> yes_no_choice(Noul(instructions="Is it spam?")).criteria
        {'yes': None, 'no': None}
    """
    if not isinstance(question, Noul):
        raise TypeError(f"yes_no_choice takes a yes/no question (Noul), got {type(question).__name__}")
    yes = no = None
    if question.criteria is not None:
        yes, no = content_text(question.criteria.true) or None, content_text(question.criteria.false) or None
    return Choice(instructions=question.instructions, criteria={"yes": yes, "no": no})


# --------------------------------------------------------------------------- text rendering


def content_text(content: Any) -> str:
    """Render instructions, criteria or descriptions (text or JSON) as one string.

    Example:
        >>> content_text({"hint": "refunds"})
        '{"hint": "refunds"}'
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, default=str)


def state_text(state: Any, roles: Mapping[str, str] | None = None) -> str:
    """Render a state (string, object, array, LangChain messages at any depth) as text.

    Messages become ``role: content`` lines so a chat transcript reads like one; ``roles`` renames
    message types (e.g. ``{"human": "user", "ai": "assistant"}``), others keep their type.

    Example:
        >>> from langchain_core.messages import HumanMessage
        >>> state_text([HumanMessage("my card is lost")])
        'human: my card is lost'
        >>> state_text([HumanMessage("my card is lost")], roles={"human": "user"})
        'user: my card is lost'
    """
    if isinstance(state, str):
        return state
    if isinstance(state, BaseMessage):
        return _message_text(state, roles)
    if _is_message_list(state):
        return "\n".join(_message_text(m, roles) for m in state)
    return json.dumps(_jsonable_state(state, roles), ensure_ascii=False)


def _is_message_list(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and bool(value)
        and all(isinstance(m, BaseMessage) for m in value)
    )


def _message_text(message: BaseMessage, roles: Mapping[str, str] | None = None) -> str:
    content = message.content if isinstance(message.content, str) else content_text(message.content)
    return f"{(roles or {}).get(message.type, message.type)}: {content}"


def _jsonable_state(value: Any, roles: Mapping[str, str] | None = None) -> Any:
    if isinstance(value, BaseMessage):
        return _message_text(value, roles)
    if isinstance(value, Mapping):
        return {str(k): _jsonable_state(v, roles) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_jsonable_state(v, roles) for v in value]
    return value


def check_state(state: Any, limits: RequestLimits = DEFAULT_LIMITS, finite: bool = False) -> None:
    """Raise ``InvalidRequestError`` unless the state is a string, object, array or message(s)
    within ``limits``: no lone UTF-16 surrogate, at most ``max_depth`` levels of nesting and
    ``max_state_chars`` characters. ``finite=True`` (wire bodies) also refuses NaN and Infinity;
    in-process states may hold them (they are rendered as text).

    Example:
        >>> check_state({"ticket": "refund please"})
        >>> check_state({"a": [[["too deep"]]]}, RequestLimits(max_depth=2))
        Traceback (most recent call last):
        ...
        clef_agents.wire.InvalidRequestError: state.a.0: nested deeper than 2 levels of objects and arrays; allowed: at most 2
    """
    if not (
        isinstance(state, (str, BaseMessage, Mapping)) or (isinstance(state, Sequence) and not isinstance(state, bytes))
    ):
        raise InvalidRequestError(
            [
                _error(
                    ["state"],
                    f"state must be a string, object, array or LangChain messages, got {type(state).__name__}",
                    "union_type",
                )
            ]
        )
    if isinstance(state, Sequence) and not isinstance(state, (str, list, tuple)):
        state = list(state)
    scan = _scan(state, ["state"], limits.max_depth, finite, _Scan())
    if scan.errors:
        raise InvalidRequestError(scan.errors)
    if scan.chars > limits.max_state_chars:
        raise InvalidRequestError(
            [
                _error(
                    ["state"],
                    f"at most {limits.max_state_chars} characters of state text, got {scan.chars}",
                    "too_long",
                )
            ]
        )


# --------------------------------------------------------------------------- answers


def choice_confidence(probabilities: Sequence[float]) -> float:
    """SPEC §4.5 choice confidence: ``(p_max − 1/n) / (1 − 1/n)``.

    Example:
        >>> round(choice_confidence([0.5, 0.5]), 6)
        0.0
    """
    n = len(probabilities)
    return _unit((max(probabilities) - 1 / n) / (1 - 1 / n))


def _uniform_spread(n: int) -> float:
    centre = (n - 1) / 2
    return sum(abs(i - centre) for i in range(n)) / n


def score_confidence(probabilities: Sequence[float]) -> float:
    """SPEC §4.5 score confidence: ``max(0, 1 − Σ p_i·|i − mode| / U(n))``.

    ``U(n)`` is the same spread for the uniform distribution, measured about its centre.

    Example:
        >>> score_confidence([0.0, 1.0, 0.0])
        1.0
    """
    n = len(probabilities)
    mode = max(range(n), key=lambda i: probabilities[i])
    spread = sum(p * abs(i - mode) for i, p in enumerate(probabilities))
    return _unit(1 - spread / _uniform_spread(n))


def _unit(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


def _normalised(probabilities: Sequence[float], expected: int) -> list[float]:
    values = [float(p) for p in probabilities]
    if len(values) != expected:
        raise ValueError(f"expected {expected} probabilities, got {len(values)}")
    if any(not math.isfinite(p) or p < 0 for p in values):
        raise ValueError(f"probabilities must be finite and non-negative, got {values}")
    total = sum(values)
    if total <= 0:
        raise ValueError("probabilities sum to 0")
    return [p / total for p in values]


def to_answer(question: TextQuestion, probabilities: Sequence[float]) -> Answer:
    """Turn a probability vector (indexed as ``option_names``) into a typed answer.

    Example:
        >>> to_answer(Noul(instructions="Spam?"), [0.8, 0.2]).noul
        0.8
    """
    probs = _normalised(probabilities, len(option_names(question)))
    if isinstance(question, Noul):
        return NoulAnswer(type="noul", noul=_unit(probs[0]))
    if isinstance(question, Choice):
        names = list(question.criteria)
        best = max(range(len(names)), key=lambda i: probs[i])
        return ChoiceAnswer(
            type="choice",
            choice=names[best],
            probabilities=dict(zip(names, probs)),
            confidence=choice_confidence(probs),
        )
    return ScoreAnswer(
        type="score",
        score=sum(i * p for i, p in enumerate(probs)),
        legend=dict(enumerate(question.criteria)),
        probabilities=dict(enumerate(probs)),
        confidence=score_confidence(probs),
    )


def answer_probabilities(answer: Answer) -> list[float]:
    """The inverse of ``to_answer``: the probability vector indexed as ``option_names``.

    Example:
        >>> answer_probabilities(NoulAnswer(type="noul", noul=0.3))
        [0.3, 0.7]
    """
    if isinstance(answer, NoulAnswer):
        return [answer.noul, 1.0 - answer.noul]
    if isinstance(answer, ChoiceAnswer):
        return list(answer.probabilities.values())
    if isinstance(answer, ScoreAnswer):
        return [answer.probabilities[i] for i in sorted(answer.probabilities)]
    raise TypeError(f"no probability vector for a {type(answer).__name__}")


def decided_label(answer: Answer) -> str:
    """The label an answer decides: ``"yes"``/``"no"`` for a noul, the option for a choice,
    the most probable level (as a string) for a score.

    Example:
        >>> decided_label(NoulAnswer(type="noul", noul=0.3))
        'no'
    """
    if isinstance(answer, NoulAnswer):
        return NOUL_OPTIONS[0] if answer.noul >= 0.5 else NOUL_OPTIONS[1]
    if isinstance(answer, ChoiceAnswer):
        return answer.choice
    if isinstance(answer, ScoreAnswer):
        return str(max(answer.probabilities, key=lambda i: answer.probabilities[i]))
    raise TypeError(f"no decided label for a {type(answer).__name__}")


def decision_probability(answer: Answer) -> float:
    """The probability of the decided label: the signal that lanes and thresholds act on.

    Example:
        >>> decision_probability(NoulAnswer(type="noul", noul=0.3))
        0.7
    """
    if isinstance(answer, NoulAnswer):
        return max(answer.noul, 1.0 - answer.noul)
    return max(answer_probabilities(answer))


def label_index(question: TextQuestion, label: Any) -> int:
    """Index of a label (bool/"yes"/"no" for noul, option name for choice, level for score).

    Raises ``ValueError`` naming the allowed labels when the label is illegal.

    Example:
        >>> label_index(Noul(instructions="Spam?"), True)
        0
    """
    names = option_names(question)
    if isinstance(question, Noul):
        if isinstance(label, bool):
            return 0 if label else 1
        key = str(label).strip().lower()
        if key in ("yes", "true", "1"):
            return 0
        if key in ("no", "false", "0"):
            return 1
    elif isinstance(question, Score):
        if isinstance(label, (int, str)) and not isinstance(label, bool) and str(label) in names:
            return int(label)
    elif isinstance(label, str) and label in question.criteria:
        return names.index(label)
    raise ValueError(f"label {label!r} is not legal here; allowed: {allowed_labels(question)}")


def allowed_labels(question: TextQuestion) -> str:
    """The labels a question accepts, as one readable line for error messages.

    Example:
        >>> allowed_labels(Noul(instructions="Spam?"))
        'true/false (or yes/no)'
    """
    if isinstance(question, Noul):
        return "true/false (or yes/no)"
    names = option_names(question)
    shown = ", ".join(names[:12]) + (f", … ({len(names)} in all)" if len(names) > 12 else "")
    return shown


# --------------------------------------------------------------------------- wire JSON


@dataclass
class WireRequest:
    """A validated System One request body."""

    state: Any
    questions: dict[str, TextQuestion]
    model: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def parse_request(body: Any, limits: RequestLimits = DEFAULT_LIMITS) -> WireRequest:
    """Validate a System One request body (already JSON-decoded) against the rules and ``limits``.

    Unknown top-level fields are ignored (kept in ``extras``), but like the rest of the body they
    may not hold NaN/Infinity, lone surrogates or nesting deeper than ``limits.max_depth``.

    Example:
        >>> parse_request({"state": "hi", "questions": {"q": {"type": "noul", "instructions": "Greeting?"}}}).model is None
        True
    """
    if not isinstance(body, Mapping):
        raise InvalidRequestError(
            [_error(["body"], f"the request body must be a JSON object, got {type(body).__name__}", "dict_type")]
        )
    errors: list[dict[str, Any]] = []
    if "state" not in body:
        errors.append(_error(["state"], "field required", "missing"))
    else:
        try:
            check_state(body["state"], limits, finite=True)
        except InvalidRequestError as exc:
            errors.extend(exc.errors)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        errors.append(_error(["model"], f"model must be a string, got {type(model).__name__}", "string_type"))
    extras = {k: v for k, v in body.items() if k not in ("state", "questions")}
    errors.extend(_scan(extras, [], limits.max_depth, True, _Scan()).errors)
    questions: dict[str, TextQuestion] = {}
    if "questions" not in body:
        errors.append(_error(["questions"], "field required", "missing"))
    else:
        try:
            questions = validate_questions(body["questions"], limits)
        except InvalidRequestError as exc:
            errors.extend(exc.errors)
    if errors:
        raise InvalidRequestError(errors)
    extras.pop("model", None)
    return WireRequest(state=body["state"], questions=questions, model=model, extras=extras)


def question_to_wire(question: TextQuestion) -> dict[str, Any]:
    """A typed question as its System One JSON object.

    Example:
        >>> question_to_wire(Noul(instructions="Spam?"))
        {'type': 'noul', 'instructions': 'Spam?'}
    """
    return question.model_dump(mode="json", exclude_none=True)


def request_to_wire(state: Any, questions: Mapping[str, TextQuestion], model: str | None = None) -> dict[str, Any]:
    """A request as a System One JSON body (messages in the state rendered as text).

    Example:
        >>> request_to_wire("hi", {"q": Noul(instructions="Greeting?")})["questions"]["q"]["type"]
        'noul'
    """
    body: dict[str, Any] = {
        "state": _jsonable_state(state),
        "questions": {k: question_to_wire(q) for k, q in questions.items()},
    }
    if model is not None:
        body["model"] = model
    return body


def response_to_wire(response: ClassifierResponse, extensions: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A response as System One JSON (score keys as strings, usage as integers, ``x_`` extras).

    Example:
        >>> r = ClassifierResponse(model="m", answers={"q": NoulAnswer(type="noul", noul=0.5)})
        >>> response_to_wire(r)["usage"]
        {'input_tokens': 0, 'output_tokens': 0}
    """
    usage = response.usage or {}
    body: dict[str, Any] = {
        "model": response.model,
        "answers": {qid: answer.model_dump(mode="json") for qid, answer in response.answers.items()},
        "usage": {
            "input_tokens": int(usage.get("input_tokens", 0)),
            "output_tokens": int(usage.get("output_tokens", 0)),
        },
    }
    if response.request_id:
        body["x_request_id"] = response.request_id
    merged = {**getattr(response, "extensions", {}), **(extensions or {})}
    for key, value in merged.items():
        body[key if key.startswith("x_") else f"x_{key}"] = value
    return body


def response_from_wire(body: Mapping[str, Any]) -> DecisionResponse:
    """Parse a System One response body; ``x_`` fields land in ``extensions``.

    Example:
        >>> response_from_wire({"model": "m", "answers": {"q": {"type": "noul", "noul": 0.2}}}).nouls["q"].noul
        0.2
    """
    return DecisionResponse.model_validate(
        {
            "model": body.get("model", ""),
            "answers": body.get("answers", {}),
            "usage": body.get("usage"),
            "request_id": body.get("x_request_id"),
            "extensions": {k: v for k, v in body.items() if k.startswith("x_") and k != "x_request_id"},
        }
    )
