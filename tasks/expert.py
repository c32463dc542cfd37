"""The `expert` task: expert trajectories of the train split for the SFT warm-up.

It writes the same two artifacts an RL iteration feeds its update, `rollouts.parquet` (the
resolved expert episodes, in the policy's own tokens) and `rewards.parquet` (reward 1, kept), so
the ordinary `update` task with `algorithm="rft"` trains on them. `agent.expert` refuses any
instance outside the train split before anything runs: the expert replays gold patches, and an
evaluation instance among them would leak its answer into the policy.
"""

from __future__ import annotations

from swe_rlvr.config import Config
from tasks import store
from tasks.rollout import read_instances, repo_store
from tasks.stage import artifact, finished, iter_dir, stage_task


@stage_task("expert")
def expert_rollouts(run_dir: str, iteration: int, instances_path: str, policy_dir: str,
                    cfg: Config) -> tuple[str, str]:
    """Write `iter_<k>/rollouts.parquet` and `rewards.parquet`; returns (rollouts, rewards) URLs."""
    rewards_url = artifact(run_dir, iteration, "rewards.parquet")
    key, done = finished(run_dir, iteration, "expert", instances_path=instances_path,
                         policy_dir=policy_dir, agent=cfg.agent, sandbox=cfg.sandbox,
                         style=cfg.orchestration.expert_style)
    if done:
        return done, rewards_url
    from agent.expert import expert_trajectories
    from trainer.scoring import expert_reward_rows
    instances = read_instances(instances_path)
    url = artifact(run_dir, iteration, "rollouts.parquet")
    with store.stage(iter_dir(run_dir, iteration), "expert", key) as st:
        trajs = expert_trajectories(instances, policy_dir, cfg.agent, cfg.sandbox, repo_store(cfg),
                                    workers=cfg.orchestration.max_workers,
                                    style=cfg.orchestration.expert_style)
        if instances and not trajs:
            raise ValueError(f"The expert resolved none of the {len(instances)} train instances, so "
                             f"the warm-up would train on nothing; its replies must fit the agent "
                             f"limits: raise agent.max_new_tokens (now {cfg.agent.max_new_tokens}) "
                             f"or agent.max_turns (now {cfg.agent.max_turns}).")
        rollouts = [t.to_row() for t in trajs]
        rewards = expert_reward_rows(rollouts)
        st.output("main", url, store.write_table(url, "rollouts", rollouts), rows=len(rollouts))
        st.output("rewards", rewards_url, store.write_table(rewards_url, "rewards", rewards),
                  rows=len(rewards))
    return url, rewards_url
