"""Smoke run of the benchmark harness (bench/compare) on 3 requests with FakeDecisionModel.

Benchmarks are not part of CI; this only proves the harness, metrics and report still fit together.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.baselines.data import to_item  # noqa: E402
from bench.baselines.methods import DecisionModelMethod  # noqa: E402
from bench.compare.harness import compare, scaling  # noqa: E402
from bench.compare.report import render  # noqa: E402
from clef_agents.testing import FakeDecisionModel  # noqa: E402
from clef_agents.train.metrics import expected_calibration_error  # noqa: E402

TEAM = {
    "type": "choice",
    "instructions": "Which team?",
    "criteria": {"billing": "payments", "tech": "bugs", "sales": "buying"},
}
RECORDS = [
    {"state": "I was charged twice", "questions": {"team": TEAM}, "labels": {"team": "billing"}},
    {"state": "the app crashes on login", "questions": {"team": TEAM}, "labels": {"team": "tech"}},
    {"state": "how much is the pro plan?", "questions": {"team": TEAM}, "labels": {"team": "billing"}},
]


def _fake_method() -> DecisionModelMethod:
    answers = {
        "I was charged twice": "billing",
        "the app crashes on login": "tech",
        "how much is the pro plan?": "sales",
    }
    model = FakeDecisionModel(answer_fn=lambda state, questions: {"team": answers[state]}, confidence=0.9)
    return DecisionModelMethod(model, title="fake")


def test_compare_scores_every_request_with_accuracy_and_ece() -> None:
    items = {"toy": [to_item(r, "toy") for r in RECORDS]}
    result = compare(items, [_fake_method()], n_shared=3)

    entry = result["per_dataset"]["toy"]["methods"]["clef"]
    assert entry["all"]["requests"] == 3
    assert entry["all"]["accuracy"] == pytest.approx(2 / 3)
    assert entry["all"]["ece"] == pytest.approx(abs(0.9 - 2 / 3))
    assert entry["all"]["latency"]["p95_ms"] >= entry["all"]["latency"]["p50_ms"] > 0
    assert entry["throughput_rps"] > 0


def test_scaling_and_report_render_from_a_result() -> None:
    method = _fake_method()
    sweeps = {"options": [(3, {"state": "I was charged twice", "questions": {"team": TEAM}})]}
    items = {"toy": [to_item(r, "toy") for r in RECORDS]}
    result = compare(items, [method], n_shared=3)
    result["scaling"] = scaling([method], sweeps, reps=1)
    result["run"] = {
        "command": "smoke",
        "wall_seconds": 0.1,
        "machine": "test",
        "finished": "now",
        "records": "inline",
        "seed": 0,
        "n_per_set": 3,
        "n_shared_per_set": 3,
        "heavy_methods": [],
        "model": {"description": "fake"},
    }

    page = render(result, None)

    assert "Decision model: `fake`." in page
    assert "| fake | 0.667 |" in page
    assert result["scaling"]["options"]["clef"][0]["median_ms"] > 0


def test_ece_uses_equal_width_bins() -> None:
    assert expected_calibration_error([0.95, 0.95, 0.55, 0.55], [True, True, True, False]) == pytest.approx(
        0.5 * 0.05 + 0.5 * 0.05
    )


def test_gpu_check_page_renders_every_set_from_the_committed_result(tmp_path: Path) -> None:
    import json

    from bench.gpu import check

    page = tmp_path / "results.md"
    check.render(check.HERE / "results.json", page)
    text = page.read_text()
    result = json.loads((check.HERE / "results.json").read_text())
    for name in result["agreement"]:
        assert f"| {name} | {check.PER_SET} |" in text
    banking = result["evaluation"]["sets"]["banking77"]["accuracy"]
    assert f"| banking77 | 3080 | {banking['gpu']:.2%} | {banking['cpu']:.2%} |" in text
    assert text.count("× |") == len(result["latency_cuda"]["cases"]) + len(result["latency_cuda"]["throughput"])
