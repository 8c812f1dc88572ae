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

from clef_agents.serve.app import ServerSettings, create_app
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
        elapsed_ms = (time.perf_counter() - started) * 1000
        time.sleep(0.05)
    assert r.status_code == 200
    (record,) = [rec for rec in access_records(caplog) if rec["request_id"] == "timed"]
    assert 200 <= record["ms"] <= elapsed_ms, f"logged {record['ms']} ms for a request the client timed at {elapsed_ms:.1f} ms"
