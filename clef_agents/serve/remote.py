"""``RemoteDecisionModel``: a ``BaseDecisionModel`` that asks a System One server over HTTP.

It works against ``clef-agents serve`` and any other System One server (base URL + key). Requests
are validated locally by ``clef_agents.wire`` first (the same rules the server applies), sent with
pooled sync or async httpx clients, and retried with exponential backoff on connection errors and
5xx answers only. A 422 comes back as ``wire.InvalidRequestError`` with the server's ``detail[]``;
any other 4xx as ``SystemOneHTTPError`` carrying the server's ``detail``.

Example:
    >>> import httpx
    >>> from langchain_core.decisions import Noul
    >>> def handler(request):
    ...     return httpx.Response(200, json={"model": "m", "answers": {"q": {"type": "noul", "noul": 0.9}}, "usage": {}})
    >>> remote = RemoteDecisionModel(base_url="http://sys1.test", transport=httpx.MockTransport(handler))
    >>> remote.invoke({"state": "site down", "questions": {"q": Noul(instructions="Urgent?")}}).nouls["q"].noul
    0.9
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from typing import Any

import httpx
from langchain_core.decisions import BaseDecisionModel, ClassifierResponse, Question, State
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr

from clef_agents import wire

SYSTEMONE_PATH = "/v1/systemone"
RETRYABLE_ERRORS = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)
"""Connection failures worth retrying. A read timeout is not: the server may still be working."""


class SystemOneHTTPError(RuntimeError):
    """A System One server refused a request (a 4xx other than 422) or kept failing (5xx).

    ``status_code``, ``error_type`` and ``message`` come from the server's
    ``{"detail": {"error_type", "message"}}`` body; ``detail`` holds it as sent.

    Example:
        >>> str(SystemOneHTTPError(401, {"error_type": "authentication_error", "message": "invalid API key"}))
        'System One server answered 401 authentication_error: invalid API key'
    """

    def __init__(self, status_code: int, detail: Any, url: str = "") -> None:
        self.status_code = status_code
        self.detail = detail
        self.url = url
        if isinstance(detail, Mapping):
            self.error_type = str(detail.get("error_type", "error"))
            self.message = str(detail.get("message", detail))
        else:
            self.error_type = "error"
            self.message = str(detail)
        super().__init__(f"System One server answered {status_code} {self.error_type}: {self.message}")


class RemoteDecisionModel(BaseDecisionModel):
    """A decision model served by a System One server.

    - ``base_url``: the server root (``/v1/systemone`` is appended).
    - ``api_key``: sent as ``Authorization: Bearer <key>`` when set.
    - ``model``: the model name to ask for (``jev-latest`` by default, which any server accepts).
    - ``timeout``: seconds per HTTP attempt; ``max_retries`` extra attempts on connection
      errors and 5xx, waiting ``backoff_s · 2^attempt`` (with jitter) in between.
    - ``transport`` / ``async_transport``: httpx transports to use instead of the network
      (``httpx.MockTransport`` serves both).

    Example:
        >>> remote = RemoteDecisionModel(base_url="http://127.0.0.1:8000", api_key="secret", max_retries=3)
        >>> remote.endpoint
        'http://127.0.0.1:8000/v1/systemone'
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = "jev-latest"
    base_url: str = "http://127.0.0.1:8000"
    api_key: SecretStr | None = None
    timeout: float = 60.0
    max_retries: int = Field(default=2, ge=0)
    backoff_s: float = Field(default=0.25, ge=0)
    max_connections: int = 32
    transport: Any = None
    async_transport: Any = None
    _client: httpx.Client | None = PrivateAttr(default=None)
    _async_clients: dict[int, httpx.AsyncClient] = PrivateAttr(default_factory=dict)

    @property
    def _provider(self) -> str:
        return "system_one"

    @property
    def endpoint(self) -> str:
        """The full URL requests are posted to."""
        return self.base_url.rstrip("/") + SYSTEMONE_PATH

    # ------------------------------------------------------------------ clients

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.api_key is not None:
            headers["Authorization"] = f"Bearer {self.api_key.get_secret_value()}"
        return headers

    def _limits(self) -> httpx.Limits:
        return httpx.Limits(max_connections=self.max_connections, max_keepalive_connections=self.max_connections)

    @property
    def client(self) -> httpx.Client:
        """The pooled sync client (created on first use)."""
        if self._client is None:
            self._client = httpx.Client(
                headers=self._headers(), timeout=self.timeout, limits=self._limits(), transport=self.transport
            )
        return self._client

    @property
    def async_client(self) -> httpx.AsyncClient:
        """The pooled async client of the running event loop (one per loop: connections belong to a loop)."""
        loop_id = id(asyncio.get_running_loop())
        client = self._async_clients.get(loop_id)
        if client is None:
            transport = self.async_transport or (
                self.transport if isinstance(self.transport, httpx.AsyncBaseTransport) else None
            )
            client = httpx.AsyncClient(
                headers=self._headers(), timeout=self.timeout, limits=self._limits(), transport=transport
            )
            self._async_clients[loop_id] = client
        return client

    def close(self) -> None:
        """Close the sync client (async clients: ``await aclose()``)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        """Close every client this model opened."""
        self.close()
        clients, self._async_clients = list(self._async_clients.values()), {}
        for client in clients:
            try:
                await client.aclose()
            except RuntimeError:  # its event loop is gone; nothing left to release
                pass

    def __enter__(self) -> RemoteDecisionModel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> RemoteDecisionModel:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ classify

    def _body(self, state: State, questions: dict[str, Question]) -> dict[str, Any]:
        wire.check_state(state, finite=True)
        return wire.request_to_wire(state, wire.validate_questions(questions), model=self.model)

    def retry_delay(self, attempt: int) -> float:
        """Seconds to wait before retry ``attempt`` (0-based): ``backoff_s * 2**attempt``, jittered down by up to half.

        Example:
            >>> 0.05 <= RemoteDecisionModel(backoff_s=0.1).retry_delay(0) <= 0.1
            True
        """
        return self.backoff_s * (2**attempt) * (0.5 + random.random() / 2)

    def _classify(self, state: State, questions: dict[str, Question]) -> ClassifierResponse:
        body = self._body(state, questions)
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = self.client.post(self.endpoint, json=body)
            except RETRYABLE_ERRORS:
                if last:
                    raise
                time.sleep(self.retry_delay(attempt))
                continue
            if response.status_code >= 500 and not last:
                time.sleep(self.retry_delay(attempt))
                continue
            return self._parse(response)
        raise AssertionError("unreachable")

    async def _aclassify(self, state: State, questions: dict[str, Question]) -> ClassifierResponse:
        body = self._body(state, questions)
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = await self.async_client.post(self.endpoint, json=body)
            except RETRYABLE_ERRORS:
                if last:
                    raise
                await asyncio.sleep(self.retry_delay(attempt))
                continue
            if response.status_code >= 500 and not last:
                await asyncio.sleep(self.retry_delay(attempt))
                continue
            return self._parse(response)
        raise AssertionError("unreachable")

    def _parse(self, response: httpx.Response) -> wire.DecisionResponse:
        detail = _detail(response)
        if response.status_code == 422 and isinstance(detail, list):
            raise wire.InvalidRequestError([_local_error(e) for e in detail])
        if response.status_code >= 400:
            raise SystemOneHTTPError(response.status_code, detail, str(response.request.url))
        try:
            body = response.json()
        except ValueError:
            raise SystemOneHTTPError(response.status_code, f"the answer is not JSON: {response.text[:200]!r}") from None
        if not isinstance(body, Mapping):
            raise SystemOneHTTPError(response.status_code, f"the answer is not a JSON object: {response.text[:200]!r}")
        return wire.response_from_wire(body)


def _detail(response: httpx.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    return body.get("detail", body) if isinstance(body, Mapping) else body


def _local_error(error: Any) -> dict[str, Any]:
    """A server's 422 entry as an in-process one (``loc`` without the leading ``"body"``)."""
    if not isinstance(error, Mapping):
        return {"loc": [], "msg": str(error), "type": "value_error"}
    loc = list(error.get("loc") or [])
    if loc[:1] == ["body"] and len(loc) > 1:
        loc = loc[1:]
    return {"loc": loc, "msg": str(error.get("msg", "")), "type": str(error.get("type", "value_error"))}
