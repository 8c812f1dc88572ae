"""Property-based fuzzing of the System One server (hypothesis), fast enough for CI.

One real uvicorn server on 127.0.0.1 and one kept-alive client for the whole module: any 5xx, any
4xx without a ``detail`` that names the field, or any dropped connection fails the test. The long
run (schemathesis against the served OpenAPI, ≥ 10,000 requests) is ``bench/fuzz/``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clef_agents import wire
from clef_agents.serve.app import ServerSettings, create_app
from clef_agents.serve.local import serve_in_thread
from clef_agents.testing import FakeDecisionModel

FUZZ = settings(
    max_examples=80, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
)

LONE_SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])
HOSTILE_TEXT = st.text(st.one_of(st.characters(), LONE_SURROGATES), max_size=12)
CLEAN_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
NAME = st.text(st.characters(exclude_categories=["Cs", "Zs", "Cc"]), min_size=1, max_size=8)

HOSTILE_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE_TEXT, inner, max_size=4),
    max_leaves=12,
)
CLEAN_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | CLEAN_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(CLEAN_TEXT, inner, max_size=3),
    max_leaves=8,
)


def _nested(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def hostile_question(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["noul", "choice", "score", "box", "bogus", None]))
    question: dict[str, Any] = {} if kind is None else {"type": kind}
    if draw(st.booleans()):
        question["instructions"] = draw(HOSTILE_JSON)
    criteria = draw(
        st.one_of(
            st.none(),
            st.dictionaries(HOSTILE_TEXT, HOSTILE_JSON, max_size=6),
            st.lists(HOSTILE_JSON, max_size=12),
            HOSTILE_JSON,
        )
    )
    if criteria is not None:
        question["criteria"] = criteria
    if draw(st.integers(0, 9)) == 0:
        question[draw(HOSTILE_TEXT)] = draw(HOSTILE_JSON)
    return draw(st.one_of(st.just(question), HOSTILE_JSON)) if draw(st.integers(0, 9)) == 0 else question


@st.composite
def hostile_body(draw: st.DrawFn) -> Any:
    body: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        body["state"] = _nested(draw(HOSTILE_JSON), draw(st.sampled_from([0, 0, 0, 1, 63, 64, 65, 600, 900])))
    if draw(st.integers(0, 9)):
        body["questions"] = draw(st.one_of(st.dictionaries(HOSTILE_TEXT, hostile_question(), max_size=5), HOSTILE_JSON))
    if draw(st.integers(0, 4)) == 0:
        body["model"] = draw(st.one_of(st.sampled_from(["jev-latest", "fake"]), HOSTILE_JSON))
    if draw(st.integers(0, 4)) == 0:
        body[draw(HOSTILE_TEXT)] = draw(HOSTILE_JSON)
    return body if draw(st.integers(0, 19)) else draw(HOSTILE_JSON)


@st.composite
def valid_question(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["noul", "choice", "score"]))
    instructions = draw(st.one_of(CLEAN_TEXT, st.dictionaries(CLEAN_TEXT, CLEAN_JSON, max_size=2)))
    if kind == "noul":
        return {"type": "noul", "instructions": instructions}
    if kind == "choice":
        names = draw(st.lists(NAME, min_size=2, max_size=8, unique=True))
        return {"type": "choice", "instructions": instructions, "criteria": {n: draw(CLEAN_JSON) for n in names}}
    levels = draw(st.lists(CLEAN_JSON.filter(lambda v: v is not None), min_size=2, max_size=10))
    return {"type": "score", "instructions": instructions, "criteria": levels}


@st.composite
def valid_body(draw: st.DrawFn) -> dict[str, Any]:
    state = draw(
        st.one_of(CLEAN_TEXT, st.dictionaries(CLEAN_TEXT, CLEAN_JSON, max_size=3), st.lists(CLEAN_JSON, max_size=3))
    )
    questions = draw(
        st.dictionaries(
            st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=6),
            valid_question(),
            min_size=1,
            max_size=4,
        )
    )
    return {"state": state, "questions": questions}


POISON = st.one_of(
    LONE_SURROGATES.map(lambda c: ("surrogate", "a" + c)),
    st.sampled_from([math.nan, math.inf, -math.inf]).map(lambda f: ("number", f)),
    st.integers(65, 900).map(lambda depth: ("deep", _nested("x", depth))),
)


@st.composite
def poisoned_body(draw: st.DrawFn) -> tuple[dict[str, Any], list[Any]]:
    """A valid body with one poisoned value (lone surrogate, NaN/Infinity, deep nesting) put
    somewhere a user could put it; returns the body and the loc prefix a 422 must name."""
    body = draw(valid_body())
    _, poison = draw(POISON)
    qid = draw(st.sampled_from(sorted(body["questions"])))
    question = body["questions"][qid]
    target = draw(
        st.sampled_from(["state", "state value", "instructions", "criteria", "extra", "model", "question id"])
    )
    if target == "state":
        body["state"] = poison
        return body, ["body", "state"]
    if target == "state value":
        body["state"] = {"ticket": "x", "nested": [poison]}
        return body, ["body", "state", "nested", 0]
    if target == "instructions":
        question["instructions"] = poison
        return body, ["body", "questions", qid, "instructions"]
    if target == "criteria" and question["type"] == "score":
        question["criteria"][0] = poison
        return body, ["body", "questions", qid, "criteria", 0]
    if target == "criteria" and question["type"] == "choice":
        question["criteria"][next(iter(question["criteria"]))] = poison
        return body, ["body", "questions", qid, "criteria"]
    if target in ("extra", "criteria"):
        body["x_note"] = poison
        return body, ["body", "x_note"]
    if target == "model" and isinstance(poison, str):
        body["model"] = poison
        return body, ["body", "model"]
    if isinstance(poison, str):  # a question id holding a lone surrogate
        body["questions"][poison] = {"type": "noul"}
        return body, ["body", "questions"]
    body["state"] = [body["state"], poison]
    return body, ["body", "state", 1]


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    app = create_app(FakeDecisionModel(model="fake"), settings=ServerSettings(max_batch_size=4, max_wait_ms=1))
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http
        assert http.get("/healthz").json() == {"status": "ok"}  # the server is healthy after the run


def _encode(body: Any) -> bytes:
    # ensure_ascii writes lone surrogates as \ud800 escapes: valid UTF-8 bytes, as a client would send
    return json.dumps(body, ensure_ascii=True, allow_nan=True).encode()


def _assert_well_formed_refusal(response: httpx.Response) -> None:
    assert response.status_code in (404, 413, 422), response.text[:500]
    assert response.headers["content-type"].startswith("application/json")
    detail = response.json()["detail"]
    if response.status_code == 422:
        assert isinstance(detail, list) and detail
        for error in detail:
            assert error["loc"][0] == "body" and isinstance(error["msg"], str) and error["msg"] and error["type"]
    else:
        assert detail["error_type"] and detail["message"]


@FUZZ
@given(case=poisoned_body())
def test_a_poisoned_value_anywhere_gets_a_422_naming_its_field(
    client: httpx.Client, case: tuple[dict[str, Any], list[Any]]
) -> None:
    body, loc = case
    response = client.post("/v1/systemone", content=_encode(body), headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text[:500]
    _assert_well_formed_refusal(response)
    named = [e["loc"] for e in response.json()["detail"]]
    assert any(got[: len(loc)] == [wire.printable(p) if isinstance(p, str) else p for p in loc] for got in named), (
        loc,
        named,
    )


@FUZZ
@given(body=hostile_body())
def test_hostile_bodies_never_get_a_5xx_and_every_refusal_names_the_field(client: httpx.Client, body: Any) -> None:
    response = client.post("/v1/systemone", content=_encode(body), headers={"content-type": "application/json"})
    if response.status_code == 200:
        assert isinstance(body, dict) and set(response.json()["answers"]) == set(body["questions"])
    else:
        _assert_well_formed_refusal(response)


@FUZZ
@given(
    raw=st.one_of(
        st.binary(max_size=64),
        st.text(max_size=64).map(str.encode),
        st.builds(lambda b: b"[" * 2000 + b, st.binary(max_size=4)),
    )
)
def test_malformed_bytes_get_a_422_and_keep_the_connection(client: httpx.Client, raw: bytes) -> None:
    response = client.post("/v1/systemone", content=raw, headers={"content-type": "application/json"})
    _assert_well_formed_refusal(response)


@FUZZ
@given(body=valid_body())
def test_valid_bodies_get_one_finite_answer_per_question(client: httpx.Client, body: dict[str, Any]) -> None:
    response = client.post("/v1/systemone", json=body)
    assert response.status_code == 200, response.text[:500]
    answers = response.json()["answers"]
    assert set(answers) == set(body["questions"])
    for qid, answer in answers.items():
        assert answer["type"] == body["questions"][qid]["type"]
        numbers = [v for v in json.loads(json.dumps(answer)).values() if isinstance(v, float)]
        assert all(math.isfinite(v) for v in numbers)
