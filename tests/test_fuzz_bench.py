"""Smoke run of the fuzz bench (bench/fuzz) against a real server: its probes, tally and checks fit.

The long run is not part of CI; this proves that every kind of hostile probe gets the status the
bench expects, with a ``detail`` that names the field, on kept-alive connections.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fuzz.malformed import GENERATORS, probes  # noqa: E402
from bench.fuzz.run import Tally, names_the_field, run_malformed  # noqa: E402
from clef_agents.serve.app import create_app  # noqa: E402
from clef_agents.serve.local import serve_in_thread  # noqa: E402
from clef_agents.testing import FakeDecisionModel  # noqa: E402


def test_every_probe_kind_gets_its_expected_status_and_a_named_field() -> None:
    tally = Tally()
    with serve_in_thread(create_app(FakeDecisionModel())) as url:
        run_malformed(url, n=3 * len(GENERATORS), seed=5, connections=2, tally=tally)
        assert httpx.get(f"{url}/healthz").status_code == 200
    summary = tally.summary()
    assert summary["requests"] == 3 * len(GENERATORS)
    assert set(summary["by_category"]) == {
        "valid",
        "surrogate",
        "nan-infinity",
        "deep-nesting",
        "over-limits",
        "broken-json",
        "wrong-shape",
        "wrong-request",
    }
    assert summary["responses_5xx"] == summary["dropped_connections"] == 0
    assert summary["4xx_without_field"] == 0, summary["4xx_without_field_examples"]
    assert summary["unexpected_status"] == 0, summary["unexpected_status_examples"]


def test_a_detail_must_name_the_field() -> None:
    assert names_the_field(422, b'{"detail": [{"loc": ["body", "state"], "msg": "field required", "type": "missing"}]}')
    assert not names_the_field(422, b'{"detail": [{"loc": [], "msg": "bad", "type": "x"}]}')
    assert names_the_field(415, b'{"detail": {"error_type": "e", "message": "header content-type: got text/plain"}}')
    assert not names_the_field(400, b'{"detail": {"error_type": "e", "message": "bad request"}}')
    assert not names_the_field(400, b"Bad Request")
    assert [p.category for p in probes(8, seed=1)].count("valid") == 1
