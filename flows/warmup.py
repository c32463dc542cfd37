"""The expert warm-up (`orchestration.expert_warmup`): SFT on expert episodes of the train split.

Small policies write almost no well-formed command zero-shot, so RFT and RL get no success to
learn from. The warm-up gives them one: the expert replays the gold fixes of the train split
through the real tools, and the policy is fine-tuned on those episodes (`<run>/warmup/iter_0`).
"""

from __future__ import annotations

import dataclasses

from prefect import flow

from flows.iteration import submit_evaluation
from flows.runners import stages
from swe_rlvr.config import Config
from tasks.store import join


@flow(name="expert-warmup", flow_run_name="expert-warmup", validate_parameters=False)
def expert_warmup(cfg: Config, run_dir: str, policy_dir: str,
                  base_eval_dir: str | None = None) -> str:
    """train instances -> expert episodes (graded, resolved only) -> SFT; returns the checkpoint.
    With `base_eval_dir`, the evaluation of `policy_dir` there (step 0, the `base` row) runs
    beside the expert's episodes, which need no engine, and the SFT waits for it."""
    from tasks.expert import expert_rollouts
    warm_dir = join(run_dir, "warmup")
    s = stages(cfg, warm_dir)
    base = submit_evaluation(stages(cfg, base_eval_dir), cfg, base_eval_dir, 0,
                             policy_dir) if base_eval_dir else None
    expert = expert_rollouts.with_options(  # the stage tasks' retries and run-local cache
        retries=s.update.retries, retry_delay_seconds=s.update.retry_delay_seconds,
        cache_policy=s.update.cache_policy, result_storage=s.update.result_storage)
    # every train instance of the expert's part (orchestration.expert_share): instances.limit
    # sizes RL iterations, and the expert's replays are cheap next to the SFT on them
    insts = s.instances.submit(warm_dir, 0, cfg, cfg.instances.train_split, limit=0,
                               part="expert")
    rolls, rewards = expert.submit(warm_dir, 0, insts, policy_dir, cfg).result()
    sft = dataclasses.replace(cfg, trainer=dataclasses.replace(
        cfg.trainer, rft_epochs=cfg.orchestration.expert_epochs))     # RFT's SFT, warm-up passes
    return s.update.submit(warm_dir, 0, policy_dir, [rolls], rewards, [], sft, algorithm="rft",
                           wait_for=[base] if base else None).result()
