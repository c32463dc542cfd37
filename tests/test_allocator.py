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


PURGE = """
import torch
from swe_rlvr import memory
rss = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096
start = rss()
xs = [torch.ones(2 ** 18) for _ in range(256)]        # 256 tensors of 1 MiB
del xs
freed = rss()
memory.release()
print(freed - start, rss() - start)
"""


@NO_JEMALLOC
def test_release_returns_jemalloc_s_freed_pages_at_once():
    """jemalloc keeps part of what was freed resident (here ~50 of 256 MiB) until its decay timer
    returns it; a stage's end gives it back at once."""
    clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF")}
    library = ctypes.util.find_library("jemalloc")
    result = subprocess.run([sys.executable, "-c", PURGE], env={**clean, "LD_PRELOAD": library},
                            text=True, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    kept, after = (int(x) for x in result.stdout.split()[-2:])
    assert kept > 16 * 2 ** 20 and after < kept / 2, (kept, after)


def test_the_onednn_kernel_cache_is_bounded_unless_the_user_sets_it():
    show = "import os, swe_rlvr; print(os.environ['ONEDNN_PRIMITIVE_CACHE_CAPACITY'])"
    clean = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    for env, expected in (({}, "128"), ({"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "7"}, "7")):
        out = subprocess.run([sys.executable, "-c", show], env={**clean, **env}, text=True,
                             capture_output=True, timeout=60)
        assert out.stdout.split() == [expected], out.stderr


KEPT = """
import ctypes, time, torch
from swe_rlvr import memory
rss = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096
def decay():
    v, n = ctypes.c_ssize_t(0), ctypes.c_size_t(8)
    ctypes.CDLL(None).mallctl(b"arenas.dirty_decay_ms", ctypes.byref(v), ctypes.byref(n), None, 0)
    return v.value
before = decay()
start = rss()
with memory.kept_under_ceiling(start + (512 << 20)):
    inside = decay()
    xs = [torch.ones(2 ** 18) for _ in range(256)]     # a step: 256 MiB, freed
    del xs
    time.sleep(0.2)
    kept = rss() - start                                 # under the ceiling: kept
    x = torch.ones(768 << 18)                          # a bigger step: 768 MiB live, over it
    live = rss() - start
    del x                                                # one free: a watcher poll cannot fall
    deadline = time.time() + 10                          # between frees and purge only part of
    while rss() - start >= 200 << 20 and time.time() < deadline:   # them. Freed, over the
        time.sleep(0.05)                                 # ceiling: purged at the next poll
    capped = rss() - start
print(before, inside, decay(), kept >> 20, live >> 20, capped >> 20, (rss() - start) >> 20)
"""


@NO_JEMALLOC
def test_freed_pages_stay_under_the_ceiling_and_go_above_it():
    """Inside the block jemalloc's decay is off, so freed pages stay for the next allocations
    (nothing to fault in again) while the resident set is under the ceiling; live tensors may
    exceed it, and once they are freed the watcher purges; leaving restores the decay."""
    clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MALLOC_CONF")}
    result = subprocess.run([sys.executable, "-c", KEPT],
                            env={**clean, "LD_PRELOAD": ctypes.util.find_library("jemalloc")},
                            text=True, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    before, inside, restored, kept, live, capped, after = (int(x) for x in result.stdout.split())
    assert (inside, restored) == (-1, before) and before >= 0
    assert kept >= 240 and live >= 700, (kept, live)           # MiB resident
    assert capped < 200 and after < 200, (capped, after)


def test_without_jemalloc_the_step_call_trims_glibc(monkeypatch):
    """No mallctl in the process (glibc): the call after each step is `trim`, as before."""
    from swe_rlvr import memory
    if hasattr(ctypes.CDLL(None), "mallctl"):
        pytest.skip("this process runs on jemalloc")
    with memory.kept_under_ceiling() as after_step:
        assert after_step is memory.trim
