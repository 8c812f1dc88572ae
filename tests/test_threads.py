"""A loaded decision model runs torch on one thread unless told otherwise (bench/threads/results.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from clef_agents.model.threads import chosen_threads

pytestmark = pytest.mark.integration

PROBE = "import torch\nfrom clef_agents.model import ClefDecisionModel\nClefDecisionModel.from_pretrained('mini')\n" \
        "print(torch.get_num_threads())"


def threads_after_loading(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CLEF_AGENTS_THREADS")}
    done = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-1500:]
    return done.stdout.split()[-1]


def test_loading_mini_sets_one_thread_unless_told_otherwise():
    assert threads_after_loading() == "1"
    assert threads_after_loading(CLEF_AGENTS_THREADS="2") == "2"
    assert threads_after_loading(OMP_NUM_THREADS="2") == "2"


def test_a_bad_thread_setting_says_what_is_allowed():
    with pytest.raises(ValueError, match="CLEF_AGENTS_THREADS must be a positive integer, got '0'"):
        chosen_threads({"CLEF_AGENTS_THREADS": "0"})
    with pytest.raises(ValueError, match="got 'two'"):
        chosen_threads({"CLEF_AGENTS_THREADS": "two"})
