"""Shared fixtures: tiny random backbones saved once per session."""

from __future__ import annotations

import os

import pytest
from tiny_models import tiny_backbone

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def encoder_dir(tmp_path_factory):
    return tiny_backbone("encoder", tmp_path_factory.mktemp("tiny_encoder"))


@pytest.fixture(scope="session")
def decoder_dir(tmp_path_factory):
    return tiny_backbone("decoder", tmp_path_factory.mktemp("tiny_qwen3"))
