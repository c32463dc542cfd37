"""The `reward` task: reward parts, group advantages and the dynamic-sampling filter.

Unguided and guided episodes of the iteration are scored together (they form separate groups,
see `trainer.scoring`); infrastructure failures are dropped as no sample.
"""

from __future__ import annotations

from swe_rlvr.config import Config
from tasks import store
from tasks.stage import artifact, finished, iter_dir, stage_task


def read_all(paths: list[str], name: str) -> list[dict]:
    """Rows of every existing file in `paths`, in order."""
    return [row for p in paths if p for row in store.read_rows(p, name)]


@stage_task("reward")
def reward(run_dir: str, iteration: int, rollouts_path: list[str], validations_path: list[str],
           cfg: Config) -> str:
    """REWARDS rows for every episode of `rollouts_path`; returns the rewards file's URL."""
    key, done = finished(run_dir, iteration, "rewards", rollouts_path=rollouts_path,
                         validations_path=validations_path, reward=cfg.reward,
                         algorithm=cfg.algorithm, agent=cfg.agent, guidance_mode=cfg.guidance.mode)
    if done:
        return done
    from trainer.scoring import reward_rows
    episodes, grades = read_all(rollouts_path, "rollouts"), read_all(validations_path, "validations")
    url = artifact(run_dir, iteration, "rewards.parquet")
    with store.stage(iter_dir(run_dir, iteration), "rewards", key) as st:
        rows = reward_rows(episodes, grades, cfg.reward, cfg.algorithm, cfg.agent.context_tokens,
                           cfg.guidance.mode)
        st.output("main", url, store.write_table(url, "rewards", rows), rows=len(rows))
    return url
