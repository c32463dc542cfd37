"""The command line's allocator: re-executed once with jemalloc preloaded, or left alone."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import pytest

from swe_rlvr import allocator

SHOW = ("import os; from swe_rlvr import allocator; allocator.preload(); "
        "print('active', allocator.active(), os.environ.get('MALLOC_CONF'))")


def _run(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("LD_PRELOAD", "MALLOC_CONF", allocator.ENV, allocator._REEXEC)}
    return subprocess.run([sys.executable, "-c", SHOW], env={**clean, **env}, text=True,
                          capture_output=True, timeout=60)


NO_JEMALLOC = pytest.mark.skipif(ctypes.util.find_library("jemalloc") is None,
                                 reason="libjemalloc is not installed (apt-get install libjemalloc2)")


@NO_JEMALLOC
def test_the_command_line_runs_on_jemalloc_by_default():
    """Printed once: by the re-executed process, which a user's MALLOC_CONF still reaches."""
    result = _run(MALLOC_CONF="narenas:2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["active jemalloc narenas:2"]


def test_system_keeps_the_process_as_it_started():
    result = _run(**{allocator.ENV: "system"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["active system None"]


def test_a_missing_library_warns_and_runs_on():
    missing = next((n for n, lib in allocator.LIBRARIES.items()
                    if ctypes.util.find_library(lib) is None), None)
    if missing is None:
        pytest.skip("every allocator library is installed here")
    result = _run(**{allocator.ENV: missing})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["active system None"]
    assert allocator.PACKAGES[missing] in result.stderr


def test_an_unknown_allocator_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv(allocator.ENV, "mimalloc")
    with pytest.raises(ValueError, match="jemalloc, tcmalloc, system"):
        allocator.wanted()

