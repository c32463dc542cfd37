"""Prefect's overhead per RL iteration: the `rl_iteration` flow against the same stage functions
called directly (`task.fn`), in one process, with the Prefect API already warm.

Both arms do identical work on fresh run directories (no stage is skipped or cached): the
scripted policy over a tiny random Qwen2, the built-in instances, the real sandbox, grading and
DPO update. torch runs on one intra-op thread in both arms: with its default pool the update ran
8x slower in the main thread (the direct arm) than in Prefect's worker threads on a busy 2-core
machine, which measured torch, not Prefect. Arms alternate so machine load hits both alike. Printed: the medians and
their ratio, and the orchestration overhead proper, wall time minus the stages' own wall times
(from their manifests), which is far less noisy than the ratio.

    .venv/bin/python bench/orchestration.py --reps 3      # target: ratio <= 1.1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import flows  # noqa: E402,F401 - sets the ephemeral API's start-up timeout before Prefect loads
from swe_rlvr.config import Config, load_config  # noqa: E402


def config(root: Path, model: Path) -> Config:
    return load_config(None, [
        f"orchestration.run_root={root}", "orchestration.cache=false", "orchestration.max_workers=1",
        "instances.source=builtin", "instances.limit=2", f"engine.model={model}",
        "engine.name=scripted:weak", "engine.max_batch=1", "agent.scaffold=bash",
        "agent.max_turns=8", "algorithm.name=dpo", "algorithm.group_size=2", "guidance.attempts=1",
        f"sandbox.workdir={root / 'work'}", f"sandbox.env_cache={root / 'envs'}",
        "reward.l_thr=6", "reward.t_max=8", "trainer.sft_batch_size=2", "trainer.dpo_batch_pairs=2",
        "trainer.pack_tokens=8192"])


def direct(cfg: Config, run_dir: str, k: int, policy: str) -> str:
    """The iteration's DAG with each stage's function called as plain Python."""
    from tasks.guidance import guidance
    from tasks.instances import instances
    from tasks.reward import reward
    from tasks.rollout import rollout
    from tasks.update import update
    from tasks.validate import validate
    insts = instances.fn(run_dir, k, cfg, cfg.instances.train_split)
    rolls = rollout.fn(run_dir, k, insts, policy, cfg)
    grades = validate.fn(run_dir, k, rolls, insts, cfg)
    hints = guidance.fn(run_dir, k, grades, rolls, insts, cfg)
    g_rolls = rollout.fn(run_dir, k, insts, policy, cfg, out="rollouts_guided",
                         guidance_path=hints, group_size=cfg.guidance.attempts)
    g_grades = validate.fn(run_dir, k, g_rolls, insts, cfg)
    rewards = reward.fn(run_dir, k, [rolls, g_rolls], [grades, g_grades], cfg)
    return update.fn(run_dir, k, policy, [rolls, g_rolls], rewards, [grades, g_grades], cfg)


def prefect(cfg: Config, run_dir: str, k: int, policy: str) -> str:
    from flows.iteration import rl_iteration
    from flows.runners import task_runner
    return rl_iteration.with_options(task_runner=task_runner(cfg))(cfg, run_dir, k, policy)


def stage_seconds(run_dir: Path) -> float:
    from tasks.store import stage_manifests
    return sum(m["wall_s"] for m in stage_manifests(str(run_dir / "iter_0")).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="iterations timed per arm")
    args = parser.parse_args()
    import torch

    from agent.models import build_tiny
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="bench-orchestration-"))
    cfg = config(root, build_tiny(root / "tiny"))
    prefect(cfg, str(root / "warmup"), 0, cfg.engine.model)   # API, imports, repos, envs warm
    direct(cfg, str(root / "warmup-direct"), 0, cfg.engine.model)
    times: dict[str, list[float]] = {"direct": [], "prefect": []}
    extra: dict[str, list[float]] = {"direct": [], "prefect": []}
    for rep in range(args.reps):
        for name, arm in (("direct", direct), ("prefect", prefect)):
            run_dir = root / f"{name}-{rep}"
            start = time.perf_counter()
            arm(cfg, str(run_dir), 0, cfg.engine.model)
            times[name].append(time.perf_counter() - start)
            extra[name].append(times[name][-1] - stage_seconds(run_dir))
    d, p = statistics.median(times["direct"]), statistics.median(times["prefect"])
    for name in ("direct", "prefect"):
        print(f"{name:7} per iteration: {statistics.median(times[name]):6.2f} s "
              f"{[f'{t:.2f}' for t in times[name]]}; outside the stages: "
              f"{statistics.median(extra[name]):.2f} s")
    print(f"prefect / direct: {p / d:.3f}x (target <= 1.1x); Prefect's own cost per iteration: "
          f"{statistics.median(extra['prefect']) - statistics.median(extra['direct']):+.2f} s")


if __name__ == "__main__":
    main()
