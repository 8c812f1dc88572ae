"""bench/precise/noul_adapter.py: the rule's verdict on probe rows, and adopted settings written beside the
adapter (synthetic margins; no LM is read)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.precise.noul_adapter import report, verdict, write_settings
from clef_agents.model.precise import SETTINGS_FILE, LMSettings


def probe_rows(adapter_reads: bool, seed: int = 0) -> list[dict]:
    """Probe rows on three sets. The shipped margin inverts on negated forms (it reads the concept, not the
    wording); the adapter's margin follows the gold answer when ``adapter_reads``, else it is noise."""
    rng = random.Random(seed)
    rows = []
    for n in range(180):
        negated = n % 3 == 0
        concept = rng.random() < 0.5
        yes = int(concept != negated)
        raw = (1.0 if concept else -1.0) + rng.gauss(0, 1)
        adapter = (1.5 if yes else -1.5) + rng.gauss(0, 1) if adapter_reads else rng.gauss(0, 1)
        rows.append({"adapter": adapter, "raw": raw, "prior": rng.gauss(0, 0.1), "yes": yes,
                     "dataset": ("a", "b", "c")[n % 3 if not negated else (n // 3) % 3], "form": "own_negated" if negated else "own"})
    return rows


def test_an_adapter_that_reads_the_wording_is_adopted_and_the_shipped_margin_inverts_on_negations():
    result = verdict(probe_rows(adapter_reads=True))
    shipped, adapter = result["table"]["shipped (raw − 0.5 prior)"], result["table"]["adapter (raw)"]
    assert shipped["negated"] < 0.3 and adapter["negated"] > 0.8
    assert adapter["mean"] > shipped["mean"] + 0.03
    assert result["adopted"] and result["negated_items"] == 60
    assert "**yes**" in report({**result, "command": "c", "items": 180, "seconds": 1})


def test_an_adapter_that_reads_nothing_is_not_adopted():
    assert not verdict(probe_rows(adapter_reads=False))["adopted"]


def test_adopted_settings_keep_shipped_choices_and_name_the_adapter_beside_them(tmp_path):
    adapter = tmp_path / "final"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    written = Path(write_settings(tmp_path / "precise_adapter", adapter, probe_rows(adapter_reads=True)))
    assert written.name == SETTINGS_FILE
    settings = LMSettings.model_validate_json(written.read_text())
    assert settings.noul_adapter == "noul_adapter" and "noul" not in settings.prior_correction
    assert settings.calibration.noul_a > 0 and settings.calibration.fitted_on["nouls"] == 180
    assert settings.answer == "name" and settings.prior_correction.get("choice") == 0.75
    assert (written.parent / "noul_adapter" / "adapter_model.safetensors").read_bytes() == b"weights"
