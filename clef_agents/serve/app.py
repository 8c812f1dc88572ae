"""The System One server: a Starlette app answering ``POST /v1/systemone`` with any decision model.

Every request is validated by ``clef_agents.wire`` before it reaches the model (a bad request gets
a 4xx and never joins a batch); valid ones are micro-batched into one ``model.batch`` call
(``MicroBatcher``) or handed to an injected ``answer`` coroutine (the Ray Serve deployment uses
that to plug in its own ``@serve.batch`` handler).

Routes: ``POST /v1/systemone``, ``GET /v1/models``, ``GET /healthz`` (the process is up),
``GET /readyz`` (the model is loaded and can be reached), ``GET /v1/stats`` (batching counters),
``GET /openapi.json``.

A model that cannot be reached (a connection error, e.g. a ``RemoteDecisionModel`` whose upstream
is down, or an upstream System One server that says it is not ready) answers 503
``not_ready_error`` saying so, and ``/readyz`` says not ready until a request is answered again;
meanwhile each ``/readyz`` sends the model one small probe request to find out.

Example:
    >>> from clef_agents.testing import FakeDecisionModel
    >>> from starlette.testclient import TestClient
    >>> app = create_app(FakeDecisionModel(answers={"q": 0.7}))
    >>> with TestClient(app) as client:
    ...     client.post("/v1/systemone", json={"state": "hi", "questions": {"q": {"type": "noul"}}}).json()["answers"]
    {'q': {'type': 'noul', 'noul': 0.7}}
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import date
from typing import Any

from langchain_core.decisions import BaseDecisionModel, ClassifierRequest, ClassifierResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from clef_agents import wire
from clef_agents.serve.batcher import MicroBatcher, QueueFullError
from clef_agents.serve.openapi import openapi_document
from clef_agents.serve.remote import RETRYABLE_ERRORS, SystemOneHTTPError

logger = logging.getLogger("clef_agents.serve")
access_logger = logging.getLogger("clef_agents.serve.access")

AnswerFunction = Callable[[ClassifierRequest], Awaitable[ClassifierResponse]]
ModelLoader = Callable[[], BaseDecisionModel]
StatsFunction = Callable[[], dict[str, Any]]

DEFAULT_ALIASES = ("jev-latest",)
SERVER_LIMITS = wire.RequestLimits(max_state_chars=256 * 1024)
"""A server's default request limits: those of ``clef_agents.wire``, but a state of at most 262,144
characters, so that a state over the limit still fits the 512 KiB body limit and gets a 422 that
names it (rather than a 413 for the whole body)."""


@dataclass
class ServerSettings:
    """Limits and names of one server.

    - ``served_name``: the name in ``/v1/models`` and in responses (default: the model's ``model``).
    - ``aliases``: other names a request may ask for ("jev-latest" is what SDKs send by default).
    - ``max_batch_size`` / ``max_wait_ms``: micro-batching (``max_batch_size=1`` turns it off).
    - ``request_timeout_s``: a request not answered in time gets 504.
    - ``max_body_bytes``: larger bodies get 413 (512 KiB by default: a 1 MB state is refused).
    - ``api_key``: when set, ``/v1/*`` needs ``Authorization: Bearer <key>`` (401 otherwise).
    - ``max_queue``: requests allowed to wait for the model; beyond it 503 with ``Retry-After``.
    - ``limits``: work one request may ask for (``wire.RequestLimits``: questions, options in all,
      state characters, nesting depth); beyond them 422 naming the field.
    - ``body_timeout_s``: a body not fully received in time (e.g. shorter than its
      ``Content-Length``) gets 408 and the connection is closed.

    Example:
        >>> ServerSettings(max_batch_size=1).max_batch_size
        1
    """

    served_name: str | None = None
    aliases: tuple[str, ...] = DEFAULT_ALIASES
    description: str = "clef_agents local decision model (one prefill pass, no generation)"
    max_batch_size: int = 16
    max_wait_ms: float = 5.0
    request_timeout_s: float = 30.0
    max_body_bytes: int = 512 * 1024
    api_key: str | None = None
    max_queue: int = 1024
    limits: wire.RequestLimits = SERVER_LIMITS
    body_timeout_s: float = 10.0


class _ServerState:
    """What the routes share: the model once loaded, the batcher, the settings."""

    def __init__(self, settings: ServerSettings, answer: AnswerFunction | None, stats: StatsFunction | None) -> None:
        self.settings = settings
        self.stats_fn = stats
        self.model: BaseDecisionModel | None = None
        self.batcher: MicroBatcher | None = None
        self.answer_fn = answer
        self.load_error: str | None = None
        self.loaded_on: str | None = None
        self.unreachable: str | None = None
        """The kind of error (e.g. ``ConnectError``) of the last answer that found the model out of reach;
        ``None`` once one is answered."""
        self.probing = asyncio.Lock()

    @property
    def ready(self) -> bool:
        return self.model is not None and (self.answer_fn is not None or self.batcher is not None)

    @property
    def served_name(self) -> str:
        if self.settings.served_name:
            return self.settings.served_name
        return self.model.model if self.model is not None else "clef"

    async def attach(self, model: BaseDecisionModel) -> None:
        if self.answer_fn is None:
            self.batcher = MicroBatcher(
                model,
                max_batch_size=self.settings.max_batch_size,
                max_wait_s=self.settings.max_wait_ms / 1000,
                max_queue=self.settings.max_queue,
            )
            await self.batcher.start()
        self.model = model
        self.loaded_on = date.today().isoformat()
        logger.info("model %r ready (served as %r)", model.model, self.served_name)

    async def answer(self, request: ClassifierRequest) -> ClassifierResponse:
        if self.answer_fn is not None:
            return await self.answer_fn(request)
        assert self.batcher is not None
        return await self.batcher.submit_nowait(request)


# --------------------------------------------------------------------------- error bodies


def error_response(
    status: int, error_type: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """A non-validation error in the System One shape: ``{"detail": {"error_type", "message"}}``.

    Example:
        >>> error_response(404, "not_found_error", "no model 'x'").status_code
        404
    """
    return JSONResponse(
        {"detail": {"error_type": error_type, "message": message}}, status_code=status, headers=dict(headers or {})
    )


def validation_response(error: wire.InvalidRequestError) -> JSONResponse:
    """A 422 whose ``detail[]`` is FastAPI-shaped: each ``loc`` starts with ``"body"``.

    Example:
        >>> validation_response(wire.InvalidRequestError([{"loc": ["state"], "msg": "field required", "type": "missing"}])).body
        b'{"detail":[{"loc":["body","state"],"msg":"field required","type":"missing"}]}'
    """
    detail = [
        _printable_error({**e, "loc": e["loc"] if e["loc"][:1] == ["body"] else ["body", *e["loc"]]})
        for e in error.errors
    ]
    return JSONResponse({"detail": detail}, status_code=422)


def _printable_error(error: dict[str, Any]) -> dict[str, Any]:
    loc = [wire.printable(part) if isinstance(part, str) else part for part in error.get("loc", [])]
    return {**error, "loc": loc, "msg": wire.printable(str(error.get("msg", "")))}


CLOSE = {"Connection": "close"}
"""Sent with errors after which the rest of the request cannot be trusted (body cut short, too big)."""

JSON_MEDIA_TYPES = ("application/json",)


class _BodyTooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole body, or ``_BodyTooLarge``; ``TimeoutError`` if it does not arrive within ``timeout_s``."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _BodyTooLarge(int(declared))

    async def collect() -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _BodyTooLarge(size)
            chunks.append(chunk)
        return b"".join(chunks)

    return await asyncio.wait_for(collect(), timeout_s)


def _media_type_failure(request: Request) -> JSONResponse | None:
    """415 unless the body is declared JSON (``application/json`` or ``application/*+json``); no header is accepted."""
    header = request.headers.get("content-type")
    if header is None:
        return None
    media = header.split(";", 1)[0].strip().lower()
    if media in JSON_MEDIA_TYPES or (media.startswith("application/") and media.endswith("+json")):
        return None
    return error_response(
        415,
        "unsupported_media_type_error",
        f"header content-type: got {wire.printable(media)!r}; allowed: application/json",
    )


class _RepeatedKeys(dict):  # type: ignore[type-arg]
    """A decoded JSON object in which some keys appeared more than once (``repeated``, in order)."""

    repeated: list[str]


def _decode_json(raw: bytes) -> Any:
    """The body as JSON; one that is not UTF-8, not JSON, or repeats a key within an object is an
    ``InvalidRequestError`` (a repeated key would silently keep its last value only)."""
    marked: list[_RepeatedKeys] = []

    def unrepeated(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        repeated = _RepeatedKeys(obj)
        repeated.repeated = [key for key, count in Counter(key for key, _ in pairs).items() if count > 1]
        marked.append(repeated)
        return repeated

    try:
        decoded = json.loads(raw.decode("utf-8"), object_pairs_hook=unrepeated)
    except UnicodeDecodeError as exc:
        raise wire.InvalidRequestError(
            [{"loc": ["body"], "msg": f"the body is not UTF-8: {exc.reason}", "type": "json_invalid"}]
        ) from None
    except json.JSONDecodeError as exc:
        raise wire.InvalidRequestError(
            [{"loc": ["body", exc.pos], "msg": f"the body is not valid JSON: {exc.msg}", "type": "json_invalid"}]
        ) from None
    except RecursionError:
        raise wire.InvalidRequestError(
            [{"loc": ["body"], "msg": "the body is JSON nested too deeply", "type": "json_invalid"}]
        ) from None
    if marked:
        raise wire.InvalidRequestError(_repeated_key_errors(decoded))
    return decoded


def _repeated_key_errors(decoded: Any) -> list[dict[str, Any]]:
    """One 422 entry per JSON object of the body that repeats a key, with its place in the body."""
    errors: list[dict[str, Any]] = []
    stack: list[tuple[list[Any], Any]] = [(["body"], decoded)]
    while stack:
        loc, value = stack.pop()
        if isinstance(value, _RepeatedKeys):
            keys = ", ".join(repr(key) for key in value.repeated)
            errors.append(
                {
                    "loc": loc,
                    "msg": f"repeated key {keys}: each key may appear once in an object "
                    "(a repeated key would silently keep only its last value)",
                    "type": "duplicate_key",
                }
            )
        if isinstance(value, dict):
            stack.extend(([*loc, key], item) for key, item in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend(([*loc, i], item) for i, item in reversed(list(enumerate(value))))
    return errors


# --------------------------------------------------------------------------- routes


def _state(request: Request) -> _ServerState:
    return request.app.state.server


def _auth_failure(request: Request) -> JSONResponse | None:
    key = _state(request).settings.api_key
    if not key:
        return None
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if not header:
        return error_response(
            401,
            "authentication_error",
            "missing API key: send Authorization: Bearer <key>",
            {"WWW-Authenticate": "Bearer"},
        )
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), key.encode()):
        return error_response(401, "authentication_error", "invalid API key", {"WWW-Authenticate": "Bearer"})
    return None


def _not_ready(server: _ServerState) -> JSONResponse:
    if server.unreachable and server.ready:
        # as for a failed load: the error's text may name hosts and paths; only the log gets it
        message = f"the model cannot be reached ({server.unreachable}); see the server log"
    elif server.load_error:
        # the exception text may hold paths and other internals: only the log gets it
        message = f"the model failed to load ({server.load_error}); see the server log"
    else:
        message = "the model is still loading"
    return error_response(503, "not_ready_error", message, {"Retry-After": "2"})


async def systemone(request: Request) -> Response:
    """``POST /v1/systemone``: validate, queue for the next batch, answer."""
    server = _state(request)
    if (failure := _auth_failure(request)) is not None:
        return failure
    if not server.ready:
        return _not_ready(server)
    if (failure := _media_type_failure(request)) is not None:
        return failure
    settings = server.settings
    try:
        raw = await _read_body(request, settings.max_body_bytes, settings.body_timeout_s)
    except _BodyTooLarge as exc:
        return error_response(
            413,
            "request_too_large",
            f"body: at least {exc.args[0]} bytes; the limit is {settings.max_body_bytes}",
            CLOSE,
        )
    except asyncio.TimeoutError:
        return error_response(
            408,
            "request_timeout_error",
            f"body: not fully received within {settings.body_timeout_s:g} s (shorter than its Content-Length?)",
            CLOSE,
        )
    except ClientDisconnect:
        return error_response(
            400, "invalid_request_error", "body: the client disconnected before sending all of it", CLOSE
        )
    try:
        parsed = wire.parse_request(_decode_json(raw), settings.limits)
    except wire.InvalidRequestError as exc:
        return validation_response(exc)
    if parsed.model is not None and parsed.model not in (server.served_name, *server.settings.aliases):
        allowed = ", ".join([server.served_name, *server.settings.aliases])
        return error_response(404, "not_found_error", f"unknown model {parsed.model!r}; this server serves: {allowed}")
    request.state.questions = len(parsed.questions)
    return await _answer(server, {"state": parsed.state, "questions": parsed.questions})


async def _answer(server: _ServerState, classifier_request: ClassifierRequest) -> Response:
    timeout = server.settings.request_timeout_s
    try:
        response = await asyncio.wait_for(server.answer(classifier_request), timeout)
    except wire.InvalidRequestError as exc:
        return validation_response(exc)
    except QueueFullError as exc:
        return error_response(503, "overloaded_error", f"the server is busy: {exc}", {"Retry-After": "1"})
    except asyncio.TimeoutError:
        return error_response(504, "timeout_error", f"no answer within the request time limit of {timeout:g} s")
    except Exception as exc:  # noqa: BLE001 — logged; the client gets a generic 500 (or a 503 if out of reach)
        if (kind := unreachable_kind(exc)) is not None:
            _mark_unreachable(server, kind, exc)
            return _not_ready(server)
        logger.exception("the model failed on a valid request")
        return error_response(500, "api_error", "the model failed on this request; see the server log")
    if server.unreachable is not None:
        logger.info("the model answers again (it could not be reached: %s)", server.unreachable)
        server.unreachable = None
    try:
        body = wire.response_to_wire(response)
        body["model"] = server.served_name
        return JSONResponse(body)
    except (ValueError, TypeError):  # a model answered something that is not finite JSON text
        logger.exception("the model's answer could not be rendered as JSON")
        return error_response(500, "api_error", "the model's answer could not be rendered; see the server log")


def unreachable_kind(exc: BaseException) -> str | None:
    """The kind of error (its class name) when ``exc`` says the model cannot be reached, else ``None``:
    a connection error (``ConnectionError``, httpx's connection failures) or an upstream System One
    server answering 503 ``not_ready_error``, raised or as the cause of what was raised.

    Example:
        >>> unreachable_kind(RuntimeError("lookup failed")) is None
        True
        >>> try:
        ...     raise RuntimeError("model failed") from ConnectionRefusedError(111, "Connection refused")
        ... except RuntimeError as exc:
        ...     unreachable_kind(exc)
        'ConnectionRefusedError'
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ConnectionError, *RETRYABLE_ERRORS)):
            return type(current).__name__
        if (
            isinstance(current, SystemOneHTTPError)
            and current.status_code == 503
            and current.error_type == "not_ready_error"
        ):
            return "the upstream server is not ready"
        current = current.__cause__ or current.__context__
    return None


def _mark_unreachable(server: _ServerState, kind: str, exc: BaseException) -> None:
    if server.unreachable is None:
        logger.error(
            "the model cannot be reached (%s); /readyz says not ready until it answers again", kind, exc_info=exc
        )
    else:
        logger.warning("the model still cannot be reached (%s: %s)", kind, exc)
    server.unreachable = kind


PROBE_TIMEOUT_S = 5.0
"""The longest ``/readyz`` waits for its probe of a model found out of reach."""


async def _probe(server: _ServerState) -> None:
    """Ask a model found out of reach one small question; clear the mark if it answers (or fails
    on the question itself, which means it was reached)."""
    if server.probing.locked():
        return  # another /readyz is asking already: report what is known
    async with server.probing:
        probe = {
            "state": "",
            "questions": wire.validate_questions(
                {"ready": {"type": "noul", "instructions": "Is this a readiness probe?"}}
            ),
        }
        try:
            await asyncio.wait_for(server.answer(probe), min(PROBE_TIMEOUT_S, server.settings.request_timeout_s))
        except asyncio.TimeoutError:
            return
        except Exception as exc:  # noqa: BLE001 — any other failure came from a model that was reached
            if (kind := unreachable_kind(exc)) is not None:
                _mark_unreachable(server, kind, exc)
                return
        logger.info("the model can be reached again (it could not: %s)", server.unreachable)
        server.unreachable = None


async def list_models(request: Request) -> Response:
    """``GET /v1/models``: the served model and its aliases."""
    server = _state(request)
    if (failure := _auth_failure(request)) is not None:
        return failure
    released = server.loaded_on or date.today().isoformat()
    models = [{"name": server.served_name, "description": server.settings.description, "release_date": released}]
    models += [
        {"name": alias, "description": f"alias of {server.served_name}", "release_date": released}
        for alias in server.settings.aliases
        if alias != server.served_name
    ]
    return JSONResponse({"models": models})


async def healthz(request: Request) -> Response:
    """``GET /healthz``: 200 while the process serves HTTP."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """``GET /readyz``: 200 once the model is loaded and can be reached; 503 before, if loading failed,
    or while the model cannot be reached (each call then probes it once)."""
    server = _state(request)
    if server.ready and server.unreachable is not None:
        await _probe(server)
    if not server.ready or server.unreachable is not None:
        return _not_ready(server)
    return JSONResponse({"status": "ready", "model": server.served_name})


async def stats_route(request: Request) -> Response:
    """``GET /v1/stats``: micro-batching counters (batches, mean size, histogram, queue depth)."""
    server = _state(request)
    if (failure := _auth_failure(request)) is not None:
        return failure
    if server.stats_fn is not None:
        return JSONResponse(server.stats_fn())
    return JSONResponse(server.batcher.stats() if server.batcher is not None else {"batches": 0})


async def openapi(request: Request) -> Response:
    """``GET /openapi.json``: the OpenAPI 3.1 document of this server."""
    settings = _state(request).settings
    return JSONResponse(openapi_document(bearer=bool(settings.api_key), limits=settings.limits))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = {404: "not_found_error", 405: "method_not_allowed_error"}.get(exc.status_code, "invalid_request_error")
    return error_response(exc.status_code, kind, f"{request.method} {request.url.path}: {exc.detail}", exc.headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "api_error", "internal server error; see the server log", CLOSE)


# --------------------------------------------------------------------------- access log


class AccessLogMiddleware:
    """Log one JSON line per HTTP request on ``clef_agents.serve.access`` and set ``X-Request-ID``.

    Fields: ``method``, ``path``, ``status``, ``ms``, ``client``, ``request_id`` and, for answered
    requests, ``questions``. It is also the last guard: an exception that escapes the app never
    reaches the HTTP server (which would drop the connection without ``Connection: close``); the
    client gets a 500 that closes the connection instead, or nothing more if its response was sent.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = dict(scope.get("headers") or [])
        request_id = headers.get(b"x-request-id", b"").decode("latin-1")[:128] or uuid.uuid4().hex
        scope.setdefault("state", {})
        status = 500
        response_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status = message["status"]
                response_started = True
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode("latin-1"))]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:  # noqa: BLE001 — already logged by the app's 500 handler
            if not response_started:
                status = 500
                await _send_last_resort_500(send, request_id)
        finally:
            record = {
                "event": "access",
                "method": scope.get("method"),
                "path": scope.get("path"),
                "status": status,
                "ms": round((time.perf_counter() - started) * 1000, 2),
                "client": (scope.get("client") or ("", 0))[0],
                "request_id": request_id,
            }
            questions = scope["state"].get("questions")
            if questions is not None:
                record["questions"] = questions
            access_logger.info(json.dumps(record))


async def _send_last_resort_500(send: Send, request_id: str) -> None:
    body = json.dumps(
        {"detail": {"error_type": "api_error", "message": "internal server error; see the server log"}}
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        (b"x-request-id", request_id.encode("latin-1")),
    ]
    try:
        await send({"type": "http.response.start", "status": 500, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    except Exception:  # noqa: BLE001 — the connection is gone: nothing left to tell the client
        logger.debug("could not send the last-resort 500", exc_info=True)


# --------------------------------------------------------------------------- app


def create_app(
    model: BaseDecisionModel | None = None,
    *,
    loader: ModelLoader | None = None,
    settings: ServerSettings | None = None,
    answer: AnswerFunction | None = None,
    stats: StatsFunction | None = None,
) -> ASGIApp:
    """Build the ASGI app for a model (or a ``loader`` run in the background at startup).

    ``answer`` replaces the built-in micro-batcher with another coroutine (``request -> response``),
    and ``stats`` the batcher's counters shown at ``/v1/stats``.
    While a ``loader`` runs, ``/readyz`` and ``/v1/systemone`` answer 503.

    Example:
        >>> from clef_agents.testing import FakeDecisionModel
        >>> app = create_app(FakeDecisionModel(), settings=ServerSettings(max_batch_size=8, api_key="k"))
    """
    if (model is None) == (loader is None):
        raise ValueError("pass exactly one of model= or loader=")
    server = _ServerState(settings or ServerSettings(), answer, stats)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        loading: asyncio.Task[None] | None = None
        if model is not None:
            await server.attach(model)
        else:
            loading = asyncio.get_running_loop().create_task(_load_in_background(server, loader))
        try:
            yield
        finally:
            if loading is not None:
                loading.cancel()
            if server.batcher is not None:
                await server.batcher.stop()

    app = Starlette(
        routes=[
            Route("/v1/systemone", systemone, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/stats", stats_route, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
        lifespan=lifespan,
    )
    app.state.server = server
    return AccessLogMiddleware(app)


async def _load_in_background(server: _ServerState, loader: ModelLoader | None) -> None:
    assert loader is not None
    try:
        model = await asyncio.to_thread(loader)
    except Exception as exc:  # noqa: BLE001 — reported by /readyz
        server.load_error = type(exc).__name__
        logger.exception("the model failed to load")
        return
    await server.attach(model)
