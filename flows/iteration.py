"""One RL iteration (policy k -> k+1), the evaluation of a policy, and the RFT warm-up.

Each flow is a table of contents: every line submits a stage task to the flow's task runner
(threads by default, Ray when configured) and passes its future to the next, so Prefect sees the
DAG; each task returns the URL of what it wrote. The tasks skip work already done on the same
inputs, so rerunning a crashed flow resumes from the last finished stage.
"""

from __future__ import annotations

from prefect import flow
from prefect.futures import PrefectFuture

from flows.runners import Stages, stages
from swe_rlvr.config import Config
from tasks.store import join


@flow(name="rl-iteration", flow_run_name="iteration-{iteration}", validate_parameters=False)
def rl_iteration(cfg: Config, run_dir: str, iteration: int, policy_dir: str,
                 evaluate: bool = False, verifier_dir: str | None = None) -> str:
    """(curriculum ->) instances -> rollout -> validate -> guidance -> guided rollout -> validate
    -> reward -> update, and beside the update the best-of-k verifier (a no-op unless
    eval.best_of_k > 0). With `evaluate`, the evaluation of `policy_dir` (step `iteration`, as
    `evaluate_policy` would write it) runs beside the rollouts on the same engine, and the update
    waits for it."""
    s = stages(cfg, run_dir)
    evaluation = submit_evaluation(s, cfg, run_dir, iteration, policy_dir,
                                   verifier_dir) if evaluate else None
    pool = s.curriculum.submit(run_dir, iteration, cfg) if cfg.algorithm.curriculum else None
    insts = s.instances.submit(run_dir, iteration, cfg, cfg.instances.train_split, part="rl",
                               rotate=cfg.instances.rotate,
                               curriculum_path=pool)
    rolls = s.rollout.submit(run_dir, iteration, insts, policy_dir, cfg)
    grades = s.validate.submit(run_dir, iteration, rolls, insts, cfg)
    hints = s.guidance.submit(run_dir, iteration, grades, rolls, insts, cfg)
    g_rolls = s.rollout_guided.submit(run_dir, iteration, insts, policy_dir, cfg,
                                      out="rollouts_guided", guidance_path=hints,
                                      group_size=cfg.guidance.attempts)
    g_grades = s.validate_guided.submit(run_dir, iteration, g_rolls, insts, cfg)
    rewards = s.reward.submit(run_dir, iteration, [rolls, g_rolls], [grades, g_grades], cfg)
    verifier = s.verifier.submit(run_dir, iteration, [rolls, g_rolls], [grades, g_grades], insts,
                                 policy_dir, cfg)
    policy = s.update.submit(run_dir, iteration, policy_dir, [rolls, g_rolls], rewards,
                             [grades, g_grades], cfg, wait_for=[evaluation] if evaluation else None)
    verifier.result()  # raises if the verifier failed, like the update
    return policy.result()


@flow(name="evaluate-policy", flow_run_name="eval-step-{step}", validate_parameters=False)
def evaluate_policy(cfg: Config, run_dir: str, step: int, policy_dir: str,
                    verifier_dir: str | None = None) -> str:
    """pass@1 of `policy_dir` on eval.split: eval.runs episodes per instance, graded; EVAL rows
    (scored by `verifier_dir` for best@k when eval.best_of_k > 0)."""
    return submit_evaluation(stages(cfg, run_dir), cfg, run_dir, step, policy_dir,
                             verifier_dir).result()


def submit_evaluation(s: Stages, cfg: Config, run_dir: str, step: int, policy_dir: str,
                      verifier_dir: str | None = None) -> PrefectFuture[str]:
    """Submit the evaluation's stages (`s`: `flows.runners.stages` of `run_dir`) to the running
    flow; the future of its EVAL rows."""
    insts = s.eval_instances.submit(run_dir, step, cfg, cfg.eval.split, out="eval_instances",
                                    limit=cfg.eval.limit, rotate=False)
    rolls = s.eval_rollout.submit(run_dir, step, insts, policy_dir, cfg, out="eval_rollouts",
                                  group_size=cfg.eval.runs)
    grades = s.eval_validate.submit(run_dir, step, rolls, insts, cfg)
    return s.evaluate.submit(run_dir, step, rolls, grades, insts, verifier_dir, cfg)


@flow(name="rft-warmup", flow_run_name="rft-warmup", validate_parameters=False)
def rft_warmup(cfg: Config, run_dir: str, policy_dir: str) -> str:
    """Nebius's RFT: sample, grade, and fine-tune on the policy's own successes (`<run>/rft`)."""
    rft_dir = join(run_dir, "rft")
    s = stages(cfg, rft_dir)
    insts = s.instances.submit(rft_dir, 0, cfg, cfg.instances.train_split, part="rl")
    rolls = s.rollout.submit(rft_dir, 0, insts, policy_dir, cfg)
    grades = s.validate.submit(rft_dir, 0, rolls, insts, cfg)
    rewards = s.reward.submit(rft_dir, 0, [rolls], [grades], cfg)
    return s.update.submit(rft_dir, 0, policy_dir, [rolls], rewards, [grades], cfg,
                           algorithm="rft").result()
