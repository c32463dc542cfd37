"""The top-level flows: `train` (optional expert warm-up and RFT warm-up, then N RL iterations with
evaluation every `eval.every`), `rft` (the RFT warm-up alone) and `evaluate` (pass@1 ± SEM and
pass@k of one model).

They take a config path and dotted overrides, so a deployment or the UI can start them with plain
parameters. Step k in MLflow is policy version k: its evaluation, and the training of iteration k.
With eval.best_of_k > 0, policy k's evaluation is reranked by the verifier of iteration k-1 (trained
on policy k-1's episodes); step 0 has none, so it reports pass@1 and pass@k only.
"""

from __future__ import annotations

from prefect import flow

from flows.iteration import evaluate_policy, rft_warmup, rl_iteration
from flows.preflight import preflight, start_policy
from flows.runners import task_runner
from flows.runs import RunResult, run_directory
from flows.warmup import expert_warmup
from swe_rlvr.config import Config, load_config
from tasks.registry import resolve_model
from tasks.report import summarize, track_step, tracked_run
from tasks.store import join
from tasks.tracking import tracking_uri
from tasks.verifier import verifier_dir


def _config(config: str | None, overrides: list[str] | None, trains: bool = True) -> Config:
    cfg = resolve_model(load_config(config, list(overrides or [])))  # models:/ -> a local copy
    preflight(cfg, check_prefect=False, trains=trains)  # the API is up: this flow runs on it
    return cfg


@flow(name="train")
def train_flow(config: str | None = None, overrides: list[str] | None = None) -> RunResult:
    """Train a policy: expert and RFT warm-ups (optional), then the RL iterations."""
    cfg = _config(config, overrides)
    run_dir, runner = run_directory(cfg), task_runner(cfg)
    with tracked_run(cfg, run_dir) as run_id:
        iterate = rl_iteration.with_options(task_runner=runner)
        evaluate = evaluate_policy.with_options(task_runner=runner)
        o = cfg.orchestration
        policy, base = start_policy(cfg), {}
        base_dir = join(run_dir, "base") if o.eval_base and (o.expert_warmup or o.rft_warmup) else None
        beside = base_dir if o.eval_beside and o.expert_warmup else None  # the expert needs no engine
        if base_dir and not beside:
            evaluate(cfg, base_dir, 0, policy)
        if o.expert_warmup:
            policy = expert_warmup.with_options(task_runner=runner)(cfg, run_dir, policy, beside)
        if base_dir:
            base = track_step(cfg, run_id, base_dir, 0, prefix="base_")
        if o.rft_warmup:
            policy = rft_warmup.with_options(task_runner=runner)(cfg, run_dir, policy)
        steps, checkpoints = {}, []
        verifier: str | None = None  # none at step 0
        for k in range(o.iterations):
            due = k % cfg.eval.every == 0 and bool(k or o.eval_start)
            if due and not o.eval_beside:
                evaluate(cfg, run_dir, k, policy, verifier)
            checkpoints.append(iterate(cfg, run_dir, k, policy, due and o.eval_beside, verifier))
            steps[k] = track_step(cfg, run_id, run_dir, k, policy)
            policy, verifier = checkpoints[-1], verifier_dir(run_dir, k)
        last = o.iterations
        evaluate(cfg, run_dir, last, policy, verifier)
        steps[last] = track_step(cfg, run_id, run_dir, last, policy, final=True)
        summarize(cfg, run_id, run_dir, steps, "train")
    return RunResult(run_dir, run_id, tracking_uri(cfg), policy, steps, checkpoints, base)


@flow(name="rft")
def rft_flow(config: str | None = None, overrides: list[str] | None = None,
             evaluate: bool = True) -> RunResult:
    """Rejection fine-tuning on the policy's own successes, then (unless `evaluate` is false) an
    evaluation of the result."""
    cfg = _config(config, overrides)
    run_dir, runner = run_directory(cfg, prefix="rft"), task_runner(cfg)
    with tracked_run(cfg, run_dir) as run_id:
        policy = rft_warmup.with_options(task_runner=runner)(cfg, run_dir, start_policy(cfg))
        if evaluate:
            evaluate_policy.with_options(task_runner=runner)(cfg, run_dir, 0, policy)
        steps = {0: track_step(cfg, run_id, run_dir, 0, policy, final=True)}
        summarize(cfg, run_id, run_dir, steps, "rft")
    return RunResult(run_dir, run_id, tracking_uri(cfg), policy, steps, [policy])


@flow(name="evaluate")
def evaluate_flow(config: str | None = None, overrides: list[str] | None = None,
                  model: str | None = None, split: str | None = None,
                  verifier: str | None = None) -> RunResult:
    """pass@1 (mean of eval.runs runs ± SEM) and pass@k of `model` (default engine.model); with
    `verifier` (a trained `iter_<k>/verifier`) and eval.best_of_k > 0, best@k too."""
    extra = ([f"engine.model={model}"] if model else []) + ([f"eval.split={split}"] if split else [])
    cfg = _config(config, list(overrides or []) + extra, trains=False)
    run_dir, policy = run_directory(cfg, prefix="eval"), start_policy(cfg)
    with tracked_run(cfg, run_dir, trains=False) as run_id:
        evaluate_policy.with_options(task_runner=task_runner(cfg))(cfg, run_dir, 0, policy, verifier)
        steps = {0: track_step(cfg, run_id, run_dir, 0)}
        summarize(cfg, run_id, run_dir, steps, "evaluate")
    return RunResult(run_dir, run_id, tracking_uri(cfg), policy, steps)
