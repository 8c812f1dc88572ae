"""The System One contract module: every validation rule with its exact message, answers, JSON."""

from __future__ import annotations

import json
import math

import pytest
from langchain_core.decisions import Box, Choice, Noul, NoulAnswer, Score
from langchain_core.messages import AIMessage, HumanMessage

from clef_agents import wire


def messages_of(questions) -> str:
    with pytest.raises(wire.InvalidRequestError) as info:
        wire.validate_questions(questions)
    return str(info.value)


@pytest.mark.parametrize(
    ("questions", "message"),
    [
        ({}, "questions: at least one question is required, got none"),
        ([], "questions: questions must be an object of id → question, got list"),
        ({"": Noul(instructions="x")}, "questions.: a question id must be a non-empty string, got ''"),
        (
            {"dept": Choice(instructions="x", criteria={"a": None})},
            "questions.dept: a choice needs 2 to 255 options, got 1",
        ),
        (
            {"dept": {"type": "choice", "instructions": "x", "criteria": {f"o{i}": None for i in range(256)}}},
            "questions.dept: a choice needs 2 to 255 options, got 256",
        ),
        (
            {"dept": {"type": "choice", "instructions": "x", "criteria": {" ": None, "b": None}}},
            "questions.dept.criteria: option names need a character that is not white space, got ' '",
        ),
        (
            {"dept": {"type": "choice", "instructions": "x", "criteria": ["a", "b"]}},
            "questions.dept.criteria: choice criteria must be an object of option name → description, got list",
        ),
        (
            {"sev": {"type": "score", "instructions": "x", "criteria": ["a"]}},
            "questions.sev: a score needs 2 to 10 levels, got 1",
        ),
        (
            {"dept": {"type": "choice", "instructions": "x", "criteria": {}}},
            "questions.dept: a choice needs 2 to 255 options, got 0",
        ),
        (
            {"sev": {"type": "score", "instructions": "x", "criteria": [str(i) for i in range(11)]}},
            "questions.sev: a score needs 2 to 10 levels, got 11",
        ),
        (
            {"sev": {"type": "score", "instructions": "x", "criteria": {"0": "low", "1": "high"}}},
            "questions.sev.criteria: score criteria must be a list of level descriptions (level 0 first), got an object",
        ),
        (
            {"q": {"type": "boolean", "instructions": "x"}},
            "questions.q.type: unknown question type 'boolean'; allowed: noul, choice, score",
        ),
        ({"q": {"instructions": "x"}}, "questions.q.type: unknown question type None; allowed: noul, choice, score"),
        ({"q": {"type": "choice", "criteria": {"a": None, "b": None}}}, "questions.q.instructions: field required"),
        (
            {"q": {"type": "noul", "instructions": "x", "colour": "red"}},
            "questions.q.colour: unknown field; allowed: type, instructions, criteria",
        ),
        (
            {"where": Box(instructions="find it")},
            "questions.where: box questions need an image model; clef_agents models read text only (allowed: noul, choice, score)",
        ),
        (
            {"where": {"type": "box", "instructions": "find it"}},
            "questions.where: box questions need an image model; clef_agents models read text only (allowed: noul, choice, score)",
        ),
        ({"q": 42}, "questions.q: a question must be a Noul, Choice or Score (or its JSON object), got int"),
        (
            {"q": {"type": "noul", "instructions": 5}},
            "questions.q.instructions: instructions must be text or JSON content (a string, an object or an array), got int",
        ),
        (
            {"q": {"type": "noul", "instructions": "x", "criteria": {True: "spam", False: "not spam"}}},
            "questions.q.criteria: criteria: keys must be strings, got bool True",
        ),
        (
            {"q": {"type": "choice", "instructions": "x", "criteria": {1: "one", "b": None}}},
            "questions.q.criteria: criteria: keys must be strings, got int 1",
        ),
    ],
)
def test_every_rule_has_an_exact_message(questions, message):
    assert messages_of(questions) == message


def test_all_broken_questions_are_reported_together():
    text = messages_of({"a": Choice(instructions="x", criteria={"o": None}), "b": {"type": "nope"}})
    assert text == (
        "questions.a: a choice needs 2 to 255 options, got 1; "
        "questions.b.type: unknown question type 'nope'; allowed: noul, choice, score"
    )


def test_errors_are_shaped_like_fastapi_detail():
    with pytest.raises(wire.InvalidRequestError) as info:
        wire.parse_request(
            {"state": 3, "questions": {"d": {"type": "choice", "instructions": "x", "criteria": {"a": None}}}}
        )
    assert info.value.errors == [
        {
            "loc": ["state"],
            "msg": "state must be a string, object, array or LangChain messages, got int",
            "type": "union_type",
        },
        {"loc": ["questions", "d"], "msg": "a choice needs 2 to 255 options, got 1", "type": "value_error"},
    ]


def test_limits_at_the_edges_are_accepted():
    wire.validate_questions(
        {
            "c2": Choice(instructions="x", criteria={"a": None, "b": None}),
            "c255": Choice(instructions="x", criteria={f"o{i}": None for i in range(255)}),
            "s2": Score(instructions="x", criteria=["lo", "hi"]),
            "s10": Score(instructions="x", criteria=[str(i) for i in range(10)]),
            "any id 🙂.x": {"type": "noul"},
        }
    )


def test_parse_request_ignores_unknown_fields_and_accepts_structured_text():
    request = wire.parse_request(
        {
            "model": "jev-latest",
            "state": ["a", {"b": 1}],
            "extra": True,
            "questions": {
                "q": {"type": "choice", "instructions": {"ask": "which"}, "criteria": {"x": {"d": 1}, "y": None}}
            },
        }
    )
    assert request.model == "jev-latest" and request.extras == {"extra": True}
    assert wire.option_names(request.questions["q"]) == ["x", "y"]


@pytest.mark.parametrize(
    "body,message",
    [
        ("text", "body: the request body must be a JSON object, got str"),
        ({"questions": {"q": {"type": "noul"}}}, "state: field required"),
        ({"state": "x"}, "questions: field required"),
        ({"state": "x", "model": 3, "questions": {"q": {"type": "noul"}}}, "model: model must be a string, got int"),
    ],
)
def test_parse_request_rules(body, message):
    with pytest.raises(wire.InvalidRequestError) as info:
        wire.parse_request(body)
    assert str(info.value) == message


def test_answers_follow_the_spec_formulas():
    choice = Choice(instructions="x", criteria={"a": None, "b": None, "c": None, "d": None})
    answer = wire.to_answer(choice, [1, 2, 3, 4])
    assert answer.choice == "d"
    assert sum(answer.probabilities.values()) == pytest.approx(1.0)
    assert answer.confidence == pytest.approx((0.4 - 0.25) / 0.75)
    score = Score(instructions="x", criteria=["a", "b", "c", "d"])
    probs = [0.1, 0.2, 0.6, 0.1]
    answer = wire.to_answer(score, probs)
    assert answer.score == pytest.approx(sum(i * p for i, p in enumerate(probs)))
    uniform = sum(abs(i - 1.5) for i in range(4)) / 4
    spread = 0.1 * 2 + 0.2 * 1 + 0.6 * 0 + 0.1 * 1
    assert answer.confidence == pytest.approx(1 - spread / uniform)
    assert wire.to_answer(score, [0.25] * 4).confidence == pytest.approx(0.0)
    assert wire.to_answer(Noul(instructions="x"), [0.7, 0.3]).noul == pytest.approx(0.7)


def test_to_answer_rejects_bad_vectors():
    with pytest.raises(ValueError, match="expected 2 probabilities, got 3"):
        wire.to_answer(Noul(instructions="x"), [0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match="finite and non-negative"):
        wire.to_answer(Noul(instructions="x"), [math.nan, 0.3])


def test_decision_signal_and_labels():
    assert wire.decided_label(NoulAnswer(type="noul", noul=0.2)) == "no"
    assert wire.decision_probability(NoulAnswer(type="noul", noul=0.2)) == pytest.approx(0.8)
    score = wire.to_answer(Score(instructions="x", criteria=["a", "b", "c"]), [0.2, 0.5, 0.3])
    assert wire.decided_label(score) == "1" and wire.decision_probability(score) == pytest.approx(0.5)
    assert wire.label_index(Score(instructions="x", criteria=["a", "b"]), 1) == 1
    with pytest.raises(ValueError, match="label 'z' is not legal here; allowed: a, b"):
        wire.label_index(Choice(instructions="x", criteria={"a": None, "b": None}), "z")


def test_state_rendering_of_messages_and_objects():
    assert wire.state_text([HumanMessage("hi"), AIMessage("hello")]) == "human: hi\nai: hello"
    assert wire.state_text({"chat": [HumanMessage("hi")], "n": 1}) == '{"chat": ["human: hi"], "n": 1}'
    with pytest.raises(wire.InvalidRequestError, match="state: state must be a string"):
        wire.check_state(3.5)


def test_response_json_round_trip_keeps_extensions():
    score = wire.to_answer(Score(instructions="x", criteria=["a", "b"]), [0.3, 0.7])
    response = wire.DecisionResponse(
        model="m",
        answers={"s": score},
        usage={"input_tokens": 5, "output_tokens": 0},
        extensions={"x_truncation": {"truncated": False}},
    )
    body = wire.response_to_wire(response)
    assert body["answers"]["s"]["probabilities"] == {"0": 0.3, "1": 0.7}
    assert body["usage"] == {"input_tokens": 5, "output_tokens": 0}
    assert body["x_truncation"] == {"truncated": False}
    back = wire.response_from_wire(body)
    assert back.scores["s"].probabilities == {0: 0.3, 1: 0.7}
    assert back.extensions == {"x_truncation": {"truncated": False}}


# --------------------------------------------------------------------------- issue 26: hostile input and limits


def test_a_surrogate_pair_is_one_character_and_is_accepted() -> None:
    body = json.loads(
        '{"state": "ok \\ud83d\\ude00", "questions": {"\\ud83d\\ude00": {"type": "noul", "instructions": "\\ud83d\\ude00?"}}}'
    )
    parsed = wire.parse_request(body)
    assert parsed.state == "ok \U0001f600" and list(parsed.questions) == ["\U0001f600"]


def test_a_lone_surrogate_is_refused_with_a_printable_message() -> None:
    with pytest.raises(wire.InvalidRequestError) as caught:
        wire.parse_request(json.loads('{"state": {"k\\udc00": 1}, "questions": {"q": {"type": "noul"}}}'))
    assert caught.value.errors[0]["loc"] == ["state", "k\\udc00"]
    str(caught.value).encode("utf-8")


def test_limits_are_checked_before_the_questions_are_parsed() -> None:
    questions = {str(i): {"type": "nonsense"} for i in range(10_000)}
    with pytest.raises(wire.InvalidRequestError) as caught:
        wire.validate_questions(questions)
    assert [e["msg"] for e in caught.value.errors] == ["at most 64 questions per request, got 10000"]


def test_custom_limits() -> None:
    limits = wire.RequestLimits(
        max_questions=2, max_total_options=5, max_state_chars=10, max_question_chars=40, max_depth=2
    )
    two_choices = {
        "a": Choice(instructions="?", criteria={"x": None, "y": None, "z": None}),
        "b": Noul(instructions="?"),
    }
    assert wire.question_size(wire.validate_questions(two_choices, limits)) == 5
    with pytest.raises(wire.InvalidRequestError, match="at most 5 options over all questions"):
        wire.validate_questions({**two_choices, "b": Score(instructions="?", criteria=["l", "m", "h"])}, limits)
    with pytest.raises(wire.InvalidRequestError, match="at most 40 characters of question text"):
        wire.validate_questions({"a": Noul(instructions="x" * 41)}, limits)
    with pytest.raises(wire.InvalidRequestError, match="at most 10 characters of state text, got 11"):
        wire.check_state({"abcde": "fghijk"}, limits)
    with pytest.raises(wire.InvalidRequestError, match="nested deeper than 2 levels"):
        wire.check_state([[["x"]]], limits)
    wire.check_state([["x"]], limits)


@pytest.mark.parametrize(
    "name", ["max_questions", "max_total_options", "max_state_chars", "max_question_chars", "max_depth"]
)
def test_a_limit_below_one_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match=f"{name} must be at least 1, got 0"):
        wire.RequestLimits(**{name: 0})


def test_nan_is_refused_on_the_wire_but_allowed_in_an_in_process_state() -> None:
    wire.check_state({"score": float("nan")})
    with pytest.raises(wire.InvalidRequestError, match="state.score: NaN is not a JSON number"):
        wire.check_state({"score": float("nan")}, finite=True)
    with pytest.raises(wire.InvalidRequestError, match="questions.q.criteria.1: Infinity is not a JSON number"):
        wire.validate_questions({"q": Score(instructions="?", criteria=["a", float("inf")])})


def test_a_cyclic_state_is_refused_not_looped_over() -> None:
    state: list = []
    state.append(state)
    with pytest.raises(wire.InvalidRequestError, match="nested deeper than 64 levels"):
        wire.check_state(state)


def test_cancellation_checkpoints() -> None:
    wire.raise_if_cancelled()  # outside a cancellable block: a no-op
    flag = {"cancelled": False}
    with wire.cancellable(lambda: flag["cancelled"]):
        wire.raise_if_cancelled()
        flag["cancelled"] = True
        with pytest.raises(wire.RequestCancelled):
            wire.raise_if_cancelled()
    wire.raise_if_cancelled()
