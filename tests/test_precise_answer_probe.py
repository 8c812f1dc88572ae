"""bench/precise/answer_probe.py: the yes/no probe chosen on training sources, judged on the reader probe, written
only when adopted (synthetic hidden states; no LM is read)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.precise.answer_probe import LAYERS, fit
from clef_agents.model.noul_probe import NoulProbe
from clef_agents.model.precise import LMSettings


def states_file(path: Path, informative_layer: int | None, seed: int = 0) -> Path:
    """Features as ``answer_probe.py features`` writes them. The answer is the sign of one feature of
    ``informative_layer``, and the margins are noise; or (None) the states say nothing and the margin carries
    the answer."""
    generator = torch.Generator().manual_seed(seed)

    def part(n: int, sets: list[str]) -> dict:
        features = torch.randn(n, len(LAYERS), 16, generator=generator)
        signal = features[:, LAYERS.index(informative_layer), 0] if informative_layer else torch.randn(n, generator=generator)
        yes = (signal + 0.3 * torch.randn(n, generator=generator) > 0).long().tolist()
        margin = torch.randn(n, generator=generator) if informative_layer else signal
        return {"features": features.half(), "margin": margin.tolist(),
                "prior": torch.randn(n, generator=generator).tolist(), "yes": yes,
                "meta": [{"dataset": sets[i % len(sets)], "form": "own_negated" if i % 3 == 0 else "own"} for i in range(n)]}

    torch.save({"layers": list(LAYERS), "train": part(160, ["a", "b", "written_questions"]), "probe": part(80, ["p", "q"])}, path)
    return path


def run_fit(tmp_path: Path, features: Path) -> dict:
    args = argparse.Namespace(features=features, out=tmp_path / "report", write=tmp_path / "written", threads=1)
    fit(args)
    return json.loads((tmp_path / "report.json").read_text())


def test_a_probe_that_reads_the_answer_is_adopted_and_written_beside_precise_s_settings(tmp_path):
    result = run_fit(tmp_path, states_file(tmp_path / "f.pt", informative_layer=24))
    assert 24 in result["chosen"]["layers"]
    assert result["reader_probe_mean"]["probe"] > 0.85 > result["reader_probe_mean"]["shipped margin (raw - 0.5 prior)"]
    assert result["adopted"]
    settings = LMSettings.model_validate_json((tmp_path / "written" / "clef_lm.json").read_text())
    assert settings.noul_probe == "noul_probe.safetensors" and "noul" not in settings.prior_correction
    assert settings.calibration.fitted_on["nouls"] == 80 and settings.answer == "name"
    assert NoulProbe.load(tmp_path / "written" / settings.noul_probe).layers == result["chosen"]["layers"]
    assert "Adopted (probe ≥ shipped + 0.02): **yes**" in (tmp_path / "report.md").read_text()


def test_a_probe_that_reads_nothing_is_not_adopted_and_nothing_is_written(tmp_path):
    result = run_fit(tmp_path, states_file(tmp_path / "f.pt", informative_layer=None))
    assert result["reader_probe_mean"]["probe"] < 0.7 < result["reader_probe_mean"]["raw margin"]
    assert not result["adopted"]
    assert not (tmp_path / "written").exists()
    assert set(result["loso"]) == {f"{layers} {l2}" for layers in
                                   [(28,), (20,), (24,), (20, 24, 28), (14, 20, 24, 28), (8, 14, 20, 24, 28)]
                                   for l2 in (1e-3, 1e-2, 1e-1, 1.0)}
