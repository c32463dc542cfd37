"""Fixtures shared across test modules."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Qwen2 model with an offline BPE tokenizer, built once per test session."""
    from agent.models import build_tiny
    return build_tiny(tmp_path_factory.mktemp("tiny-model"))
