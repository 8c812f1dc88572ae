"""bench/latency/lm.py on a tiny random causal LM: the report's cases, baselines and checks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.latency.lm import main
from tests.tiny_models import tiny_causal_lm


def test_the_lm_latency_bench_times_the_tier_beside_its_floors(tmp_path):
    folder = tiny_causal_lm(tmp_path / "lm")
    out = tmp_path / "out"
    assert (
        main(
            [
                "--lm",
                str(folder),
                "--reps",
                "2",
                "--warmup",
                "0",
                "--threads",
                "1",
                "--cases",
                "a_one_noul,f_choice_2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads((out / "lm_lm.json").read_text())
    assert set(result["cases"]) == {"a_one_noul", "f_choice_2"}
    for case in result["cases"].values():
        assert 0 < case["bare_tokens"] <= case["tokens_read"]
        assert case["model"]["n"] == case["model_state_cached"]["n"] == case["bare"]["n"] == case["naive"]["n"] == 2
        assert case["naive_passes"] >= 1 and case["p50_over_bare"] > 0
    assert result["targets"]["g_over_f"] is None
    assert "not run" in (out / "lm_lm.md").read_text()


def test_an_unknown_case_is_refused_with_the_known_ones(tmp_path, capsys):
    folder = tiny_causal_lm(tmp_path / "lm")
    with pytest.raises(SystemExit):
        main(["--lm", str(folder), "--cases", "z_nothing", "--out", str(tmp_path)])
    assert "a_one_noul" in capsys.readouterr().err
