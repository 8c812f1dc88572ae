"""Entry points that own their process (load_model: the CLI, the server, the ready graphs; the training commands)
run torch on one thread unless told otherwise (bench/threads/results.md); a model loaded directly leaves the
caller's thread count alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from clef_agents.model.threads import chosen_threads

pytestmark = pytest.mark.integration

LOAD_MODEL = "import torch, clef_agents\nclef_agents.load_model('mini')\nprint(torch.get_num_threads())"
FROM_PRETRAINED = (
    "import torch\ntorch.set_num_threads(2)\nfrom clef_agents.model import ClefDecisionModel\n"
    "ClefDecisionModel.from_pretrained('mini')\nprint(torch.get_num_threads())"
)
COMMAND = (
    "import torch\nfrom clef_agents.model.threads import command_threads\n"
    "print(command_threads(None), command_threads(2), torch.get_num_threads())"
)


def run(code: str, **env: str) -> str:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CLEF_AGENTS_THREADS")
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-1500:]
    return done.stdout.strip().splitlines()[-1]


def test_load_model_sets_one_thread_unless_told_otherwise():
    assert run(LOAD_MODEL) == "1"
    assert run(LOAD_MODEL, CLEF_AGENTS_THREADS="2") == "2"
    assert run(LOAD_MODEL, OMP_NUM_THREADS="2") == "2"


def test_a_model_loaded_directly_keeps_the_callers_threads_and_commands_follow_their_flag():
    assert run(FROM_PRETRAINED) == "2"
    assert run(COMMAND) == "1 2 2"


def test_a_bad_thread_setting_says_what_is_allowed():
    with pytest.raises(ValueError, match="CLEF_AGENTS_THREADS must be a positive integer, got '0'"):
        chosen_threads({"CLEF_AGENTS_THREADS": "0"})
    with pytest.raises(ValueError, match="got 'two'"):
        chosen_threads({"CLEF_AGENTS_THREADS": "two"})
