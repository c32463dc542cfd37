"""Scale-out of the episode stages: episodes per minute of rollout + validate with the scripted
policy, in one process (the threads runner) and fanned out over a local Ray cluster of 1, 2 and 4
workers (`tasks.shards`, one shard per worker), plus the per-run Ray overhead.

Each arm runs in a fresh process on a fresh run directory (no stage is cached), with its Ray
workers started before the clock runs (a run pays that once): the scripted gold
policy over a tiny random Qwen2, the built-in instances, the real sandbox and grading. Every arm
must produce every episode exactly once (rollouts and validations), or the bench fails. Ray
overhead is measured on empty sub-flows: one local cluster per run (`flows.runners.connect_ray`,
what runs now) against a fresh local Ray per sub-flow (what ran before), for 1 and 3 sub-flows.
A 2-core machine cannot show a speed-up past 2 workers; run it where the cores are.

    .venv/bin/python -m bench.scale_out --instances 8 --group 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flows  # noqa: E402,F401 - sets the ephemeral API's start-up timeout before Prefect loads

WORKERS = (1, 2, 4)


def config(root: Path, model: Path, workers: int, instances: int, group: int):
    from swe_rlvr.config import load_config
    runner = ["orchestration.task_runner=threads"] if workers == 0 else [
        "orchestration.task_runner=ray", f"orchestration.ray_num_cpus={workers}",
        f"orchestration.shards={workers}"]
    return load_config(None, runner + [
        "orchestration.max_workers=1", f"orchestration.run_root={root}",
        "instances.source=builtin", f"instances.limit={instances}", f"engine.model={model}",
        "engine.name=scripted:gold", "engine.max_batch=1", "agent.scaffold=bash",
        f"algorithm.group_size={group}", f"sandbox.workdir={root / 'work'}",
        f"sandbox.env_cache={root.parent / 'envs'}"])


def episodes_arm(root: Path, model: Path, workers: int, instances: int, group: int) -> dict:
    """Rollout + validate once; episodes/minute and whether every episode came out once."""
    from tasks import store
    from tasks.instances import instances as instances_task
    from tasks.rollout import rollout
    from tasks.validate import validate
    cfg = config(root, model, workers, instances, group)
    start = time.monotonic()
    if workers:
        from flows.runners import connect_ray
        connect_ray(cfg)
        warm_workers(workers, model)
    ready = time.monotonic()
    run = str(root / "run")
    insts = instances_task.fn(run, 0, cfg, cfg.instances.train_split)
    rolls_url = rollout.fn(run, 0, insts, str(model), cfg)
    grades = validate.fn(run, 0, rolls_url, insts, cfg)
    rolls = store.read_rows(rolls_url, "rollouts")
    done = time.monotonic()
    expected = len(store.read_rows(insts, "instances")) * group
    ids = [r["episode_id"] for r in rolls]
    graded = [r["episode_id"] for r in store.read_rows(grades, "validations")]
    complete = len(ids) == len(set(ids)) == expected and sorted(graded) == sorted(ids)
    return {"workers": workers, "episodes": len(ids), "complete": complete,
            "ray_start_s": ready - start,                  # the cluster and its warmed workers
            "stages_s": done - ready,
            "episodes_per_min": 60 * len(ids) / (done - ready)}


def _warm(model: str) -> int:
    """A Ray worker's one-time start: the imports and the tokenizer a shard needs."""
    import os

    from transformers import AutoTokenizer

    import agent.scripted  # noqa: F401
    import tasks.rollout  # noqa: F401
    import tasks.validate  # noqa: F401
    AutoTokenizer.from_pretrained(model)
    time.sleep(1.0)          # hold the CPU slot, so that each warm-up lands on its own worker
    return os.getpid()


def warm_workers(workers: int, model: Path) -> None:
    """Start every Ray worker before the clock runs: a run pays that once, not per stage, and
    on a small instance count it would otherwise swamp the throughput being measured."""
    import ray
    pids = ray.get([ray.remote(_warm).options(num_cpus=1).remote(str(model))
                    for _ in range(workers)])
    assert len(set(pids)) == workers, pids


def overhead_arm(subflows: int, per_subflow: bool) -> dict:
    """Wall time of `subflows` empty sub-flows on Ray, one cluster per run or one per sub-flow."""
    from prefect import flow, task

    from flows.runners import task_runner
    from swe_rlvr.config import load_config
    cfg = load_config(None, ["orchestration.task_runner=ray", "orchestration.ray_num_cpus=1"])

    @task
    def nothing() -> int:
        return 1

    @flow
    def sub() -> int:
        return nothing.submit().result()

    if per_subflow:                             # the same hermetic settings, minus the reuse
        from flows.runners import _auth_env, _loopback
        _auth_env(cfg)
        _loopback()
    from prefect.testing.utilities import prefect_test_harness
    with prefect_test_harness(server_startup_timeout=120):   # an API the Ray workers reach
        start = time.monotonic()
        runner = None if per_subflow else task_runner(cfg)
        _subflows(sub, subflows, runner, per_subflow)
        wall = time.monotonic() - start
    return {"subflows": subflows, "per_subflow": per_subflow, "wall_s": wall}


def _subflows(sub, subflows: int, runner, per_subflow: bool) -> None:
    from prefect_ray.task_runners import RayTaskRunner

    from flows.runners import _runtime_env
    for _ in range(subflows):
        if per_subflow:                         # before: RayTaskRunner started a local Ray
            runner = RayTaskRunner(init_kwargs={
                "include_dashboard": False, "num_cpus": 1, "runtime_env": _runtime_env(),
                "_temp_dir": tempfile.mkdtemp(prefix="ray-")})
        sub.with_options(task_runner=runner)()
    import ray
    ray.shutdown()                              # a no-op when the sub-flows stopped theirs


def arm(args: list[str]) -> dict:
    """Run one arm in a fresh process (Ray is initialised once per process)."""
    out = subprocess.run([sys.executable, "-m", "bench.scale_out", "--arm", *args],
                         capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        raise SystemExit(f"arm {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--arm", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        kind, *rest = args.arm
        result = (episodes_arm(Path(rest[0]), Path(rest[1]), *map(int, rest[2:]))
                  if kind == "episodes" else overhead_arm(int(rest[0]), rest[1] == "1"))
        print(json.dumps(result))
        return
    from agent.models import build_tiny
    root = Path(tempfile.mkdtemp(prefix="bench-scale-out-"))
    model = build_tiny(root / "tiny")
    rows = [arm(["episodes", str(root / f"w{w}"), str(model), str(w), str(args.instances),
                 str(args.group)]) for w in (0, *WORKERS)]
    for r in rows:
        name = "one process" if r["workers"] == 0 else f"ray x{r['workers']}"
        print(f"{name:12s} {r['episodes']:3d} episodes  {r['episodes_per_min']:6.1f}/min  "
              f"(stages {r['stages_s']:.1f} s, Ray start {r['ray_start_s']:.1f} s)")
    for per_subflow in (True, False):
        walls = [arm(["overhead", str(n), str(int(per_subflow))])["wall_s"] for n in (1, 3)]
        print(f"Ray overhead, {'a cluster per sub-flow' if per_subflow else 'one cluster per run'}"
              f": 1 sub-flow {walls[0]:.1f} s, 3 sub-flows {walls[1]:.1f} s")
    if not all(r["complete"] for r in rows):
        raise SystemExit("an arm lost or repeated episodes: " + json.dumps(rows))


if __name__ == "__main__":
    main()
