"""Benchmark the local sandbox beside its peers; prints a table with ratios.

Measured in one run, side by side:
- per-command overhead: `execute("true")` on each available isolation level, against a raw
  `subprocess.run("true", shell=True)` and mini-swe-agent's `LocalEnvironment.execute`;
- a fresh working copy: `open_sandbox` + `close` with the base checkout already cached;
- grading: `grade(gold)` against running the same tests directly (a prepared checkout, no sandbox).

Targets: <= 1.3x raw subprocess per command, <= 50 ms per working copy, <= 1.2x a bare test run.
Usage: python bench/sandbox.py [--reps 50]
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


def per_command(inst, cfg, store, reps: int) -> list[tuple[str, float]]:
    rows = [("raw subprocess.run('true', shell=True)",
             timed(lambda: subprocess.run("true", shell=True, capture_output=True), reps))]
    try:
        from minisweagent.environments.local import LocalEnvironment
        env = LocalEnvironment(cwd=str(store))
        rows.append(("mini-swe-agent LocalEnvironment", timed(lambda: env.execute({"command": "true"}), reps)))
    except ImportError:
        rows.append(("mini-swe-agent LocalEnvironment (not installed)", float("nan")))
    for level in isolation.LEVELS:
        if isolation.available(level):
            with open_sandbox(inst, replace(cfg, isolation=level), store) as sb:
                rows.append((f"local sandbox, {level}", timed(lambda: sb.execute("true"), reps)))
    return rows


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
        subprocess.run(["cp", "-a", f"{sb.workdir}/.", str(checkout)], check=True)
    for patch in (inst.patch, inst.test_patch):
        subprocess.run(["git", "apply", "-"], cwd=checkout, input=patch, text=True, check=True)
    files = [f for f in inst.test_files() if f.endswith(".py")]
    cmd = f"{sys.executable} -m pytest -rA -p no:cacheprovider {' '.join(files)}"
    bare = timed(lambda: subprocess.run(cmd, shell=True, cwd=checkout, capture_output=True), reps)
    graded = timed(lambda: grade(inst, inst.patch, cfg, store), reps)
    return [("bare test run (pytest in a prepared checkout)", bare), ("grade(gold) via the sandbox", graded)]


def print_table(title: str, rows: list[tuple[str, float]], base: float) -> None:
    print(f"\n{title}")
    for name, secs in rows:
        print(f"  {name:<58} {secs * 1000:9.2f} ms   {secs / base:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        inst, store = instance_and_store(tmp)
        cfg = SandboxConfig(workdir=str(tmp / "sandboxes"))
        open_sandbox(inst, cfg, store).close()  # build the cached base checkout once
        level = isolation.choose_level("auto")
        commands = per_command(inst, cfg, store, args.reps)
        print_table(f"per-command overhead (median of {args.reps}; ratio to raw subprocess)",
                    commands, commands[0][1])
        copies = working_copy(inst, cfg, store, max(10, args.reps // 2))
        print_table("fresh working copy (ratio to the 50 ms target)", copies, 0.050)
        grades = grading(inst, cfg, store, max(3, args.reps // 10))
        print_table(f"grading one instance, isolation {level} (ratio to the bare run)", grades, grades[0][1])


if __name__ == "__main__":
    main()
