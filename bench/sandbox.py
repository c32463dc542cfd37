"""Benchmark the local sandbox beside its peers; prints a table with ratios.

Measured in one run, side by side:
- per-command latency: the same command string through a raw `subprocess.run(cmd, shell=True)`
  (/bin/sh), the same through bash (what the sandbox runs), mini-swe-agent's
  `LocalEnvironment.execute`, and `execute(cmd)` on each available isolation level, all in the
  same working copy. The contenders are interleaved call by call (order rotating) so that load
  from other processes hits them alike; medians with the 10th-90th percentile spread.
  A sandbox's shell for the next command is started while the other contenders run (as it is
  while an agent thinks); the last table alternates only the raw call and the best level, so
  that shell has barely a raw call's time to start.
- a fresh working copy: `open_sandbox` + `close` with the base checkout already cached;
- grading: `grade(gold)`, with and without canary tests, against running the same tests directly
  (a prepared checkout, no sandbox); each timed grade must resolve, untampered.

Targets: <= 1.3x raw subprocess per command, <= 50 ms per working copy, <= 1.2x a bare test run.
Usage: python bench/sandbox.py [--reps 50] [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox import isolation, open_sandbox  # noqa: E402
from sandbox.grading import grade  # noqa: E402
from sandbox.suite_run import appended_test_files  # noqa: E402
from swe_rlvr.config import SandboxConfig  # noqa: E402


def timed(fn, reps: int) -> float:
    """Median wall seconds of `fn()` over `reps` runs (after one warm-up)."""
    fn()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def instance_and_store(tmp: Path):
    """The first built-in instance (materialised into a temp store)."""
    from swe_rlvr.builtin import load_builtin
    return load_builtin()[0], tmp / "repos"


COMMANDS = ("ls -a | wc -l", "true")


def per_command(inst, cfg, store, calls: int) -> dict[str, list[tuple[str, list[float]]]]:
    """{command: [(contender, samples)]}: every contender runs each command `calls` times,
    interleaved call by call; the raw subprocess comes first in each list (the ratio's base)."""
    sandboxes = [(level, open_sandbox(inst, replace(cfg, isolation=level), store))
                 for level in isolation.LEVELS if isolation.available(level)]
    try:
        cwd = str(sandboxes[0][1].copy.repo)   # the host directory behind the jail's /testbed
        out = {}
        for cmd in COMMANDS:
            contenders = [("raw subprocess.run(cmd, shell=True)",
                           lambda c=cmd: subprocess.run(c, shell=True, cwd=cwd,
                                                        capture_output=True)),
                          ("raw subprocess.run(cmd, shell=True, bash)",
                           lambda c=cmd: subprocess.run(c, shell=True, cwd=cwd, capture_output=True,
                                                        executable="/bin/bash"))]
            contenders += _mini_swe_agent(cmd, cwd)
            contenders += [(f"local sandbox, {level}", lambda c=cmd, sb=sb: sb.execute(c))
                           for level, sb in sandboxes]
            out[cmd] = list(zip([name for name, _ in contenders], interleaved(contenders, calls)))
        pair = [contenders[0], contenders[-len(sandboxes)]]  # raw and the best level, alternating
        names = [name for name, _ in pair]
        out[f"{COMMANDS[-1]}, back to back"] = list(zip(names, interleaved(pair, calls)))
        return out
    finally:
        for _, sb in sandboxes:
            sb.close()


def _mini_swe_agent(cmd: str, cwd: str) -> list:
    try:
        from minisweagent.environments.local import LocalEnvironment
    except ImportError:
        return []
    env = LocalEnvironment(cwd=cwd)
    return [("mini-swe-agent LocalEnvironment", lambda: env.execute({"command": cmd}))]


def interleaved(contenders: list, calls: int) -> list[list[float]]:
    """Wall seconds per call of each contender; one warm-up each, then round-robin, the order
    rotating every round."""
    for _, fn in contenders:
        fn()
    samples = [[] for _ in contenders]
    for i in range(calls):
        for k in range(len(contenders)):
            j = (i + k) % len(contenders)
            start = time.perf_counter()
            contenders[j][1]()
            samples[j].append(time.perf_counter() - start)
    return samples


def print_spread(title: str, rows: list[tuple[str, list[float]]]) -> None:
    base = statistics.median(rows[0][1])
    print(f"\n{title}")
    print(f"  {'':<52} {'median':>9} {'p10':>8} {'p90':>8}   ratio")
    for name, samples in rows:
        q = statistics.quantiles(samples, n=10)
        med = statistics.median(samples)
        print(f"  {name:<52} {med * 1000:6.2f} ms {q[0] * 1000:8.2f} {q[-1] * 1000:8.2f}   {med / base:5.2f}x")


def working_copy(inst, cfg, store, reps: int) -> list[tuple[str, float]]:
    """Time to a fresh working copy (`open_sandbox`), and `close()` separately."""
    rows = []
    for mode in ("overlay", "copy"):
        mode_cfg = replace(cfg, working_copy=mode)
        opens, closes = [], []
        try:
            for _ in range(reps):
                start = time.perf_counter()
                sb = open_sandbox(inst, mode_cfg, store)
                opens.append(time.perf_counter() - start)
                start = time.perf_counter()
                sb.close()
                closes.append(time.perf_counter() - start)
        except Exception as exc:  # noqa: BLE001 - a benchmark reports what it cannot measure
            rows.append((f"open_sandbox ({mode}): {str(exc)[:40]}", float("nan")))
            continue
        rows.append((f"open_sandbox ({mode})", statistics.median(opens)))
        rows.append((f"close ({mode}: kill, unmount, delete)", statistics.median(closes)))
    return rows


def grading(inst, cfg, store, reps: int) -> list[tuple[str, float]]:
    with open_sandbox(inst, cfg, store) as sb:   # a prepared checkout: gold + test patch applied
        checkout = Path(tempfile.mkdtemp())
        subprocess.run(["cp", "-a", f"{sb.copy.repo}/.", str(checkout)], check=True)
    for patch in (inst.patch, inst.test_patch):
        subprocess.run(["git", "apply", "-"], cwd=checkout, input=patch, text=True, check=True)
    files = appended_test_files(inst)  # the very command grading runs: test_cmd plus these files
    cmd = f"{inst.env.test_cmd.replace('python', sys.executable, 1)} {' '.join(files)}"
    bare = timed(lambda: subprocess.run(cmd, shell=True, cwd=checkout, capture_output=True), reps)
    rows = [("bare test run (its test command in a prepared checkout)", bare)]
    for name, canaries in (("grade(gold) via the sandbox, with canaries", True),
                           ("grade(gold) via the sandbox, without canaries", False)):
        rows.append((name, timed(lambda c=canaries: _resolved(grade(inst, inst.patch, replace(cfg, canaries=c), store)),
                                 reps)))
    return rows


def _resolved(report):
    """What is timed must be right: the gold patch resolves, untampered, with no guard firing."""
    if not report.resolved or report.tampered or report.infra_failure or report.guards:
        raise SystemExit(f"grade(gold) went wrong: resolved={report.resolved} tampered="
                         f"{report.tampered} infra={report.infra_reason!r} guards={report.guards}")
    return report


def print_table(title: str, rows: list[tuple[str, float]], base: float) -> None:
    print(f"\n{title}")
    for name, secs in rows:
        print(f"  {name:<58} {secs * 1000:9.2f} ms   {secs / base:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50, help="runs of working copy and grading timings")
    parser.add_argument("--calls", type=int, default=200, help="calls per contender and command")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        inst, store = instance_and_store(tmp)
        cfg = SandboxConfig(workdir=str(tmp / "sandboxes"))
        open_sandbox(inst, cfg, store).close()  # build the cached base checkout once
        level = isolation.choose_level("auto")
        for cmd, rows in per_command(inst, cfg, store, args.calls).items():
            print_spread(f"per-command latency of {cmd!r} ({args.calls} interleaved calls each; "
                         f"ratio of medians to raw subprocess)", rows)
        copies = working_copy(inst, cfg, store, max(10, args.reps // 2))
        print_table("fresh working copy (ratio to the 50 ms target)", copies, 0.050)
        grades = grading(inst, cfg, store, max(3, args.reps // 10))
        print_table(f"grading one instance, isolation {level} (ratio to the bare run)", grades, grades[0][1])


if __name__ == "__main__":
    main()
