"""The System One server: a real uvicorn server on 127.0.0.1 in a thread, a fake model behind it."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any

import httpx
import pytest
from langchain_core.decisions import ClassifierResponse

from clef_agents import wire
from clef_agents.serve.app import ServerSettings, create_app
from clef_agents.serve.local import serve_in_thread
from clef_agents.testing import FakeDecisionModel

NOUL = {"type": "noul", "instructions": "Does the customer want money back?"}
CHOICE = {
    "type": "choice",
    "instructions": "Which team?",
    "criteria": {"billing": "invoices", "tech": None, "sales": "pricing"},
}
SCORE = {"type": "score", "instructions": "How angry?", "criteria": ["calm", "annoyed", "furious"]}


def body(state: Any = "I was charged twice, refund me", **questions: Any) -> dict[str, Any]:
    return {"state": state, "questions": questions or {"refund": NOUL}}


class RecordingModel(FakeDecisionModel):
    """A hashed fake that records the size of every batch it is asked."""

    batch_sizes: list[int] = []

    def batch(self, inputs: list[Any], config: Any = None, **kwargs: Any) -> list[ClassifierResponse]:
        self.batch_sizes.append(len(inputs))
        return [self.invoke(i) for i in inputs]


@pytest.fixture
def fake() -> RecordingModel:
    return RecordingModel(model="fake-model", batch_sizes=[])


@pytest.fixture
def server(fake: RecordingModel):
    with serve_in_thread(create_app(fake, settings=ServerSettings(max_batch_size=8, max_wait_ms=100))) as url:
        yield url


def test_answers_every_question_type_with_the_wire_shape(server: str, fake: RecordingModel) -> None:
    r = httpx.post(f"{server}/v1/systemone", json=body(refund=NOUL, team=CHOICE, anger=SCORE))
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    got = r.json()
    direct = wire.response_to_wire(
        fake.invoke(
            {
                "state": "I was charged twice, refund me",
                "questions": wire.validate_questions({"refund": NOUL, "team": CHOICE, "anger": SCORE}),
            }
        )
    )
    assert got["model"] == "fake-model"
    assert got["answers"] == direct["answers"]
    assert got["usage"] == direct["usage"]
    assert r.headers["x-request-id"]


async def test_concurrent_requests_share_one_batch_and_get_their_own_answers(fake: RecordingModel) -> None:
    states = [f"ticket number {i}: my card was declined" for i in range(8)]
    # a batch waits (up to a minute) until it has all 8: batched however slowly the requests arrive
    with serve_in_thread(create_app(fake, settings=ServerSettings(max_batch_size=8, max_wait_ms=60_000))) as server:
        async with httpx.AsyncClient(base_url=server, timeout=120) as client:
            responses = await asyncio.gather(*(client.post("/v1/systemone", json=body(s, team=CHOICE)) for s in states))
        stats = httpx.get(f"{server}/v1/stats").json()
    assert [r.status_code for r in responses] == [200] * 8
    assert fake.batch_sizes == [8], f"requests were not batched: {fake.batch_sizes}"
    for state, response in zip(states, responses):
        alone = fake.invoke({"state": state, "questions": wire.validate_questions({"team": CHOICE})})
        assert response.json()["answers"]["team"] == alone.choices["team"].model_dump(mode="json")
    assert stats["requests"] == 8 and stats["batches"] == len(fake.batch_sizes)


async def test_bad_requests_in_a_burst_are_rejected_alone_and_never_reach_the_model(
    server: str, fake: RecordingModel
) -> None:
    bad = [
        b'{"state": "x", "questions": {',
        json.dumps(
            body(q={"type": "choice", "instructions": "?", "criteria": {f"o{i}": None for i in range(256)}})
        ).encode(),
        json.dumps(body(q={"type": "boolean", "instructions": "?"})).encode(),
    ]
    async with httpx.AsyncClient(base_url=server) as client:
        sends = [client.post("/v1/systemone", content=b, headers={"content-type": "application/json"}) for b in bad]
        sends += [client.post("/v1/systemone", json=body(f"good {i}")) for i in range(4)]
        responses = await asyncio.gather(*sends)
    assert [r.status_code for r in responses] == [422, 422, 422, 200, 200, 200, 200]
    for r in responses[:3]:
        detail = r.json()["detail"]
        assert detail and all(d["loc"][0] == "body" and d["msg"] and d["type"] for d in detail)
    assert sorted(state for state, _ in fake.calls) == [f"good {i}" for i in range(4)]


def test_a_request_the_model_fails_on_does_not_fail_the_rest_of_its_batch() -> None:
    def answer(state: Any, questions: Any) -> dict[str, Any]:
        if state == "boom":
            raise RuntimeError("model exploded")
        return {}

    model = FakeDecisionModel(answer_fn=answer)
    with serve_in_thread(create_app(model, settings=ServerSettings(max_batch_size=4, max_wait_ms=200))) as url:

        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url) as client:
                return await asyncio.gather(
                    *(client.post("/v1/systemone", json=body(s)) for s in ["a", "boom", "b", "c"])
                )

        responses = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200, 500, 200, 200]
    assert responses[1].json()["detail"]["error_type"] == "api_error"


def test_bearer_key_is_required_on_v1_routes_only() -> None:
    with serve_in_thread(create_app(FakeDecisionModel(), settings=ServerSettings(api_key="s3cret"))) as url:
        missing = httpx.post(f"{url}/v1/systemone", json=body())
        wrong = httpx.post(f"{url}/v1/systemone", json=body(), headers={"Authorization": "Bearer nope"})
        right = httpx.post(f"{url}/v1/systemone", json=body(), headers={"Authorization": "Bearer s3cret"})
        models = httpx.get(f"{url}/v1/models")
        health = httpx.get(f"{url}/healthz")
    assert (missing.status_code, wrong.status_code, right.status_code, models.status_code) == (401, 401, 200, 401)
    assert missing.json()["detail"]["error_type"] == wrong.json()["detail"]["error_type"] == "authentication_error"
    assert health.status_code == 200


def test_without_a_key_an_authorization_header_is_ignored(server: str) -> None:
    r = httpx.post(f"{server}/v1/systemone", json=body(), headers={"Authorization": "Bearer anything"})
    assert r.status_code == 200


def test_limits_and_error_shapes(server: str) -> None:
    too_big = httpx.post(f"{server}/v1/systemone", json=body("x" * (1024 * 1024)))
    unknown_model = httpx.post(f"{server}/v1/systemone", json={**body(), "model": "no-such-model"})
    alias = httpx.post(f"{server}/v1/systemone", json={**body(), "model": "jev-latest"})
    served = httpx.post(f"{server}/v1/systemone", json={**body(), "model": "fake-model"})
    score_map = httpx.post(
        f"{server}/v1/systemone", json=body(q={"type": "score", "instructions": "?", "criteria": {"0": "a", "1": "b"}})
    )
    assert too_big.status_code == 413 and too_big.json()["detail"]["error_type"] == "request_too_large"
    assert unknown_model.status_code == 404
    assert unknown_model.json()["detail"]["error_type"] == "not_found_error"
    assert "fake-model" in unknown_model.json()["detail"]["message"]
    assert alias.status_code == served.status_code == 200
    assert score_map.status_code == 422
    assert score_map.json()["detail"][0]["loc"] == ["body", "questions", "q", "criteria"]
    not_found = httpx.get(f"{server}/nowhere")
    assert not_found.status_code == 404 and not_found.json()["detail"]["error_type"] == "not_found_error"


def test_models_health_readiness_and_openapi(server: str) -> None:
    models = httpx.get(f"{server}/v1/models").json()["models"]
    assert [m["name"] for m in models] == ["fake-model", "jev-latest"]
    assert all(isinstance(m[k], str) for m in models for k in ("name", "description", "release_date"))
    assert httpx.get(f"{server}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{server}/readyz").json()["status"] == "ready"
    doc = httpx.get(f"{server}/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    assert {"/v1/systemone", "/v1/models", "/healthz", "/readyz"} <= set(doc["paths"])
    assert {"Noul", "Choice", "Score", "ChoiceAnswer", "SystemOneRequest"} <= set(doc["components"]["schemas"])


def test_not_ready_until_the_loader_finishes() -> None:
    release = threading.Event()

    def loader() -> FakeDecisionModel:
        release.wait(10)
        return FakeDecisionModel(model="late")

    with serve_in_thread(create_app(loader=loader)) as url:
        assert httpx.get(f"{url}/healthz").status_code == 200
        early = httpx.get(f"{url}/readyz")
        early_answer = httpx.post(f"{url}/v1/systemone", json=body())
        release.set()
        deadline = time.monotonic() + 5
        while httpx.get(f"{url}/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        ready = httpx.get(f"{url}/readyz")
        answer = httpx.post(f"{url}/v1/systemone", json=body())
    assert early.status_code == early_answer.status_code == 503
    assert early_answer.headers["retry-after"]
    assert ready.status_code == 200 and answer.json()["model"] == "late"


def test_a_loader_failure_is_reported_by_readyz_without_internal_paths(caplog: pytest.LogCaptureFixture) -> None:
    def loader() -> FakeDecisionModel:
        raise FileNotFoundError("no checkpoint at /srv/secret/models/clef")

    with caplog.at_level(logging.ERROR, logger="clef_agents.serve"), serve_in_thread(create_app(loader=loader)) as url:
        deadline = (
            time.monotonic() + 10
        )  # the loader runs in a thread: wait until it has failed, however long that takes
        while "failed to load" not in (r := httpx.get(f"{url}/readyz")).text and time.monotonic() < deadline:
            time.sleep(0.02)
        answer = httpx.post(f"{url}/v1/systemone", json=body())
    assert r.status_code == answer.status_code == 503
    message = r.json()["detail"]["message"]
    assert "FileNotFoundError" in message and "failed to load" in message
    assert "/srv/secret" not in r.text and "/srv/secret" not in answer.text  # /readyz is unauthenticated
    assert any(
        "/srv/secret" in (rec.exc_text or "") or "/srv/secret" in str(rec.exc_info) for rec in caplog.records
    )  # the log has it


def test_slow_answers_time_out_with_504() -> None:
    model = FakeDecisionModel(answer_fn=lambda state, questions: time.sleep(0.5) or {})
    with serve_in_thread(create_app(model, settings=ServerSettings(request_timeout_s=0.1))) as url:
        r = httpx.post(f"{url}/v1/systemone", json=body())
    assert r.status_code == 504 and r.json()["detail"]["error_type"] == "timeout_error"


def test_a_full_queue_answers_503_with_retry_after() -> None:
    with serve_in_thread(create_app(FakeDecisionModel(), settings=ServerSettings(max_queue=0))) as url:
        r = httpx.post(f"{url}/v1/systemone", json=body())
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["detail"]["error_type"] == "overloaded_error"


def test_access_log_is_one_json_line_per_request(server: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="clef_agents.serve.access"):
        r = httpx.post(
            f"{server}/v1/systemone", json=body(refund=NOUL, team=CHOICE), headers={"X-Request-ID": "req-42"}
        )
        records = access_records_of(caplog, "req-42")  # logged once the response is sent: wait for it
    assert r.headers["x-request-id"] == "req-42"
    assert {
        "event": "access",
        "method": "POST",
        "path": "/v1/systemone",
        "status": 200,
        "request_id": "req-42",
        "questions": 2,
    }.items() <= records[-1].items()
    assert records[-1]["ms"] >= 0


def access_records_of(caplog: pytest.LogCaptureFixture, request_id: str, limit_s: float = 10.0) -> list[dict[str, Any]]:
    """The access log records so far, once the one of ``request_id`` is among them (the server logs a request after
    sending its response, so the client may see the response first)."""
    deadline = time.monotonic() + limit_s
    while True:
        records = [
            json.loads(rec.getMessage()) for rec in list(caplog.records) if rec.name == "clef_agents.serve.access"
        ]
        if any(record["request_id"] == request_id for record in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.01)


def test_unbatched_server_calls_the_model_once_per_request(fake: RecordingModel) -> None:
    with serve_in_thread(create_app(fake, settings=ServerSettings(max_batch_size=1))) as url:

        async def burst() -> list[int]:
            async with httpx.AsyncClient(base_url=url) as client:
                rs = await asyncio.gather(*(client.post("/v1/systemone", json=body(f"s{i}")) for i in range(4)))
            return [r.status_code for r in rs]

        assert asyncio.run(burst()) == [200] * 4
        assert httpx.get(f"{url}/v1/stats").json()["batch_size_histogram"] == {"1": 4}
    assert fake.batch_sizes == []  # single requests go through invoke, never batch
