"""Benchmark grading on real SWE-bench instances beside its two peers; prints tables with ratios.

Measured in one run, on the real SWE-bench Lite set beside the project (`../shared/data/real/`,
the recipes as `install_config`; environments are built once before anything is timed):
- grading time: `grade(gold)` (a fresh sandbox, patch, test patch, the test run with its junit
  report, SWE-bench's parser, the guards) against running the same tests directly: the same test
  command in a prepared checkout (gold and test patch applied, the same environment first on
  PATH), no sandbox; and the grade without the static screen and the runtime guard, to show what
  those two layers cost. The three alternate rep by rep; medians. Target: <= 1.25x with every
  layer on.
- hidden variant tests: `grade(gold)` of built-in instances that have variants (every k-th, `--variants`
  of them), every layer on, against the same grade with `sandbox.variant_tests` off; alternating, medians.
  Every grade must resolve untampered.
- parsing: the verdict from a recorded log (`grade_run`: SWE-bench's parser, the summary section,
  the guards, SWE-bench's report) against SWE-bench's parser alone, on the recorded logs of
  tests/data/real_logs; seconds per MB of log.

Each graded run must resolve, and the direct run's log must resolve too: a timing of a wrong
answer is no timing.
Usage: python bench/grading.py [--reps 3] [--ids ID ...] [--variants 20]
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandbox import open_sandbox  # noqa: E402
from sandbox.grading import grade, grade_run  # noqa: E402
from sandbox.reference import instance_parser  # noqa: E402
from sandbox.suite_run import SuiteRun, appended_test_files  # noqa: E402
from swe_rlvr.config import SandboxConfig  # noqa: E402
from swe_rlvr.formats.swe_rebench import from_swe_rebench, install_config_from_recipe  # noqa: E402

REAL = ROOT.parent / "shared" / "data" / "real"
LOGS = ROOT / "tests" / "data" / "real_logs"


def real_instances(ids: list[str]) -> list:
    recipes = {r["instance_id"]: r for r in map(json.loads, (REAL / "recipes.jsonl").read_text().splitlines())}
    records = [json.loads(line) for line in (REAL / "instances.jsonl").read_text().splitlines()]
    return [from_swe_rebench({**r, "install_config": install_config_from_recipe(recipes[r["instance_id"]])})
            for r in records if not ids or r["instance_id"] in ids]


def extract_store(tmp: Path) -> Path:
    store = tmp / "repos"
    store.mkdir()
    for tarball in sorted(REAL.glob("*.tar.gz")):
        with tarfile.open(tarball) as tar:
            tar.extractall(store, filter="data")
    return store


def prepared_checkout(inst, cfg, store, tmp: Path) -> tuple[Path, dict]:
    """A plain copy of the sandbox's working copy with gold and test patch applied, and the
    environment variables the sandbox runs commands with (its env's bin first on PATH)."""
    with open_sandbox(inst, cfg, store) as sb:
        checkout = Path(tempfile.mkdtemp(dir=tmp, prefix="direct-"))
        subprocess.run(["cp", "-a", f"{sb.copy.repo}/.", str(checkout)], check=True)
        env = dict(os.environ, PATH=f"{sb.jail.env_bin}:{os.environ['PATH']}")
        env.update({k: v.replace(sb.workdir, str(checkout)) for k, v in sb.jail.extra_env})
    for patch in (inst.patch, inst.test_patch):
        subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=checkout, input=patch, text=True, check=True)
    return checkout, env


def direct_command(inst) -> str:
    return " ".join([inst.env.test_cmd, *map(shlex.quote, appended_test_files(inst))])


def grading_times(insts, cfg, store, tmp: Path, reps: int) -> list[tuple[str, float, float, float]]:
    rows = []
    bare = dataclasses.replace(cfg, static_screen=False, runtime_guard=False)
    for inst in insts:
        checkout, env = prepared_checkout(inst, cfg, store, tmp)
        cmd = direct_command(inst)
        direct, graded, unlayered = [], [], []
        for _ in range(reps):
            start = time.perf_counter()
            proc = subprocess.run(cmd, shell=True, cwd=checkout, env=env, capture_output=True, text=True)
            direct.append(time.perf_counter() - start)
            run = SuiteRun(log=proc.stdout + proc.stderr, exit_code=proc.returncode)
            if not grade_run(inst, run, junit=False).resolved:
                raise SystemExit(f"{inst.instance_id}: the direct run of the gold patch does not resolve")
            start = time.perf_counter()
            report = grade(inst, inst.patch, cfg, store)
            graded.append(time.perf_counter() - start)
            if not report.resolved:
                raise SystemExit(f"{inst.instance_id}: grade(gold) did not resolve: {report.infra_reason} "
                                 f"{report.tamper_reason} {report.guards} {report.f2p_failed} {report.p2p_failed[:3]}")
            start = time.perf_counter()
            if not grade(inst, inst.patch, bare, store).resolved:
                raise SystemExit(f"{inst.instance_id}: grade(gold) without the screen and guard did not resolve")
            unlayered.append(time.perf_counter() - start)
        rows.append((inst.instance_id, statistics.median(direct), statistics.median(graded),
                     statistics.median(unlayered)))
    return rows


def variant_times(count: int, cfg, store, reps: int) -> tuple[int, float, float]:
    """(instances, median s of grade(gold) with the variants, without them) over `count` built-in
    instances that have variants."""
    from swe_rlvr.builtin import load_builtin
    from swe_rlvr.builtin.variants import variants_of
    having = [i for i in load_builtin() if variants_of(i.instance_id, i.patch)]
    insts = having[::max(1, len(having) // count)][:count]
    without = dataclasses.replace(cfg, variant_tests=False)
    for inst in insts:  # base checkouts are built before any timing
        grade(inst, inst.patch, cfg, store)
    on, off = [], []
    for _ in range(reps):
        for inst in insts:
            for side, config in ((on, cfg), (off, without)):
                start = time.perf_counter()
                report = grade(inst, inst.patch, config, store)
                side.append(time.perf_counter() - start)
                if not report.resolved or report.tampered:
                    raise SystemExit(f"{inst.instance_id}: grade(gold) did not resolve untampered: "
                                     f"{report.tamper_reason} {report.infra_reason} {report.guards}")
    return len(insts), statistics.median(on), statistics.median(off)


def parse_times(insts, reps: int) -> tuple[float, float, float]:
    """(MB of logs, s/MB of SWE-bench's parser, s/MB of the verdict from a log)."""
    index = json.loads((LOGS / "index.json").read_text())
    logs = []
    for inst in insts:
        for kind in ("gold", "empty"):
            log = gzip.decompress((LOGS / f"{inst.instance_id}.{kind}.log.gz").read_bytes()).decode()
            run = SuiteRun(log=log, exit_code=index[inst.instance_id]["exit_code"][kind])
            if grade_run(inst, run, junit=False).resolved != (kind == "gold"):
                raise SystemExit(f"{inst.instance_id}: the {kind} log is graded wrongly")
            logs.append((inst, run))
    mb = sum(len(run.log.encode()) for _, run in logs) / 1e6
    theirs, ours = [], []
    for _ in range(reps):
        start = time.perf_counter()
        for inst, run in logs:
            instance_parser(inst)(run.log)
        theirs.append(time.perf_counter() - start)
        start = time.perf_counter()
        for inst, run in logs:
            grade_run(inst, run, junit=False)
        ours.append(time.perf_counter() - start)
    return mb, statistics.median(theirs) / mb, statistics.median(ours) / mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="timed runs per instance and side")
    parser.add_argument("--ids", nargs="*", default=[], help="only these instance ids")
    parser.add_argument("--env-cache", default=str(Path.home() / ".cache" / "swe-rlvr" / "test-envs"))
    parser.add_argument("--variants", type=int, default=20, help="built-in instances for the variant tests' cost")
    args = parser.parse_args()
    if not (REAL / "instances.jsonl").is_file():
        raise SystemExit(f"the real SWE-bench set is not beside the project ({REAL})")
    insts = real_instances(args.ids)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        store = extract_store(tmp)
        cfg = SandboxConfig(workdir=str(tmp / "sandboxes"), env_cache=args.env_cache)
        for inst in insts:   # environments and base checkouts are built before any timing
            open_sandbox(inst, cfg, store).close()
            grade(inst, inst.patch, cfg, store)
        rows = grading_times(insts, cfg, store, tmp, args.reps)
        variants = variant_times(args.variants, cfg, tmp / "builtin-repos", args.reps) if args.variants else None
    print(f"\ngrading gold on {len(rows)} real instances, median of {args.reps} (grade: every layer on, ratio "
          f"to the direct run, target <= 1.25x; 'layers': its ratio to the grade without the static screen "
          f"and the runtime guard)")
    for iid, direct, graded, unlayered in rows + [("all", *(sum(r[i] for r in rows) for i in (1, 2, 3)))]:
        print(f"  {iid:<28} direct {direct:7.2f} s   grade {graded:7.2f} s   {graded / direct:5.2f}x   "
              f"without them {unlayered:7.2f} s   layers {graded / unlayered:5.2f}x")
    if variants:
        count, on, off = variants
        print(f"\nhidden variant tests: grade(gold) of {count} built-in instances that have them, median of "
              f"{args.reps * count}\n  with them {on:6.2f} s   without them {off:6.2f} s   {on / off:5.2f}x")
    mb, theirs, ours = parse_times(insts, max(5, args.reps))
    print(f"\nparsing {mb:.2f} MB of recorded logs (gold and empty), median of {max(5, args.reps)}")
    print(f"  SWE-bench's parser alone          {theirs:7.3f} s/MB   1.00x")
    print(f"  verdict from a log (grade_run)    {ours:7.3f} s/MB   {ours / theirs:5.2f}x")


if __name__ == "__main__":
    main()
