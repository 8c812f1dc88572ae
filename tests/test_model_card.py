"""``clef-agents model-card`` (clef_agents.train.model_card): MODEL_CARD.md from the committed results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clef_agents.cli import main
from clef_agents.train import datasets
from clef_agents.train.model_card import (
    GATE_TEST_SETS,
    gate_result_name,
    gate_test_lines,
    gate_test_pooled,
    render,
    status_lines,
)

ROOT = Path(__file__).resolve().parents[1]

try:
    datasets.data_root()
    HAVE_DATA = True
except FileNotFoundError:
    HAVE_DATA = False


@pytest.mark.skipif(not HAVE_DATA, reason="shared data folder not found (set CLEF_AGENTS_DATA)")
def test_the_committed_card_is_what_the_committed_results_render():
    assert render(ROOT) == (ROOT / "MODEL_CARD.md").read_text()


def _gate_result(folder: Path, calls: str, rows: list[tuple[bool, float]]) -> None:
    result = {
        "hold_at": 0.5,
        "all": {"risky": 1, "benign": 1, "recall": 1.0, "benign_held": 0.0, "auc": 1.0},
        "rows": [{"risky": risky, "probability": p} for risky, p in rows],
    }
    (folder / gate_result_name(calls)).write_text(json.dumps(result))


def test_the_gate_test_sets_pool_only_once_each_has_a_result(tmp_path):
    first, second = GATE_TEST_SETS
    _gate_result(tmp_path, first, [(True, 0.9), (False, 0.1)])
    assert gate_test_pooled(tmp_path) is None
    assert len(gate_test_lines(tmp_path)) == 2  # the blank line and the one set measured
    _gate_result(tmp_path, second, [(True, 0.4), (False, 0.6)])
    pooled = gate_test_pooled(tmp_path)
    assert (pooled["risky"], pooled["benign"], pooled["recall"], pooled["benign_held"]) == (2, 2, 0.5, 0.5)
    assert "issue 25's target not met there" in gate_test_lines(tmp_path)[-1]


def _report(accuracy: float) -> dict:
    calibrated = {"n": 1000, "accuracy": accuracy, "ece": 0.01, "coverage_at_99": {"coverage": 0.8}}
    return {"datasets": {"banking77": {"choice": {"calibrated": calibrated}, "records": 1000}}}


def test_status_gives_a_missed_accuracy_target_its_interval():
    lines = status_lines(_report(0.94))
    assert "- At or above the ten-line baseline: banking77 (94.0% vs 93.2%)." in lines
    assert any(
        "missed: banking77 accuracy 94.0% < 94.5% (95 % interval" in line and "n = 1000)" in line for line in lines
    )
    assert lines[-1].startswith("- Fit lane thresholds")
    met = status_lines(_report(0.95))
    assert "- Quality targets met: banking77 accuracy, banking77 coverage_at_99; missed: none." in met
    assert not met[-1].startswith("- Fit lane thresholds")


def test_the_command_renders_a_card_from_whatever_results_are_there(tmp_path, capsys):
    folder = tmp_path / "bench" / "quality" / "results" / "mini"
    folder.mkdir(parents=True)
    report = _report(0.95)
    report["datasets"]["banking77"]["choice"].update(
        {"uncalibrated": {"ece": 0.05}, "head_calibrated": {"accuracy": 0.9}}
    )
    report["datasets"]["banking77"]["choice"]["calibrated"].update({"macro_f1": 0.9, "nll": 0.2, "brier": 0.1})
    (folder / "report.json").write_text(json.dumps(report))
    assert main(["model-card", "--root", str(tmp_path)]) == 0
    card = (tmp_path / "MODEL_CARD.md").read_text()
    assert card.startswith("# Model card: `mini`\n")
    assert "| banking77 | choice | 1000 | 95.0% | 90.0% |" in card
    assert "## Untaught questions" not in card and "## The tool gate's question" not in card
    assert card.endswith("your own labelled decisions (`clef-agents calibrate --max-auto-error ...`).\n")
    assert f"wrote {tmp_path / 'MODEL_CARD.md'}" in capsys.readouterr().out
