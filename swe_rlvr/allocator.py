"""The process's memory allocator: jemalloc where it is installed, preloaded by re-executing the
command line once at start-up.

glibc's malloc keeps much of what a training step frees: torch's tensors of 1-20 MB land on the
heap once the dynamic mmap threshold has risen (it does after the first large free), per-thread
arenas keep their own free lists, and the next step's peak lands beside the fragments.
`memory.trim` after each step gives part of it back; jemalloc keeps far less to begin with.
Measured on the quickstart's recipe (2 cores, SmolLM2-135M, bf16 autocast): one DAPO update of
about 7,500 tokens peaked at 4.46 GB under glibc and 3.51 GB under jemalloc (43-53 s either way);
SFT on 32 expert episodes at 4.59 GB against 3.56 GB, 104.5 s against 97.9 s.

jemalloc runs with its default configuration. One that purged freed pages after a second
(`background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0`) made a standalone SFT hold 0.72 GB
instead of 1.28 GB afterwards, but the quickstart's warm-up SFT took 573 s against 452-461 s
(every page returned is faulted in again by the next step) and its stages' resident sets were no
lower; `MALLOC_CONF` still reaches it for anyone who wants to tune it. The other way round,
training loops turn jemalloc's decay off while they run, so freed pages serve the next allocations
without being faulted in again, under a resident-set ceiling (`trainer.keep_freed_pages`, on by
default; `swe_rlvr.memory.kept_under_ceiling`). Disabling jemalloc's separate arena for
allocations over 8 MiB (`oversize_threshold:0`, whose pages it purges at once) changed nothing:
27.2 M page faults against 27.6 M in the warm-up SFT's 14 steps, 124-126 s either way.

A library must be loaded before the first allocation, so `preload()` runs where a command line
starts (`swe-rlvr`'s entry point, never on import): it re-executes the same command with
`LD_PRELOAD` naming the library. `SWE_RLVR_MALLOC` picks it: jemalloc (the default), tcmalloc, or
system (no re-exec). A library that is not installed leaves the system's malloc, with one warning
that says what to install (`infra/setup.sh` installs jemalloc). Python callers (`flows.api`)
get whatever their interpreter started with: set `LD_PRELOAD=libjemalloc.so.2` there.
"""

from __future__ import annotations

import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

ENV = "SWE_RLVR_MALLOC"
LIBRARIES = {"jemalloc": "jemalloc", "tcmalloc": "tcmalloc_minimal"}
"""Allocator name -> the library name `ctypes.util.find_library` looks up."""
PACKAGES = {"jemalloc": "libjemalloc2", "tcmalloc": "libtcmalloc-minimal4"}
"""Allocator name -> the Debian/Ubuntu package that installs it."""
_REEXEC = "SWE_RLVR_MALLOC_REEXEC"


def wanted() -> str:
    """The allocator `SWE_RLVR_MALLOC` asks for (jemalloc when unset)."""
    name = os.environ.get(ENV, "jemalloc").strip() or "jemalloc"
    if name != "system" and name not in LIBRARIES:
        raise ValueError(f"{ENV}={name!r} is not an allocator; choose one of: "
                         f"{', '.join([*LIBRARIES, 'system'])}.")
    return name


def active() -> str:
    """The allocator this process runs on: a name of LIBRARIES if its library is mapped, else
    "system"."""
    try:
        with open("/proc/self/maps") as maps:
            mapped = maps.read()
    except OSError:
        return "system"
    return next((name for name, lib in LIBRARIES.items() if f"lib{lib}.so" in mapped), "system")


def preload() -> None:
    """Re-execute this command line with the wanted allocator preloaded, unless it is already
    active, is "system", or is not installed (then warn once and go on)."""
    name = wanted()
    if name == "system" or active() == name or os.environ.get(_REEXEC):
        return
    library = ctypes.util.find_library(LIBRARIES[name])
    if library is None:
        log.warning("%s asks for %s, which is not installed; running on the system's malloc, "
                    "whose fragments can add a GB or more to a training run's peak memory "
                    "(install it: apt-get install %s; or set %s=system)",
                    ENV, name, PACKAGES[name], ENV)
        return
    env = dict(os.environ, **{_REEXEC: "1"})
    env["LD_PRELOAD"] = " ".join(filter(None, [library, os.environ.get("LD_PRELOAD", "")]))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
