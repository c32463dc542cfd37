"""The `evaluate` task: EVAL rows (one per instance and run) from the evaluation's episodes.

The evaluation's episodes come from the same `rollout` and `validate` tasks as training (same
scaffold, sandbox and grading), on `eval.split` with `eval.runs` samples per instance; pass@1 ± SEM
and pass@k are summarised from these rows by `tasks.metrics.eval_summary` and go to MLflow.

With `eval.best_of_k` > 0 and a trained verifier (`tasks.verifier`, sealed at `verifier_path`),
every episode's (issue, patch) is scored and the score is stored in `verifier_score`; best@k, the
resolve rate of the top-scored patch of each block of k runs, is summarised beside pass@1 and
pass@k. Without a verifier (step 0, or an iteration with nothing to rank) the scores stay empty.

Beside `eval.parquet` the task writes `predictions.jsonl`, SWE-bench's predictions file
(instance_id, model_name_or_path, model_patch), so `swe-rlvr grade` or SWE-bench's own harness can
grade the evaluated patches again. It holds the first run (sample 0) of each instance: SWE-bench
takes one patch per instance, and the first run is one of the runs that pass@1 averages.
"""

from __future__ import annotations

import json
import logging
import uuid

from swe_rlvr.config import Config
from tasks import store
from tasks.metrics import eval_rows
from tasks.stage import artifact, finished, iter_dir, stage_task

log = logging.getLogger(__name__)

PREDICTIONS = "predictions.jsonl"
"""SWE-bench's predictions file of an evaluation step, beside its eval.parquet."""


@stage_task("evaluate")
def evaluate(run_dir: str, iteration: int, rollouts_path: str, validations_path: str,
             instances_path: str | None = None, verifier_path: str | None = None,
             cfg: Config | None = None) -> str:
    """Write `iter_<k>/eval.parquet` (scored by the verifier when one is given); returns its URL."""
    verifier_path = _usable_verifier(verifier_path, cfg)
    inputs: dict[str, object] = dict(rollouts_path=rollouts_path, validations_path=validations_path)
    if verifier_path:
        inputs.update(instances_path=instances_path, verifier_path=verifier_path,
                      max_tokens=cfg.verifier.max_tokens)
    key, done = finished(run_dir, iteration, "eval", **inputs)
    if done:
        return done
    episodes = store.read_rows(rollouts_path, "rollouts")
    grades = store.read_rows(validations_path, "validations")
    url = artifact(run_dir, iteration, "eval.parquet")
    with store.stage(iter_dir(run_dir, iteration), "eval", key) as st:
        scores = (_scores(episodes, instances_path, verifier_path, cfg)
                  if verifier_path and episodes else None)
        rows = eval_rows(episodes, grades, scores)
        st.output("main", url, store.write_table(url, "eval", rows), rows=len(rows))
        preds = artifact(run_dir, iteration, PREDICTIONS)
        count = write_predictions(preds, episodes, model_name(run_dir, episodes))
        st.output("predictions", preds, store.content_hash(preds), rows=count)
    return url


def model_name(run_dir: str, episodes: list[dict]) -> str:
    """`model_name_or_path` of an evaluation: `<run name>-policy<version>`, e.g.
    "train-20250101-120000-policy2" (SWE-bench names a results directory after it)."""
    parts = [p for p in run_dir.rstrip("/").split("/") if p]
    name = "-".join(parts[-2:]) if parts[-1:] == ["base"] else parts[-1]
    version = episodes[0]["policy_version"] if episodes else 0
    return f"{name}-policy{version}"


def write_predictions(url: str, episodes: list[dict], model: str) -> int:
    """SWE-bench's predictions JSON lines, from each instance's first run (sample 0), atomically;
    returns how many lines it wrote."""
    first = sorted((e for e in episodes if e["sample"] == 0 and not e["guided"]),
                   key=lambda e: e["instance_id"])
    lines = [json.dumps({"instance_id": e["instance_id"], "model_name_or_path": model,
                         "model_patch": e["patch"] or ""}) + "\n" for e in first]
    fs, path = store.fs_and_path(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with fs.open(tmp, "w") as fh:
        fh.writelines(lines)
    fs.mv(tmp, path)
    return len(lines)


def _usable_verifier(verifier_path: str | None, cfg: Config | None) -> str | None:
    """`verifier_path` when best-of-k is on and the verifier was sealed, else None."""
    if not verifier_path or cfg is None or cfg.eval.best_of_k <= 0:
        return None
    if not store.is_sealed(verifier_path):
        log.warning("no verifier at %s (that iteration had nothing to rank); this evaluation "
                    "reports no best@%d", verifier_path, cfg.eval.best_of_k)
        return None
    return verifier_path


def _scores(episodes: list[dict], instances_path: str | None, verifier_path: str, cfg: Config
            ) -> dict[str, float]:
    """episode id -> the verifier's score of its (issue, patch)."""
    from tasks.rollout import read_instances
    from trainer.verifier import score_texts, verifier_text
    if not instances_path:
        raise ValueError("Scoring evaluation episodes needs the instances file (instances_path) "
                         "for the issue texts; pass the eval_instances artifact.")
    problems = {i.instance_id: i.problem_statement for i in read_instances(instances_path)}
    texts = [verifier_text(problems[e["instance_id"]], e["patch"] or "") for e in episodes]
    log.info("scoring %d evaluation patches with the verifier %s", len(texts), verifier_path)
    scores = score_texts(_local_path(verifier_path), texts, max_tokens=cfg.verifier.max_tokens)
    return {e["episode_id"]: s for e, s in zip(episodes, scores)}


def _local_path(url: str) -> str:
    fs, path = store.fs_and_path(url)
    if "file" not in fs.protocol:
        raise ValueError(f"The verifier is loaded from a local path; {url!r} is not one. Set "
                         f"orchestration.run_root to a local (or mounted) directory.")
    return path
