"""The `update` task: policy k -> policy k+1 on the iteration's episodes.

`algorithm.name` picks the `trainer.loops` function: dapo/grpo train on the kept episodes with
their advantages, rft on the resolved ones, dpo on Agent-RLVR's (guided success, unguided
failure) pairs. `trainer.launch.train` runs it here, or on `trainer.num_gpus` GPUs
(`trainer.processes` CPU processes) under torchrun; the inference servers (this process's and
the run's shared one) are stopped first, so the trainer gets their memory. The trainer works in
`iter_<k>/update_work/` (its step checkpoints let a killed update resume there); the final
checkpoint is then moved to `iter_<k>/checkpoint/` and sealed with a `_SUCCESS` marker holding
its content hash, so a half-written checkpoint is never taken for done.
With nothing to learn from (every group dropped), policy k+1 is policy k, copied unchanged.
"""

from __future__ import annotations

from pathlib import Path

from swe_rlvr.config import Config
from tasks import store
from tasks.reward import read_all
from tasks.stage import artifact, finished, iter_dir, stage_task

LOOPS = {"dapo": "dapo", "grpo": "dapo", "rft": "rft", "dpo": "dpo"}
"""algorithm.name -> the `trainer.launch.LOOPS` loop that runs it."""


@stage_task("update")
def update(run_dir: str, iteration: int, policy_dir: str, rollouts_path: list[str],
           rewards_path: str, validations_path: list[str], cfg: Config,
           algorithm: str | None = None) -> str:
    """Train policy k; returns `iter_<k>/checkpoint` (policy k+1). `algorithm`: this update's
    (the warm-ups' rft), else algorithm.name."""
    algorithm = algorithm or cfg.algorithm.name
    if algorithm not in LOOPS:
        raise ValueError(f"Unknown algorithm {algorithm!r}; choose one of: {', '.join(LOOPS)}.")
    key, done = finished(run_dir, iteration, "update", policy_dir=policy_dir,
                         rollouts_path=rollouts_path, rewards_path=rewards_path,
                         validations_path=validations_path, trainer=cfg.trainer,
                         algorithm=cfg.algorithm, name=algorithm, guidance_mode=cfg.guidance.mode)
    if done:
        return done
    episodes = read_all(rollouts_path, "rollouts")
    rewards = store.read_rows(rewards_path, "rewards")
    grades = read_all(validations_path, "validations")
    ckpt, work = artifact(run_dir, iteration, "checkpoint"), artifact(run_dir, iteration,
                                                                       "update_work")
    metrics_url = artifact(run_dir, iteration, "train_metrics.parquet")
    with store.stage(iter_dir(run_dir, iteration), "update", key) as st:
        final, rows = _train(algorithm, policy_dir, episodes, rewards, grades, cfg, _local(work))
        _publish(final, policy_dir, ckpt)
        st.output("main", ckpt, store.seal_dir(ckpt, policy_version=iteration + 1,
                                               algorithm=algorithm))
        st.output("train_metrics", metrics_url,
                  store.write_table(metrics_url, "train_metrics", rows), rows=len(rows))
        fs, path = store.fs_and_path(work)
        fs.rm(path, recursive=True)
    return ckpt


def _train(algorithm: str, policy_dir: str, rollouts: list[dict], rewards: list[dict],
           grades: list[dict], cfg: Config, work: Path) -> tuple[Path, list[dict]]:
    from agent.engines.served import release_all
    from trainer.episodes import episodes_from_rows
    from trainer.launch import train
    episodes = episodes_from_rows(rollouts, rewards, kept_only=algorithm in ("dapo", "grpo"))
    if algorithm == "dpo":
        from swe_rlvr.artifacts import outcomes
        from trainer.pairs import build_pairs
        by_id = {e.episode_id: e for e in episodes}
        episodes = [(by_id[c], by_id[r]) for c, r in build_pairs(outcomes(rollouts, grades))
                    if c in by_id and r in by_id]
    release_all()   # inference servers give their memory to the trainer (here or its ranks)
    result = train(LOOPS[algorithm], Path(policy_dir), episodes, cfg, work)
    return Path(result.checkpoint), result.metrics


def _publish(final: Path, policy_dir: str, ckpt: str) -> None:
    """Move the trainer's final checkpoint to `ckpt`, or copy policy k when nothing changed."""
    fs, dst = store.fs_and_path(ckpt)
    if fs.exists(dst):
        fs.rm(dst, recursive=True)
    if final.resolve() == Path(policy_dir).resolve():
        fs.copy(str(final), dst, recursive=True)
    else:
        fs.mv(str(final), dst, recursive=True)
    if fs.exists(f"{dst}/{store.SUCCESS}"):
        fs.rm(f"{dst}/{store.SUCCESS}")


def _local(url: str) -> Path:
    fs, path = store.fs_and_path(url)
    if "file" not in fs.protocol:
        raise ValueError(f"The trainer writes checkpoints to a local path; {url!r} is not one. "
                         f"Set orchestration.run_root to a local (or mounted) directory.")
    Path(path).mkdir(parents=True, exist_ok=True)
    return Path(path)
