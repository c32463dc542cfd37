"""The `verifier` task: Agent-RLVR's test-time reward model, trained on one iteration's episodes.

With `eval.best_of_k` > 0, each iteration fine-tunes a verifier (`trainer.verifier`) from policy
k's backbone on that iteration's (problem, patch) -> resolved examples, unguided and guided episodes
alike, as the paper trains its reward model on its guided data. The evaluation of policy k+1 then
scores its samples with it and submits the top one per block of k (best@k, `tasks.metrics`).

The output, `iter_<k>/verifier/`, is an HF sequence-classification checkpoint sealed with a
`_SUCCESS` marker. No verifier is written (the task returns "") when best-of-k is off, or when the
iteration's patches are all resolved or all unresolved: there is nothing to rank by, and the next
evaluation reports pass@1 and pass@k without best@k (a warning says so).
"""

from __future__ import annotations

import logging
from pathlib import Path

from swe_rlvr.config import Config
from tasks import store
from tasks.reward import read_all
from tasks.rollout import read_instances
from tasks.stage import artifact, finished, iter_dir, stage_task

log = logging.getLogger(__name__)


def verifier_dir(run_dir: str, iteration: int) -> str:
    """Where iteration k's verifier lives (it exists only once that stage sealed it)."""
    return artifact(run_dir, iteration, "verifier")


@stage_task("verifier")
def verifier(run_dir: str, iteration: int, rollouts_path: list[str], validations_path: list[str],
             instances_path: str, policy_dir: str, cfg: Config) -> str:
    """Train `iter_<k>/verifier` from policy k on the iteration's graded episodes; "" if none."""
    if cfg.eval.best_of_k <= 0:
        return ""
    key, done = finished(run_dir, iteration, "verifier", rollouts_path=rollouts_path,
                         validations_path=validations_path, instances_path=instances_path,
                         policy_dir=policy_dir, verifier=cfg.verifier, seed=cfg.trainer.seed)
    if done:
        return done
    from trainer.verifier import verifier_examples
    problems = {i.instance_id: i.problem_statement for i in read_instances(instances_path)}
    examples = verifier_examples(read_all(rollouts_path, "rollouts"),
                                 read_all(validations_path, "validations"), problems)
    positives = sum(ex.label > 0.5 for ex in examples)
    url = verifier_dir(run_dir, iteration)
    if not 0 < positives < len(examples):
        log.warning("iteration %d: no verifier trained: %d of %d graded patches resolved, and a "
                    "verifier needs both kinds; the next evaluation reports no best@%d",
                    iteration, positives, len(examples), cfg.eval.best_of_k)
        _remove(url)   # a verifier from other inputs must not rerank the next evaluation
        return ""
    with store.stage(iter_dir(run_dir, iteration), "verifier", key) as st:
        _train(policy_dir, examples, url, cfg)
        st.info.update(examples=len(examples), positives=positives)
        st.output("main", url, store.seal_dir(url, examples=len(examples), positives=positives))
    return url


def _train(policy_dir: str, examples: list, url: str, cfg: Config) -> None:
    """Fine-tune into `<url>.partial`, then rename it to `url`: never a half-written verifier."""
    from trainer.verifier import train_verifier
    fs, path = store.fs_and_path(url)
    if "file" not in fs.protocol:
        raise ValueError(f"The verifier is trained into a local path; {url!r} is not one. Set "
                         f"orchestration.run_root to a local (or mounted) directory.")
    final, partial = Path(path), Path(f"{path}.partial")
    _remove(url)
    _remove(str(partial))   # a crashed earlier attempt's files
    log.info("training the verifier on %d examples (%s, %d epochs)", len(examples),
             cfg.verifier.objective, cfg.verifier.epochs)
    train_verifier(policy_dir, examples, partial, cfg.verifier, seed=cfg.trainer.seed)
    partial.rename(final)


def _remove(url: str) -> None:
    fs, path = store.fs_and_path(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)
