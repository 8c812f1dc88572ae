"""Issue 45, server half: what a newcomer and a fault test trip over.

Every test talks to a real uvicorn server on 127.0.0.1 (``serve_in_thread``) with a fake model (or a
``RemoteDecisionModel`` whose upstream is down) behind it.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import httpx
import pytest

from clef_agents.serve.app import create_app
from clef_agents.serve.local import serve_in_thread
from clef_agents.testing import FakeDecisionModel

NOUL = {"type": "noul", "instructions": "Does the customer want money back?"}


def body(state: Any = "I was charged twice, refund me", **questions: Any) -> dict[str, Any]:
    return {"state": state, "questions": questions or {"refund": NOUL}}


def access_records(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(rec.getMessage()) for rec in caplog.records if rec.name == "clef_agents.serve.access"]


# --------------------------------------------------------------------------- 5. the access log's ms


def test_the_access_log_gives_the_request_time_in_milliseconds(caplog: pytest.LogCaptureFixture) -> None:
    model = FakeDecisionModel(answer_fn=lambda state, questions: time.sleep(0.2) or {})
    with caplog.at_level(logging.INFO, logger="clef_agents.serve.access"), serve_in_thread(create_app(model)) as url:
        started = time.perf_counter()
        r = httpx.post(f"{url}/v1/systemone", json=body(), headers={"X-Request-ID": "timed"})
        deadline = (
            time.monotonic() + 10
        )  # the server logs after sending the response: the client's span ends once it has
        while (
            not [rec for rec in access_records(caplog) if rec["request_id"] == "timed"] and time.monotonic() < deadline
        ):
            time.sleep(0.005)
        elapsed_ms = (time.perf_counter() - started) * 1000
    assert r.status_code == 200
    (record,) = [rec for rec in access_records(caplog) if rec["request_id"] == "timed"]
    assert 200 <= record["ms"] <= elapsed_ms, (
        f"logged {record['ms']} ms for a request the client timed at {elapsed_ms:.1f} ms"
    )


# --------------------------------------------------------------------------- 6. a wrong type names the field, not pydantic's types

WRONG_TYPES = {
    "instructions a number": (
        {"type": "noul", "instructions": 5},
        ["body", "questions", "q", "instructions"],
        "instructions must be text or JSON content (a string, an object or an array), got int",
    ),
    "instructions null": (
        {"type": "choice", "instructions": None, "criteria": {"a": None, "b": None}},
        ["body", "questions", "q", "instructions"],
        "instructions must be text or JSON content (a string, an object or an array), got null",
    ),
    "noul criteria a string": (
        {"type": "noul", "instructions": "?", "criteria": "yes means urgent"},
        ["body", "questions", "q", "criteria"],
        "criteria must be an object with a description of 'true' and/or of 'false' (or null), got str",
    ),
    "score criteria a string": (
        {"type": "score", "instructions": "?", "criteria": "calm|angry"},
        ["body", "questions", "q", "criteria"],
        "criteria must be a list of level descriptions (level 0 first), got str",
    ),
    "noul criteria with an unknown key": (
        {"type": "noul", "instructions": "?", "criteria": {"true": "a", "maybe": "b"}},
        ["body", "questions", "q", "criteria", "maybe"],
        "unknown field; allowed: true, false",
    ),
}


@pytest.fixture(scope="module")
def fake_server() -> Any:
    with serve_in_thread(create_app(FakeDecisionModel(model="fake"))) as url:
        yield url


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_a_wrong_type_gets_one_422_naming_the_field_what_was_found_and_what_is_allowed(
    fake_server: str, case: str
) -> None:
    question, loc, msg = WRONG_TYPES[case]
    r = httpx.post(f"{fake_server}/v1/systemone", json=body(q=question))
    assert r.status_code == 422, r.text
    assert [(d["loc"], d["msg"]) for d in r.json()["detail"]] == [(loc, msg)]
    for internal in ("json-or-python", "tagged-union", "NoulCriteria", "Input should be"):
        assert internal not in r.text


# --------------------------------------------------------------------------- 14. repeated keys are refused


def test_two_questions_with_the_same_id_get_a_422_naming_the_id(fake_server: str) -> None:
    raw = (
        '{"state": "site down", "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}, '
        '"urgent": {"type": "noul", "instructions": "Really urgent?"}}}'
    )
    r = httpx.post(f"{fake_server}/v1/systemone", content=raw.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"] == ["body", "questions"] and detail["type"] == "duplicate_key"
    assert "repeated key 'urgent'" in detail["msg"]


def test_a_repeated_key_anywhere_in_the_body_is_named_with_its_place(fake_server: str) -> None:
    raw = (
        '{"state": {"ticket": [{"id": 1, "id": 2}]}, "questions": {"q": {"type": "choice", "instructions": "?", '
        '"criteria": {"a": null, "b": null, "a": "again"}}}, "model": "fake", "model": "fake"}'
    )
    r = httpx.post(f"{fake_server}/v1/systemone", content=raw.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    found = {tuple(d["loc"]): d["msg"] for d in r.json()["detail"]}
    assert set(found) == {("body",), ("body", "state", "ticket", 0), ("body", "questions", "q", "criteria")}
    assert "repeated key 'model'" in found[("body",)] and "repeated key 'id'" in found[("body", "state", "ticket", 0)]
    assert "repeated key 'a'" in found[("body", "questions", "q", "criteria")]


# --------------------------------------------------------------------------- 13. a model out of reach


def test_a_remote_model_whose_upstream_is_down_gets_503s_and_readyz_says_why() -> None:
    from clef_agents.serve.local import free_port
    from clef_agents.serve.remote import RemoteDecisionModel

    upstream = RemoteDecisionModel(base_url=f"http://127.0.0.1:{free_port()}", max_retries=0)  # nothing listens there
    with serve_in_thread(create_app(upstream)) as url:
        r = httpx.post(f"{url}/v1/systemone", json=body())
        ready = httpx.get(f"{url}/readyz")
    assert r.status_code == 503, r.text
    assert r.json()["detail"]["error_type"] == "not_ready_error" and r.headers["retry-after"]
    assert r.json()["detail"]["message"] == "the model cannot be reached (ConnectError); see the server log"
    assert ready.status_code == 503 and ready.json()["detail"]["message"] == r.json()["detail"]["message"]


def test_readyz_says_ready_again_once_the_model_can_be_reached() -> None:
    down = {"now": True}

    def answer(state: Any, questions: Any) -> dict[str, Any]:
        if down["now"]:
            raise ConnectionRefusedError(111, "Connection refused")
        return {}

    with serve_in_thread(create_app(FakeDecisionModel(answer_fn=answer))) as url:
        assert httpx.get(f"{url}/readyz").status_code == 200  # nothing has failed yet
        failed = httpx.post(f"{url}/v1/systemone", json=body())
        still_down = httpx.get(f"{url}/readyz")  # its probe fails too
        down["now"] = False
        back = httpx.get(f"{url}/readyz")  # its probe is answered
        answered = httpx.post(f"{url}/v1/systemone", json=body())
    assert (
        failed.status_code == 503 and "cannot be reached (ConnectionRefusedError)" in failed.json()["detail"]["message"]
    )
    assert still_down.status_code == 503 and "ConnectionRefusedError" in still_down.json()["detail"]["message"]
    assert back.status_code == 200 and back.json()["status"] == "ready"
    assert answered.status_code == 200


def test_a_model_that_fails_otherwise_still_gets_a_500_and_stays_ready() -> None:
    with serve_in_thread(create_app(FakeDecisionModel(error=RuntimeError("model exploded")))) as url:
        r = httpx.post(f"{url}/v1/systemone", json=body())
        ready = httpx.get(f"{url}/readyz")
    assert r.status_code == 500 and r.json()["detail"]["error_type"] == "api_error"
    assert ready.status_code == 200
