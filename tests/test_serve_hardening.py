"""Issue 26, server half: bad input, overload and misuse never take the server (or the library) down.

Every test talks to a real uvicorn server on 127.0.0.1 (``serve_in_thread``) or runs the CLI as a
user would, except where the entry point is in-process (``model.invoke``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from langchain_core.decisions import Choice, Noul, Score

from clef_agents import wire
from clef_agents.serve.app import ServerSettings, create_app
from clef_agents.serve.local import free_port, serve_in_thread
from clef_agents.testing import FakeDecisionModel

SURROGATE = "\\ud800"  # a lone UTF-16 surrogate, as JSON text
NOUL = {"type": "noul", "instructions": "Does the customer want money back?"}


def good(state: str = "I was charged twice, refund me") -> dict[str, Any]:
    return {"state": state, "questions": {"refund": NOUL}}


def post_raw(url: str, raw: str | bytes, content_type: str = "application/json", **kwargs: Any) -> httpx.Response:
    data = raw.encode() if isinstance(raw, str) else raw
    return httpx.post(f"{url}/v1/systemone", content=data, headers={"content-type": content_type}, **kwargs)


def locs(response: httpx.Response) -> list[list[Any]]:
    return [d["loc"] for d in response.json()["detail"]]


def wait_until_abandoned(limit_s: float = 60.0) -> bool:
    """Model work that lasts until the server abandons the request it runs for (``wire.raise_if_cancelled`` would
    raise): True once it has, False after ``limit_s``. A request held by it times out however fast the machine is."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            wire.raise_if_cancelled()
        except wire.RequestCancelled:
            return True
        time.sleep(0.005)
    return False


def wait_until_ready(url: str, limit_s: float = 30.0) -> None:
    """Poll ``/readyz`` until the model is loaded (or fail after ``limit_s``)."""
    deadline = time.monotonic() + limit_s
    while httpx.get(f"{url}/readyz").status_code != 200:
        assert time.monotonic() < deadline, f"the server was not ready within {limit_s:g} s"
        time.sleep(0.02)


class CountingModel(FakeDecisionModel):
    """A hashed fake that records every state it answered (to prove what reached the model)."""

    seen: list[Any] = []

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        self.seen.append(input["state"])
        return super().invoke(input, config, **kwargs)

    def batch(self, inputs: list[Any], config: Any = None, **kwargs: Any) -> list[Any]:
        return [self.invoke(i) for i in inputs]


@pytest.fixture
def counting() -> CountingModel:
    return CountingModel(model="fake", seen=[])


@pytest.fixture
def server(counting: CountingModel) -> Iterator[str]:
    with serve_in_thread(create_app(counting, settings=ServerSettings(max_batch_size=8, max_wait_ms=150))) as url:
        yield url


# --------------------------------------------------------------------------- 1. lone surrogates

SURROGATE_BODIES = {
    "state": ('{"state": "a%sb", "questions": {"q": {"type": "noul"}}}' % SURROGATE, ["body", "state"]),
    "state key": (
        '{"state": {"%s": 1}, "questions": {"q": {"type": "noul"}}}' % SURROGATE,
        ["body", "state", "\\ud800"],
    ),
    "instructions": (
        '{"state": "x", "questions": {"q": {"type": "noul", "instructions": "%s"}}}' % SURROGATE,
        ["body", "questions", "q", "instructions"],
    ),
    "question id": (
        '{"state": "x", "questions": {"%s": {"type": "noul"}}}' % SURROGATE,
        ["body", "questions", "\\ud800"],
    ),
    "option name": (
        '{"state": "x", "questions": {"q": {"type": "choice", "instructions": "?", "criteria": {"%s": null, "b": null}}}}'
        % SURROGATE,
        ["body", "questions", "q", "criteria", "\\ud800"],
    ),
    "score level": (
        '{"state": "x", "questions": {"q": {"type": "score", "instructions": "?", "criteria": ["%s", "b"]}}}'
        % SURROGATE,
        ["body", "questions", "q", "criteria", 0],
    ),
    "model": ('{"model": "%s", "state": "x", "questions": {"q": {"type": "noul"}}}' % SURROGATE, ["body", "model"]),
}


@pytest.mark.parametrize("where", sorted(SURROGATE_BODIES))
def test_a_lone_surrogate_anywhere_gets_422_naming_the_field(server: str, counting: CountingModel, where: str) -> None:
    raw, loc = SURROGATE_BODIES[where]
    r = post_raw(server, raw)
    assert r.status_code == 422, r.text
    assert locs(r) == [loc]
    assert "surrogate" in r.json()["detail"][0]["msg"]
    assert counting.seen == []


async def test_surrogate_requests_never_fail_the_good_requests_of_their_batch(
    server: str, counting: CountingModel
) -> None:
    bad = [raw for raw, _ in SURROGATE_BODIES.values()]
    async with httpx.AsyncClient(base_url=server) as client:
        sends = [
            client.post("/v1/systemone", content=b.encode(), headers={"content-type": "application/json"}) for b in bad
        ]
        sends += [client.post("/v1/systemone", json=good(f"good {i}")) for i in range(4)]
        responses = await asyncio.gather(*sends)
    assert [r.status_code for r in responses] == [422] * len(bad) + [200] * 4
    assert sorted(counting.seen) == [f"good {i}" for i in range(4)]


@pytest.mark.parametrize(
    "state, questions",
    [
        ("a\ud800b", {"q": Noul(instructions="?")}),
        ("x", {"q": Noul(instructions="\udfff")}),
        ("x", {"\ud800": Noul(instructions="?")}),
        ("x", {"q": Choice(instructions="?", criteria={"\ud800": None, "b": None})}),
        ("x", {"q": Score(instructions="?", criteria=["\ud800", "b"])}),
        ({"k": ["\ud800"]}, {"q": Noul(instructions="?")}),
    ],
)
def test_model_invoke_with_a_lone_surrogate_raises_a_clear_error(state: Any, questions: dict[str, Any]) -> None:
    with pytest.raises(wire.InvalidRequestError, match="lone UTF-16 surrogate") as caught:
        FakeDecisionModel().invoke({"state": state, "questions": questions})
    str(caught.value).encode("utf-8")  # the message itself can be printed


def test_decide_cli_with_a_lone_surrogate_prints_an_error_not_a_traceback() -> None:
    # on a UTF-8 system, bytes that are not UTF-8 reach Python's argv as lone surrogates
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "clef_agents.cli",
            "decide",
            "--model",
            "fake",
            "--state",
            b"caf\xe9".decode("utf-8", "surrogateescape"),
            "--noul",
            "q=Is it food?",
        ],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=60,
        env={**__import__("os").environ, "PYTHONIOENCODING": "utf-8", "LC_ALL": "C.UTF-8"},
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "state" in proc.stderr and "surrogate" in proc.stderr


# --------------------------------------------------------------------------- 2. NaN / Infinity


@pytest.mark.parametrize(
    "raw, loc",
    [
        ('{"state": {"a": NaN}, "questions": {"q": {"type": "noul"}}}', ["body", "state", "a"]),
        ('{"state": [1, Infinity], "questions": {"q": {"type": "noul"}}}', ["body", "state", 1]),
        (
            '{"state": "x", "questions": {"q": {"type": "score", "instructions": "?", "criteria": [NaN, "b"]}}}',
            ["body", "questions", "q", "criteria", 0],
        ),
        (
            '{"state": "x", "questions": {"q": {"type": "noul", "instructions": {"w": -Infinity}}}}',
            ["body", "questions", "q", "instructions", "w"],
        ),
        ('{"state": "x", "x_extra": NaN, "questions": {"q": {"type": "noul"}}}', ["body", "x_extra"]),
    ],
)
def test_nan_and_infinity_tokens_get_422_naming_the_field(
    server: str, counting: CountingModel, raw: str, loc: list[Any]
) -> None:
    r = post_raw(server, raw)
    assert r.status_code == 422, r.text
    assert locs(r) == [loc]
    assert "not a JSON number" in r.json()["detail"][0]["msg"]
    assert counting.seen == []


def test_a_score_level_named_nan_is_answered_and_echoed(server: str) -> None:
    body = {
        "state": "x",
        "questions": {"q": {"type": "score", "instructions": "?", "criteria": ["NaN", "Infinity", 1.5]}},
    }
    r = httpx.post(f"{server}/v1/systemone", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["answers"]["q"]["legend"] == {"0": "NaN", "1": "Infinity", "2": 1.5}


def test_the_remote_client_refuses_nan_in_a_state_before_sending(server: str) -> None:
    from clef_agents.serve import RemoteDecisionModel

    remote = RemoteDecisionModel(base_url=server)
    with pytest.raises(wire.InvalidRequestError, match="state.score: NaN is not a JSON number"):
        remote.invoke({"state": {"score": float("nan")}, "questions": {"q": Noul(instructions="?")}})


# --------------------------------------------------------------------------- 3. deep nesting


@pytest.mark.parametrize("depth", [65, 600, 700, 989])
@pytest.mark.parametrize("field", ["state", "instructions", "extra"])
def test_deep_nesting_gets_422_never_500(server: str, depth: int, field: str) -> None:
    nested = "[" * depth + "]" * depth
    raw = {
        "state": '{"state": %s, "questions": {"q": {"type": "noul"}}}' % nested,
        "instructions": '{"state": "x", "questions": {"q": {"type": "noul", "instructions": %s}}}' % nested,
        "extra": '{"state": "x", "x_deep": %s, "questions": {"q": {"type": "noul"}}}' % nested,
    }[field]
    r = post_raw(server, raw)
    assert r.status_code == 422, r.text[:300]
    assert r.json()["detail"][0]["msg"]


def test_nesting_up_to_the_limit_is_answered(server: str) -> None:
    nested: Any = "deep"
    for _ in range(wire.MAX_DEPTH):
        nested = [nested]
    assert httpx.post(f"{server}/v1/systemone", json={"state": nested, "questions": {"q": NOUL}}).status_code == 200


def test_model_invoke_with_a_deep_state_raises_a_clear_error() -> None:
    state: Any = "x"
    for _ in range(700):
        state = {"k": state}
    with pytest.raises(wire.InvalidRequestError, match="nested deeper than 64 levels"):
        FakeDecisionModel().invoke({"state": state, "questions": {"q": Noul(instructions="?")}})


# --------------------------------------------------------------------------- 4. keep-alive after errors


class RawConnection:
    """One keep-alive HTTP/1.1 connection driven by hand, to see exactly what the server does with it."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    def read(self) -> tuple[int, dict[str, str], bytes]:
        """One response: (status, lower-cased headers, body); ``(0, {}, b"")`` if the connection closed first."""
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return 0, {}, b""
            self.buffer += chunk
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in header_lines)}
        size = int(headers.get("content-length", "0"))
        while len(self.buffer) < size:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buffer += chunk
        body, self.buffer = self.buffer[:size], self.buffer[size:]
        return int(status_line.split()[1]), headers, body

    def closed_by_server(self) -> bool:
        self.sock.settimeout(2)
        try:
            return self.sock.recv(1) == b""
        except (TimeoutError, socket.timeout):
            return False
        except ConnectionResetError:
            return True


GOOD = json.dumps(good()).encode()
JSON = {"Content-Type": "application/json"}


def _error_requests() -> dict[str, tuple[str, str, bytes, dict[str, str]]]:
    return {
        "422 bad json": ("POST", "/v1/systemone", b'{"state": ', JSON),
        "422 surrogate": ("POST", "/v1/systemone", SURROGATE_BODIES["question id"][0].encode(), JSON),
        "415 text/plain": ("POST", "/v1/systemone", GOOD, {"Content-Type": "text/plain"}),
        "404 unknown model": ("POST", "/v1/systemone", json.dumps({**good(), "model": "nope"}).encode(), JSON),
        "404 route": ("GET", "/nowhere", b"", {}),
        "405 method": ("GET", "/v1/systemone", b"", {}),
        "413 too big": ("POST", "/v1/systemone", json.dumps(good("x" * 5000)).encode(), JSON),
        "500 model failed": ("POST", "/v1/systemone", json.dumps(good("boom")).encode(), JSON),
        "500 unhandled": ("GET", "/v1/stats", b"", {}),
    }


def _failing_answers(state: Any, questions: Any) -> dict[str, Any]:
    if state == "boom":
        raise RuntimeError("model exploded")
    return {}


def _broken_stats() -> dict[str, Any]:
    raise RuntimeError("stats exploded")


@pytest.fixture
def fragile_server() -> Iterator[str]:
    settings = ServerSettings(max_wait_ms=1, max_body_bytes=4096)
    app = create_app(FakeDecisionModel(answer_fn=_failing_answers), settings=settings, stats=_broken_stats)
    with serve_in_thread(app) as url:
        yield url


@pytest.mark.parametrize("kind", sorted(_error_requests()))
def test_after_any_error_the_connection_is_healthy_or_closed_with_connection_close(
    fragile_server: str, kind: str
) -> None:
    method, path, body, headers = _error_requests()[kind]
    conn = RawConnection(fragile_server)
    try:
        conn.send(method, path, body, headers)
        status, response_headers, payload = conn.read()
        assert status == int(kind.split()[0]), payload
        assert json.loads(payload)["detail"]
        if response_headers.get("connection", "").lower() == "close":
            assert conn.closed_by_server()
            return
        conn.send("POST", "/v1/systemone", GOOD, JSON)  # the next good request on the same connection
        status, _, payload = conn.read()
        assert status == 200, f"after {kind} the kept-alive connection failed: {status} {payload!r}"
    finally:
        conn.close()


def _slow_for_sleepy(state: Any, questions: Any) -> dict[str, Any]:
    if state == "sleepy":
        wait_until_abandoned()  # runs until it has timed out: a 504 on any machine, and the worker is free after it
    return {}


@pytest.mark.parametrize("kind", ["401 no key", "401 wrong key", "504 timeout", "503 not ready"])
def test_after_auth_timeout_and_readiness_errors_the_connection_serves_the_next_request(kind: str) -> None:
    key = {"Authorization": "Bearer k"}
    settings = ServerSettings(api_key="k", request_timeout_s=1.0)
    if kind == "503 not ready":
        release = threading.Event()
        app = create_app(loader=lambda: release.wait(10) and FakeDecisionModel(), settings=settings)
    else:
        release = None
        app = create_app(FakeDecisionModel(answer_fn=_slow_for_sleepy), settings=settings)
    headers = {"401 no key": {}, "401 wrong key": {"Authorization": "Bearer nope"}}.get(kind, key)
    body = json.dumps(good("sleepy")).encode() if kind == "504 timeout" else GOOD
    with serve_in_thread(app) as url:
        conn = RawConnection(url)
        try:
            conn.send("POST", "/v1/systemone", body, {**JSON, **headers})
            status, response_headers, payload = conn.read()
            assert status == int(kind.split()[0]) and json.loads(payload)["detail"]
            assert response_headers.get("connection", "keep-alive").lower() != "close"
            if release is not None:
                release.set()
                wait_until_ready(url)
            conn.send("POST", "/v1/systemone", GOOD, {**JSON, **key})
            status, _, payload = conn.read()
            assert status == 200, f"after {kind} the kept-alive connection failed: {status} {payload!r}"
        finally:
            conn.close()


def test_an_unhandled_error_answers_500_with_connection_close_and_the_server_lives_on(fragile_server: str) -> None:
    with httpx.Client(base_url=fragile_server) as client:
        for _ in range(5):
            broken = client.get("/v1/stats")
            assert broken.status_code == 500 and broken.headers["connection"] == "close"
            assert broken.json()["detail"]["error_type"] == "api_error"
            assert client.post("/v1/systemone", json=good()).status_code == 200


# --------------------------------------------------------------------------- 5. limits and timeouts


def _many_questions(n: int) -> bytes:
    return json.dumps(
        {"state": "x", "questions": {str(i): {"type": "noul"} for i in range(n)}}, separators=(",", ":")
    ).encode()


def test_ten_thousand_questions_are_refused_in_under_a_second_without_slowing_others(counting: CountingModel) -> None:
    huge = _many_questions(10_000)
    assert len(huge) < ServerSettings().max_body_bytes  # under the body limit: the question limit refuses it
    with (
        serve_in_thread(create_app(counting, settings=ServerSettings(max_batch_size=1))) as url,
        httpx.Client(base_url=url) as other,
    ):
        baseline = []
        for _ in range(5):
            started = time.perf_counter()
            assert other.post("/v1/systemone", json=good()).status_code == 200
            baseline.append(time.perf_counter() - started)
        results: dict[str, Any] = {}

        def send_huge() -> None:
            started = time.perf_counter()
            results["huge"] = httpx.post(f"{url}/v1/systemone", content=huge, headers=JSON, timeout=30)
            results["huge_s"] = time.perf_counter() - started

        sender = threading.Thread(target=send_huge)
        sender.start()
        during = []
        while sender.is_alive() or len(during) < 5:
            started = time.perf_counter()
            assert other.post("/v1/systemone", json=good()).status_code == 200
            during.append(time.perf_counter() - started)
        sender.join()
        after = other.post("/v1/systemone", json=good())
    refused = results["huge"]
    assert refused.status_code == 422 and locs(refused) == [["body", "questions"]]
    assert "at most 64 questions per request, got 10000" in refused.json()["detail"][0]["msg"]
    assert results["huge_s"] < 1.0
    assert after.status_code == 200
    assert max(during) < max(0.5, 10 * max(baseline)), (baseline, during)
    assert len(counting.seen) == 5 + len(during) + 1  # the huge request never reached the model


@pytest.mark.parametrize(
    "body, loc, message",
    [
        (
            {
                "state": "x",
                "questions": {
                    f"c{j}": {"type": "choice", "instructions": "?", "criteria": {f"o{i}": None for i in range(255)}}
                    for j in range(5)
                },
            },
            ["body", "questions"],
            "at most 1024 options over all questions (a noul counts 2, a score its levels), got 1275",
        ),
        (
            {"state": "x" * 40, "questions": {"q": NOUL}},
            ["body", "state"],
            "at most 32 characters of state text, got 40",
        ),
        (
            {"state": {"k": ["x" * 20, "y" * 20]}, "questions": {"q": NOUL}},
            ["body", "state"],
            "at most 32 characters of state text, got 41",
        ),
    ],
)
def test_work_limits_get_422_naming_the_field(
    counting: CountingModel, body: dict[str, Any], loc: list[Any], message: str
) -> None:
    limits = wire.RequestLimits(max_state_chars=32)
    with serve_in_thread(create_app(counting, settings=ServerSettings(limits=limits))) as url:
        r = httpx.post(f"{url}/v1/systemone", json=body)
        doc = httpx.get(f"{url}/openapi.json").json()
    assert r.status_code == 422 and locs(r) == [loc]
    assert r.json()["detail"][0]["msg"] == message
    assert counting.seen == []
    assert doc["components"]["schemas"]["SystemOneRequest"]["properties"]["state"]["maxLength"] == 32


def test_the_same_limits_hold_in_process() -> None:
    questions = {str(i): Noul(instructions="?") for i in range(65)}
    with pytest.raises(wire.InvalidRequestError, match="at most 64 questions per request, got 65"):
        FakeDecisionModel().invoke({"state": "x", "questions": questions})


def test_a_request_that_timed_out_while_queued_never_reaches_the_model() -> None:
    started, release = threading.Event(), threading.Event()

    def slow(state: Any, questions: Any) -> dict[str, Any]:
        if state == "first":  # holds the worker until the test lets it go, long after both requests timed out
            started.set()
            release.wait(60)
        return {}

    model = CountingModel(answer_fn=slow, seen=[])
    with serve_in_thread(create_app(model, settings=ServerSettings(max_batch_size=1, request_timeout_s=1.0))) as url:

        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                first = asyncio.ensure_future(client.post("/v1/systemone", json=good("first")))
                assert await asyncio.to_thread(started.wait, 30), "the first request never reached the model"
                second = await client.post("/v1/systemone", json=good("second"))  # queued behind the first
                return [await first, second]

        responses = asyncio.run(burst())
        release.set()  # the first call finishes; the second, abandoned in the queue, must not start
        after = httpx.post(f"{url}/v1/systemone", json=good("after"), timeout=30)  # served once the queue is past it
    assert [r.status_code for r in responses] == [504, 504]
    assert after.status_code == 200
    assert model.seen == ["first", "after"]


def test_a_timed_out_request_stops_using_the_worker() -> None:
    calls: list[tuple[str, int]] = []

    def slow_per_question(state: Any, questions: Any) -> dict[str, Any]:
        answered = 0
        for _ in questions:  # "model work" per question, with a checkpoint between
            wire.raise_if_cancelled()
            if state == "heavy":
                wait_until_abandoned()  # each heavy question lasts until the request times out (60 s at most)
            answered += 1
        calls.append((state, answered))
        return {}

    model = FakeDecisionModel(answer_fn=slow_per_question)
    heavy = {"state": "heavy", "questions": {f"q{i}": NOUL for i in range(60)}}  # an hour of work unless stopped
    with serve_in_thread(create_app(model, settings=ServerSettings(max_batch_size=1, request_timeout_s=1.0))) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            timed_out = client.post("/v1/systemone", json=heavy)
            light = client.post("/v1/systemone", json=good("light"))
            stats = client.get("/v1/stats").json()
    assert timed_out.status_code == 504
    assert light.status_code == 200, "the light request waited (past its time limit) behind the abandoned one"
    assert calls == [("light", 1)]  # the heavy call never finished its 60 questions
    assert stats["cancelled_batches"] == 1


@pytest.mark.integration
def test_mini_stops_a_timed_out_request_at_its_next_encoder_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from clef_agents.model import ClefDecisionModel

    mini = ClefDecisionModel.from_pretrained("mini")
    encoder = mini.engine.encoder
    embed = encoder.embed_frozen
    passes = {"direct": 0, "served": 0}

    def held_until_abandoned(texts: list[str], *args: Any, **kwargs: Any) -> Any:
        """The encoder pass, counted per request; the served request's first pass lasts until the server gives up
        on it, so it times out on any machine, however fast or loaded."""
        tag = next((t for t in passes if any(f"subject {t}-" in text for text in texts)), None)
        if tag is not None:
            passes[tag] += 1
        if tag == "served" and passes["served"] == 1:
            assert wait_until_abandoned(), "the server never abandoned the timed-out request"
        return embed(texts, *args, **kwargs)

    monkeypatch.setattr(encoder, "embed_frozen", held_until_abandoned)

    def unseen(tag: str) -> dict[str, Any]:  # 64 questions never asked before: 64 encoder passes
        return {
            f"q{i}": {"type": "noul", "instructions": f"Is this message about subject {tag}-{i}?"} for i in range(64)
        }

    mini.invoke({"state": "my card was declined at the shop", "questions": unseen("direct")})  # also warms the model
    assert passes["direct"] >= 64
    with serve_in_thread(create_app(mini, settings=ServerSettings(max_batch_size=1, request_timeout_s=5.0))) as url:
        with httpx.Client(base_url=url, timeout=60) as client:
            timed_out = client.post(
                "/v1/systemone", json={"state": "my card was declined", "questions": unseen("served")}
            )
            light = client.post("/v1/systemone", json={"state": "site down", "questions": {"q": NOUL}})
            stats = client.get("/v1/stats").json()
    assert timed_out.status_code == 504
    assert light.status_code == 200, "the light request waited behind the abandoned one"
    assert stats["cancelled_batches"] == 1
    assert passes["served"] == 1, (
        f"the timed-out request went on for {passes['served']} of its {passes['direct']} passes"
    )


# --------------------------------------------------------------------------- 6. exposure


def _serve_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    import os

    environ = {k: v for k, v in os.environ.items() if k != "CLEF_API_KEY"}
    return subprocess.Popen(
        [sys.executable, "-m", "clef_agents.cli", "serve", "--model", "fake", *args],
        env={**environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_non_loopback_host_without_a_key_refuses_to_start() -> None:
    proc = _serve_cli("--host", "0.0.0.0", "--port", str(free_port()))
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # it started serving: the check is missing
        proc.kill()
        output, _ = proc.communicate()
    assert proc.returncode == 2
    assert "--host 0.0.0.0" in output and "--api-key" in output and "--allow-unauthenticated" in output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    "extra, env", [(["--allow-unauthenticated"], {}), ([], {"CLEF_API_KEY": "k"}), (["--api-key", "k"], {})]
)
def test_a_non_loopback_host_starts_with_a_key_or_the_explicit_flag(extra: list[str], env: dict[str, str]) -> None:
    port = free_port("0.0.0.0")
    proc = _serve_cli("--host", "0.0.0.0", "--port", str(port), *extra, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.1)
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=10)
    if "--allow-unauthenticated" in extra:
        assert "without an API key" in output


# --------------------------------------------------------------------------- 7. schema, media type, slow bodies


@pytest.mark.parametrize(
    "body",
    [
        {"state": "x", "questions": {"": {"type": "noul", "instructions": "?"}}},
        {"state": "x", "questions": {"q": {"type": "score", "instructions": "?", "criteria": [None, "b"]}}},
        {"state": "x", "questions": {"q": {"type": "choice", "instructions": "?", "criteria": {"a": None}}}},
        {"state": "x", "questions": {"q": {"type": "choice", "instructions": "?", "criteria": {" ": None, "b": None}}}},
        {
            "state": "x",
            "questions": {"q": {"type": "score", "instructions": "?", "criteria": [str(i) for i in range(11)]}},
        },
        {"state": "x", "questions": {str(i): {"type": "noul"} for i in range(65)}},
        {"state": "x", "questions": {"q": {"instructions": "no type"}}},
    ],
)
def test_the_openapi_schema_refuses_what_the_server_refuses(server: str, body: dict[str, Any]) -> None:
    doc = httpx.get(f"{server}/openapi.json").json()
    schema = {**doc["components"]["schemas"]["SystemOneRequest"], "components": doc["components"]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, schema, cls=jsonschema.Draft202012Validator)
    assert httpx.post(f"{server}/v1/systemone", json=body).status_code == 422


def test_the_openapi_schema_accepts_what_the_server_answers(server: str) -> None:
    doc = httpx.get(f"{server}/openapi.json").json()
    schema = {**doc["components"]["schemas"]["SystemOneRequest"], "components": doc["components"]}
    body = {
        "state": {"ticket": "refund please"},
        "questions": {
            " ": {"type": "noul"},
            "team": {"type": "choice", "instructions": "?", "criteria": {"billing": None, "tech": "bugs"}},
            "anger": {"type": "score", "instructions": "?", "criteria": ["calm", {"level": 1}]},
        },
    }
    jsonschema.validate(body, schema, cls=jsonschema.Draft202012Validator)
    assert httpx.post(f"{server}/v1/systemone", json=body).status_code == 200


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]
)
def test_a_body_not_declared_json_gets_415(server: str, counting: CountingModel, content_type: str) -> None:
    r = post_raw(server, GOOD, content_type)
    assert r.status_code == 415 and r.json()["detail"]["error_type"] == "unsupported_media_type_error"
    assert "content-type" in r.json()["detail"]["message"]
    assert counting.seen == []


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "application/vnd.api+json"]
)
def test_json_media_types_are_accepted(server: str, content_type: str) -> None:
    assert post_raw(server, GOOD, content_type).status_code == 200


def test_a_body_shorter_than_its_content_length_gets_408_and_the_connection_closes() -> None:
    with serve_in_thread(create_app(FakeDecisionModel(), settings=ServerSettings(body_timeout_s=0.5))) as url:
        conn = RawConnection(url)
        try:
            head = f"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(GOOD) + 50}\r\n\r\n"
            started = time.perf_counter()  # before sending: the server's body timer cannot start earlier
            conn.sock.sendall(head.encode() + GOOD)
            status, headers, payload = conn.read()
            waited = time.perf_counter() - started
            assert status == 408 and headers.get("connection") == "close"
            assert json.loads(payload)["detail"]["error_type"] == "request_timeout_error"
            assert 0.4 < waited < 5
            assert conn.closed_by_server()
        finally:
            conn.close()
        assert httpx.post(f"{url}/v1/systemone", json=good()).status_code == 200
