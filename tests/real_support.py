"""The real SWE-bench Lite set beside the project (`../shared/data/real/`), for the tests that use it."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"
ENV_CACHE = Path.home() / ".cache" / "swe-rlvr" / "test-envs"
"""Environments outlive a test run (they are keyed by their spec), so a rerun skips the builds."""


def extract_store(dest: Path) -> Path:
    """The set's bare repositories extracted into `dest` (a repo store); skips without the set."""
    if not (REAL / "instances.jsonl").is_file():
        pytest.skip(f"the real SWE-bench data set is not beside the project ({REAL})")
    for tarball in sorted(REAL.glob("*.tar.gz")):
        with tarfile.open(tarball) as tar:
            tar.extractall(dest, filter="data")
    return dest
