"""RemoteDecisionModel: httpx.MockTransport for the protocol corners, a real server for the rest."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from langchain_core.decisions import BaseDecisionModel, Choice, Noul, Score

from clef_agents import wire
from clef_agents.serve import RemoteDecisionModel, SystemOneHTTPError
from clef_agents.serve.app import ServerSettings, create_app
from clef_agents.serve.local import free_port, serve_in_thread
from clef_agents.testing import FakeDecisionModel

QUESTIONS = {
    "refund": Noul(instructions="Does the customer want money back?"),
    "team": Choice(instructions="Which team?", criteria={"billing": "invoices", "tech": None}),
    "anger": Score(instructions="How angry?", criteria=["calm", "annoyed", "furious"]),
}
OK_BODY = {
    "model": "m",
    "answers": {"refund": {"type": "noul", "noul": 0.75}},
    "usage": {"input_tokens": 7, "output_tokens": 0},
    "x_truncation": None,
}


def request(state: Any = "charged twice, refund please", questions: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"state": state, "questions": questions or {"refund": QUESTIONS["refund"]}}


class Script:
    """A MockTransport handler answering from a list of responses (or exceptions), recording requests."""

    def __init__(self, *outcomes: httpx.Response | Exception) -> None:
        self.outcomes = list(outcomes)
        self.requests: list[httpx.Request] = []

    def __call__(self, req: httpx.Request) -> httpx.Response:
        self.requests.append(req)
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def remote_with(script: Script, **kwargs: Any) -> RemoteDecisionModel:
    return RemoteDecisionModel(
        base_url="http://sys1.test", transport=httpx.MockTransport(script), backoff_s=0.0, **kwargs
    )


# --------------------------------------------------------------------------- MockTransport


def test_posts_the_wire_body_with_bearer_key_and_parses_extensions() -> None:
    script = Script(httpx.Response(200, json=OK_BODY))
    remote = remote_with(script, api_key="k3y", model="clef-mini")
    response = remote.invoke(request())
    sent = script.requests[0]
    assert isinstance(remote, BaseDecisionModel)
    assert sent.url == "http://sys1.test/v1/systemone"
    assert sent.headers["authorization"] == "Bearer k3y"
    assert json.loads(sent.content) == wire.request_to_wire(
        "charged twice, refund please", {"refund": QUESTIONS["refund"]}, model="clef-mini"
    )
    assert isinstance(response, wire.DecisionResponse)
    assert response.nouls["refund"].noul == 0.75
    assert response.usage["input_tokens"] == 7
    assert response.extensions == {"x_truncation": None}


def test_invalid_questions_are_refused_locally_without_a_request() -> None:
    script = Script(httpx.Response(200, json=OK_BODY))
    with pytest.raises(wire.InvalidRequestError, match="a choice needs 2 to 255 options, got 1"):
        remote_with(script).invoke(
            request(questions={"team": {"type": "choice", "instructions": "?", "criteria": {"a": None}}})
        )
    assert script.requests == []


def test_a_422_becomes_invalid_request_error_with_the_server_detail() -> None:
    detail = [
        {"loc": ["body", "questions", "q"], "msg": "this server allows 16 options at most", "type": "value_error"}
    ]
    script = Script(httpx.Response(422, json={"detail": detail}))
    with pytest.raises(wire.InvalidRequestError) as caught:
        remote_with(script).invoke(request())
    assert caught.value.errors == [
        {"loc": ["questions", "q"], "msg": "this server allows 16 options at most", "type": "value_error"}
    ]
    assert len(script.requests) == 1


@pytest.mark.parametrize("status", [400, 401, 404, 413, 429])
def test_other_4xx_raise_at_once_with_the_server_detail(status: int) -> None:
    script = Script(httpx.Response(status, json={"detail": {"error_type": "some_error", "message": "because"}}))
    with pytest.raises(SystemOneHTTPError) as caught:
        remote_with(script, max_retries=3).invoke(request())
    assert (caught.value.status_code, caught.value.error_type, caught.value.message) == (
        status,
        "some_error",
        "because",
    )
    assert len(script.requests) == 1  # 4xx is never retried


def test_5xx_and_connection_errors_are_retried_then_answered() -> None:
    script = Script(
        httpx.ConnectError("refused"),
        httpx.Response(503, json={"detail": {"error_type": "overloaded_error", "message": "busy"}}),
        httpx.Response(200, json=OK_BODY),
    )
    assert remote_with(script, max_retries=2).invoke(request()).nouls["refund"].noul == 0.75
    assert len(script.requests) == 3


def test_persistent_5xx_raises_after_max_retries() -> None:
    script = Script(httpx.Response(500, json={"detail": {"error_type": "api_error", "message": "down"}}))
    with pytest.raises(SystemOneHTTPError, match="500 api_error: down"):
        remote_with(script, max_retries=2).invoke(request())
    assert len(script.requests) == 3


def test_persistent_connection_errors_raise_the_httpx_error() -> None:
    script = Script(httpx.ConnectError("refused"))
    with pytest.raises(httpx.ConnectError):
        remote_with(script, max_retries=1).invoke(request())
    assert len(script.requests) == 2


def test_read_timeouts_are_not_retried() -> None:
    script = Script(httpx.ReadTimeout("slow"))
    with pytest.raises(httpx.ReadTimeout):
        remote_with(script, max_retries=3).invoke(request())
    assert len(script.requests) == 1


def test_backoff_grows_exponentially() -> None:
    remote = RemoteDecisionModel(backoff_s=0.1)
    delays = [remote.retry_delay(a) for a in range(4)]
    assert all(0.05 * 2**a <= d <= 0.1 * 2**a for a, d in enumerate(delays))


async def test_async_path_retries_and_parses() -> None:
    script = Script(httpx.Response(502, text="bad gateway"), httpx.Response(200, json=OK_BODY))
    remote = remote_with(script)
    response = await remote.ainvoke(request())
    assert response.nouls["refund"].noul == 0.75 and len(script.requests) == 2
    with pytest.raises(SystemOneHTTPError, match="404"):
        await remote_with(Script(httpx.Response(404, text="no route"))).ainvoke(request())
    await remote.aclose()


def test_a_non_json_success_is_a_clear_error() -> None:
    with pytest.raises(SystemOneHTTPError, match="not JSON"):
        remote_with(Script(httpx.Response(200, text="<html>"))).invoke(request())


# --------------------------------------------------------------------------- a real server on 127.0.0.1


@pytest.fixture
def fake() -> FakeDecisionModel:
    return FakeDecisionModel(model="fake-model")


@pytest.fixture
def server(fake: FakeDecisionModel):
    settings = ServerSettings(api_key="k", max_batch_size=8, max_wait_ms=50)
    with serve_in_thread(create_app(fake, settings=settings)) as url:
        yield url


def test_remote_answers_match_the_model_behind_the_server(server: str, fake: FakeDecisionModel) -> None:
    with RemoteDecisionModel(base_url=server, api_key="k") as remote:
        got = remote.invoke(request(questions=QUESTIONS))
    local = fake.invoke(request(questions=QUESTIONS))
    assert got.model == "fake-model"
    assert got.answers == local.answers


def test_remote_batch_is_micro_batched_by_the_server(fake: FakeDecisionModel) -> None:
    requests = [request(f"ticket {i}", QUESTIONS) for i in range(8)]
    # a batch waits (up to a minute) for 8 requests: batched however slowly the remote's requests arrive
    settings = ServerSettings(api_key="k", max_batch_size=8, max_wait_ms=60_000)
    with serve_in_thread(create_app(fake, settings=settings)) as server:
        with RemoteDecisionModel(base_url=server, api_key="k", timeout=120) as remote:
            got = remote.batch(requests, config={"max_concurrency": 8})
        stats = httpx.get(f"{server}/v1/stats", headers={"Authorization": "Bearer k"}).json()
    assert [r.answers for r in got] == [fake.invoke(r).answers for r in requests]
    assert stats["requests"] == 8 and stats["batches"] < 8


async def test_remote_async_against_the_real_server(server: str, fake: FakeDecisionModel) -> None:
    async with RemoteDecisionModel(base_url=server, api_key="k") as remote:
        got = await remote.abatch([request(f"s{i}") for i in range(4)])
    assert [r.nouls["refund"].noul for r in got] == [
        fake.invoke(request(f"s{i}")).nouls["refund"].noul for i in range(4)
    ]


def test_server_refusals_reach_the_caller(server: str) -> None:
    with pytest.raises(SystemOneHTTPError) as wrong_key:
        RemoteDecisionModel(base_url=server, api_key="nope").invoke(request())
    with pytest.raises(SystemOneHTTPError) as unknown_model:
        RemoteDecisionModel(base_url=server, api_key="k", model="gpt-x").invoke(request())
    with pytest.raises(SystemOneHTTPError) as too_big:
        RemoteDecisionModel(base_url=server, api_key="k").invoke(request("x" * 1_000_000))
    assert (wrong_key.value.status_code, wrong_key.value.error_type) == (401, "authentication_error")
    assert (unknown_model.value.status_code, unknown_model.value.error_type) == (404, "not_found_error")
    assert too_big.value.status_code == 413


def test_a_closed_port_fails_with_a_connection_error_after_retries() -> None:
    remote = RemoteDecisionModel(base_url=f"http://127.0.0.1:{free_port()}", max_retries=1, backoff_s=0.0, timeout=2)
    with pytest.raises(httpx.ConnectError):
        remote.invoke(request())


# --------------------------------------------------------------------------- another System One server


def test_remote_works_against_the_jevcompat_reference_server() -> None:
    mock = pytest.importorskip("jevcompat.mock")
    import threading

    server = mock.make_server(mock.MockConfig(key="ref-key"), host="127.0.0.1", port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with RemoteDecisionModel(base_url=url, api_key="ref-key") as remote:
            got = remote.invoke(request(questions=QUESTIONS))
        with pytest.raises(SystemOneHTTPError) as refused:
            RemoteDecisionModel(base_url=url, api_key="wrong").invoke(request())
    finally:
        server.shutdown()
        server.server_close()
    assert set(got.answers) == set(QUESTIONS)
    assert got.choices["team"].choice in {"billing", "tech"}
    assert sorted(got.scores["anger"].probabilities) == [0, 1, 2]
    assert refused.value.status_code == 401
