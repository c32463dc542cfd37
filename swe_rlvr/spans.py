"""Where a process's time and memory go: named spans of work, and a resident-memory sampler.

Code at the edges records what it did under a name (`with span("decode") as s: ...; s.tokens += n`):
wall seconds, calls, tokens run through the model, `logits` (positions that needed the LM head)
and `keys` (attention keys those tokens read): what `swe_rlvr.compute` turns into FLOPs. Totals
are summed per name for the whole process, so spans in concurrent threads add up to busy time,
not elapsed time. `delta(before, after)` gives one window's share. Names used in the package:
`prefill`, `decode`, `batch` (the `hf` engine; `batch`: copying the running rows' caches and the
joining ones into one batch), `generate` (a server's completion: `openai`, `vllm-server`),
`server_start`, `server_stop`, `old_logprobs`, `forward_backward`, `optimizer`, `checkpoint` (the
trainer), `model_load` (both).

`rss_window()` yields a `Window` whose `peak_mb`, once the block ends, is the largest resident set
of this process seen while it ran (sampled every `SAMPLE_S` by one daemon thread, plus at its start
and end), with that of the child processes it `watch`es (a model in a process of its own) added.
Overlapping windows each see the whole process: the figure is the process's peak while the block
ran, not the block's own allocation. `cpu_seconds()` is the CPU time this process (with its watched
children) and the whole machine have used, for a window's difference.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

SAMPLE_S = 0.1
_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2 ** 20


@dataclass
class Total:
    """What the spans of one name did: busy seconds, calls, tokens, logits and attended keys."""

    seconds: float = 0.0
    calls: int = 0
    tokens: int = 0
    logits: int = 0
    keys: int = 0

    def minus(self, other: Total) -> Total:
        return self.plus(other, sign=-1)

    def plus(self, other: Total, sign: int = 1) -> Total:
        return Total(*(a + sign * b for a, b in zip(dataclasses.astuple(self),
                                                    dataclasses.astuple(other))))


@dataclass
class Span:
    """The counters a span's body fills in."""

    tokens: int = 0
    logits: int = 0
    keys: int = 0


_lock = threading.Lock()
_totals: dict[str, Total] = {}


@contextmanager
def span(name: str, tokens: int = 0) -> Iterator[Span]:
    """Time the block under `name`; its counters are added at the end."""
    s, start = Span(tokens), time.perf_counter()
    try:
        yield s
    finally:
        record(name, time.perf_counter() - start, s.tokens, s.logits, s.keys)


def record(name: str, seconds: float, tokens: int = 0, logits: int = 0, keys: int = 0) -> None:
    with _lock:
        t = _totals.setdefault(name, Total())
        t.seconds, t.calls = t.seconds + seconds, t.calls + 1
        t.tokens, t.logits, t.keys = t.tokens + tokens, t.logits + logits, t.keys + keys


def add(name: str, total: Total) -> None:
    """Add `total` (another process's spans, e.g. a model's own process) to `name`'s totals."""
    if total.calls:
        with _lock:
            _totals[name] = _totals.get(name, Total()).plus(total)


def totals() -> dict[str, Total]:
    """A copy of every name's totals so far."""
    with _lock:
        return {k: dataclasses.replace(v) for k, v in _totals.items()}


def delta(before: dict[str, Total], after: dict[str, Total]) -> dict[str, Total]:
    """What happened between two `totals()` snapshots (names with no new call left out)."""
    out = {k: v.minus(before.get(k, Total())) for k, v in after.items()}
    return {k: v for k, v in out.items() if v.calls}


def rss_mb(pid: int | str = "self") -> float:
    """This process's (or process `pid`'s) resident set now, MiB (0 where /proc is missing)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE_MB
    except OSError:
        return 0.0


_watched: set[int] = set()


def watch(pid: int | None) -> None:
    """Count child process `pid`'s resident set in every window, with this process's."""
    if pid is not None:
        with _lock:
            _watched.add(pid)


def unwatch(pid: int | None) -> None:
    with _lock:
        _watched.discard(pid)


def windowed_rss_mb() -> float:
    """This process's resident set and its watched children's, MiB (a child gone counts 0)."""
    with _lock:
        pids = list(_watched)
    return rss_mb() + sum(rss_mb(pid) for pid in pids)


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds so far: (this process's, with the children it `watch`es, user + system; the
    whole machine's busy time, every process's, from /proc/stat). A stage's sandbox commands show
    in the second only: they run under bubblewrap, whose children's time never reaches this
    process's own accounting of reaped children. Where /proc is missing, the machine's is 0."""
    import resource
    own = resource.getrusage(resource.RUSAGE_SELF)
    with _lock:
        pids = list(_watched)
    return own.ru_utime + own.ru_stime + sum(_proc_cpu_s(pid) for pid in pids), _machine_cpu_s()


def _machine_cpu_s() -> float:
    """The machine's busy CPU seconds since boot: user, nice, system, irq and softirq time summed
    over every CPU (/proc/stat's first line; idle, iowait and the hypervisor's steal left out)."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _proc_cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()     # after the command's name
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")   # utime, stime


def peak_rss_mb() -> float:
    """This process's peak resident set since it started (the kernel's VmHWM), MiB."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class Window:
    """A block's peak resident set (MiB) and the one it started with."""

    peak_mb: float = 0.0
    start_mb: float = 0.0

    def see(self, mb: float) -> None:
        self.peak_mb = max(self.peak_mb, mb)


@dataclass
class _Sampler:
    open: dict[int, Window] = field(default_factory=dict)
    thread: threading.Thread | None = None

    def add(self, w: Window) -> None:
        with _lock:
            self.open[id(w)] = w
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
                self.thread.start()

    def remove(self, w: Window) -> None:
        with _lock:
            self.open.pop(id(w), None)

    def _run(self) -> None:
        while True:
            time.sleep(SAMPLE_S)
            with _lock:
                windows = list(self.open.values())
            if windows:                                # no /proc read while nothing is measured
                mb = windowed_rss_mb()
                for w in windows:
                    w.see(mb)


_sampler = _Sampler()


@contextmanager
def rss_window() -> Iterator[Window]:
    """Track this process's peak resident set while the block runs."""
    w = Window(start_mb=windowed_rss_mb())
    w.see(w.start_mb)
    _sampler.add(w)
    try:
        yield w
    finally:
        w.see(windowed_rss_mb())
        _sampler.remove(w)
