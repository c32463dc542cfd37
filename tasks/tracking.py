"""MLflow tracking of a training run: one MLflow run per run directory, metrics at step = iteration.

- The run's id is kept in `<run_dir>/mlflow_run.json`, so a resumed training run keeps logging to
  the same MLflow run; each iteration's logging is marked done (`_tracking/iter_<k>.json`) so a
  resume never logs a step twice.
- Params: the whole config, flattened (`swe_rlvr.config.flatten`). Tags: the Prefect flow run that
  last opened the run (id, and its UI URL when one is configured) and the git commit of the code
  (`mlflow.source.git.commit`; outside a git checkout $SWE_RLVR_GIT_COMMIT, which the team image
  sets, else left out). The experiment is tagged
  `mlflow.experimentKind=custom_model_development`, so the MLflow 3 UI opens it as model training
  rather than as a GenAI app.
- Metrics per iteration: pass@1 ± SEM and pass@k (when evaluated; best@k beside them when a
  verifier reranked the evaluation, `best<k>`), train resolve rate, guided
  recovery rate, zero-advantage group fraction, mean turns, format-error and submit rates, mean
  reward, loss, clip fractions, entropy, sampler mismatch, tokens/s and each stage's wall time.
- Artifacts: each iteration's Parquet files, its checkpoint, and `plots/progress.png` (pass@1 and
  mean reward per iteration).
- Description (`mlflow.note.content`): the recipe in one paragraph (`describe`), with the
  Prefect flow run's link.
- Datasets (the run's inputs): the train split's pool at the start, and per logged step the RL
  window the iteration trained on and the evaluation set, each named, with a digest of its
  instances (`instances_digest`: two runs on the same instances show the same digest).
- Traces: every evaluation episode and a sample of the training ones (`tasks.traces`).
- Registry, retraining decisions and `models:/` URIs: `tasks.registry`.
The default store is SQLite under the run root with the artifact location beside it; a team
server (`infra/docker-compose.yml`) is one `tracking.mlflow_uri` away (`tasks.tracking_store`).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from swe_rlvr.artifacts import outcomes
from swe_rlvr.config import Config, flatten
from tasks import metrics, store
from tasks.registry import register
from tasks.runlog import run_logger
from tasks.tracking_store import artifact_location, client, tracking_uri

RUN_FILE = "mlflow_run.json"
EVAL_METRICS = ("pass", "best", "eval_")
"""The metrics an evaluation measures (pass@1, pass@k, best@k, eval_*): linked to its dataset."""
NOTE = "mlflow.note.content"
"""The tag the MLflow UI shows as a run's description."""
PLOT = "plots/progress.png"
PARQUETS = ("instances", "rollouts", "validations", "guidance", "rollouts_guided",
            "validations_guided", "rewards", "train_metrics", "eval_instances", "eval_rollouts",
            "eval_validations", "eval")
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
ML_VIEW = "workflowType=machine_learning"
"""The MLflow UI's model-training view, as a URL query (else a fresh browser opens GenAI's)."""
"""The value the MLflow 3 UI reads to show runs, metrics and models instead of traces."""
STEP_LINE = (("train_episodes", "{:.0f} episodes"), ("train_resolve_rate", "resolve rate {:.3f}"),
             ("guided_recovery_rate", "guided recovery {:.3f}"), ("loss", "loss {:.4g}"),
             ("tokens_per_s", "{:.0f} trained tokens/s"),
             ("gen_tokens_per_s", "{:.0f} sampled tokens/s"))


def experiment_id(mlc: Any, cfg: Config) -> str:
    """The experiment's id (created on first use), tagged as model training unless a kind is set."""
    exp = mlc.get_experiment_by_name(cfg.tracking.experiment)
    if exp is None:
        return mlc.create_experiment(cfg.tracking.experiment, tags=EXPERIMENT_KIND,
                                     artifact_location=artifact_location(cfg))
    for key, value in EXPERIMENT_KIND.items():
        if key not in exp.tags:
            mlc.set_experiment_tag(exp.experiment_id, key, value)
    return exp.experiment_id


def run_tags() -> dict[str, str]:
    """Where this run comes from: the Prefect flow run (id; UI URL when PREFECT_UI_URL is known)
    and the git commit of this checkout (tags left out when unknown)."""
    from prefect.runtime import flow_run
    from prefect.utilities.urls import url_for
    flow_run_id = flow_run.id
    tags = {"prefect.flow_run_id": flow_run_id or "",
            "prefect.flow_run_url": (url_for("flow-run", obj_id=flow_run_id) or "")
            if flow_run_id else "",
            "mlflow.source.git.commit": git_commit()}
    return {k: v for k, v in tags.items() if v}


def git_commit(where: Path = Path(__file__).parent) -> str:
    """`git rev-parse HEAD` of the checkout holding this code. Outside one, $SWE_RLVR_GIT_COMMIT,
    which infra/team/build.sh sets in the team image to the commit it copied; else ""."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True,
                              text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        done = None
    if done is not None and done.returncode == 0:
        return done.stdout.strip()
    return os.environ.get("SWE_RLVR_GIT_COMMIT", "")


def open_run(cfg: Config, run_dir: str, trains: bool = True) -> str:
    """The MLflow run of `run_dir` (created, with the config as params, its description and, when
    the run `trains`, its train pool as a dataset, on first use)."""
    saved = store.read_json(store.join(run_dir, RUN_FILE))
    mlc = client(cfg)
    tags = run_tags()
    if saved and saved.get("tracking_uri") == tracking_uri(cfg):
        mlc.update_run(saved["run_id"], status="RUNNING")
        for key, value in {**tags, NOTE: describe(cfg, tags, trains)}.items():   # the resuming flow run
            mlc.set_tag(saved["run_id"], key, value)
        return saved["run_id"]
    from mlflow.entities import Param
    run = mlc.create_run(experiment_id(mlc, cfg), run_name=run_dir.rstrip("/").rsplit("/", 1)[-1],
                         tags={"swe_rlvr.run_dir": run_dir, **tags,
                                 NOTE: describe(cfg, tags, trains)})
    params = [Param(k, str(v)[:6000]) for k, v in sorted(flatten(cfg).items())]
    for i in range(0, len(params), 100):
        mlc.log_batch(run.info.run_id, params=params[i:i + 100])
    if trains:  # an evaluation's instances are logged with its step (eval-<split>)
        _log_pool(cfg, mlc, run.info.run_id)
    store.write_json(store.join(run_dir, RUN_FILE),
                     {"run_id": run.info.run_id, "tracking_uri": tracking_uri(cfg)})
    return run.info.run_id


def describe(cfg: Config, tags: dict[str, str], trains: bool = True) -> str:
    """The run's recipe in one paragraph: algorithm, model, G, iterations, instances, evaluation,
    commit and the Prefect flow run (markdown, the MLflow UI's description); a run that does not
    `trains` is described by its evaluation alone."""
    inst, ev, orch = cfg.instances, cfg.eval, cfg.orchestration
    warmups = [name for name, on in (("expert SFT warm-up", orch.expert_warmup),
                                     ("RFT warm-up", orch.rft_warmup)) if on]
    tiers = f" (tiers {', '.join(inst.tiers)})" if inst.tiers else ""
    evaluated = (f"evaluated every {ev.every} iteration(s) on {ev.limit or 'all'} `{ev.split}` "
                 f"instances x {ev.runs} run(s)")
    if trains:
        text = (f"{cfg.algorithm.name.upper()} on `{cfg.engine.model}`"
                f"{' after ' + ' and '.join(warmups) if warmups else ''}: {orch.iterations} "
                f"iteration(s) of {inst.limit or 'all'} `{inst.train_split}` instances of "
                f"`{inst.source}`{tiers} x G={cfg.algorithm.group_size} episodes, guidance "
                f"{'on (' + cfg.guidance.mode + ')' if cfg.guidance.enabled else 'off'}; {evaluated}.")
    else:
        text = (f"Evaluation of `{cfg.engine.model}` on {ev.limit or 'all'} `{ev.split}` instances of "
                f"`{inst.source}` x {ev.runs} run(s).")
    commit = tags.get("mlflow.source.git.commit")
    if commit:
        text += f" Commit `{commit[:12]}`."
    if tags.get("prefect.flow_run_url"):
        text += f" Prefect flow run: {tags['prefect.flow_run_url']}"
    elif tags.get("prefect.flow_run_id"):
        text += f" Prefect flow run `{tags['prefect.flow_run_id']}`."
    return text


def instances_digest(rows: list[dict]) -> str:
    """A digest of a set of instances (ids and base commits, in any order)."""
    import hashlib
    keys = sorted(f"{r['instance_id']}@{r.get('base_commit', '')}" for r in rows)
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:10]


def dataset_input(name: str, rows: list[dict], context: str, source: dict) -> Any:
    """An MLflow DatasetInput naming a set of instances (digest, source, size)."""
    import json

    from mlflow.entities import Dataset, DatasetInput, InputTag
    dataset = Dataset(name=name, digest=instances_digest(rows), source_type="swe-rlvr",
                      source=json.dumps(source, sort_keys=True),
                      profile=json.dumps({"instances": len(rows)}))
    return DatasetInput(dataset, tags=[InputTag("mlflow.data.context", context)])


def _source(cfg: Config, split: str) -> dict:
    return {"source": cfg.instances.source, "split": split, "tiers": list(cfg.instances.tiers)}


def _log_pool(cfg: Config, mlc: Any, run_id: str) -> None:
    from swe_rlvr.loaders import load_instances
    from tasks.instances import pool
    loaded = load_instances(cfg.instances.source, format=cfg.instances.format,
                            skip_invalid=cfg.instances.skip_invalid)
    chosen = pool(loaded.instances, cfg.instances.train_split, cfg.instances.ids,
                  cfg.instances.tiers)
    rows = [{"instance_id": i.instance_id, "base_commit": i.base_commit} for i in chosen]
    split = cfg.instances.train_split
    mlc.log_inputs(run_id, datasets=[dataset_input(f"{split}-pool", rows, "training",
                                                   _source(cfg, split))])


def _log_step_datasets(cfg: Config, mlc: Any, run_id: str, run_dir: str,
                       step: int) -> dict[str, Any]:
    """Log iter_<step>'s RL window and evaluation set as run inputs; returns their MLflow
    Datasets by context ("train", "eval")."""
    it = store.join(run_dir, f"iter_{step}")
    inputs = {}
    for name, dataset, context, split in (
            ("instances", f"rl-window-{step}", "train", cfg.instances.train_split),
            ("eval_instances", f"eval-{cfg.eval.split}", "eval", cfg.eval.split)):
        url = store.join(it, f"{name}.parquet")
        if store.exists(url):
            rows = store.read_rows(url, "instances")
            inputs[context] = dataset_input(dataset, rows, context, _source(cfg, split))
    if inputs:
        mlc.log_inputs(run_id, datasets=list(inputs.values()))
    return {context: given.dataset for context, given in inputs.items()}


def iteration_metrics(run_dir: str, iteration: int, k: int, best_k: int = 0, *,
                      guidance_mode: str) -> dict[str, float]:
    """Every metric of iteration k, from its artifacts (missing artifacts contribute nothing)."""
    it = store.join(run_dir, f"iter_{iteration}")

    def rows(name: str, schema: str) -> list[dict]:
        url = store.join(it, f"{name}.parquet")
        return store.read_rows(url, schema) if store.exists(url) else []

    rollouts, grades = rows("rollouts", "rollouts"), rows("validations", "validations")
    guided, guided_grades = rows("rollouts_guided", "rollouts"), rows("validations_guided", "validations")
    out = metrics.rollout_summary(rollouts, grades) if rollouts else {}
    out.update(_recovery(outcomes(rollouts + guided, grades + guided_grades),
                         rows("guidance", "guidance")))
    if store.exists(store.join(it, "rewards.parquet")):
        out.update(metrics.reward_summary(rows("rewards", "rewards"), guidance_mode))
    if store.exists(store.join(it, "train_metrics.parquet")):
        out.update(metrics.train_summary(rows("train_metrics", "train_metrics")))
    if store.exists(store.join(it, "eval.parquet")):
        out.update(metrics.eval_summary(rows("eval", "eval"), k, best_k))
        out.update({f"eval_{key}": v for key, v in
                    metrics.episode_stats(rows("eval_rollouts", "rollouts")).items()})
    manifests = store.stage_manifests(it)
    out.update(metrics.stage_times(manifests))
    out.update(metrics.pool_sizes(manifests))
    return out


def _recovery(episodes: list, guidance: list[dict]) -> dict[str, float]:
    if not guidance:
        return {}
    return metrics.recovery_metrics(episodes, {g["instance_id"] for g in guidance}, guidance)


def log_step(cfg: Config, run_id: str, run_dir: str, step: int, policy_dir: str | None = None,
             prefix: str = "", final: bool = False) -> dict[str, float]:
    """Log `iter_<step>`'s metrics at `step` and its artifacts, once; returns the metrics.

    Step k holds the evaluation of policy k and the training of iteration k (policy k -> k+1).
    `policy_dir`, when it is a sealed checkpoint this run trained, is policy k: it is logged and
    registered with its pass@1 (with tracking.log_checkpoints, or when `final` with
    tracking.register_final). `prefix` names a side evaluation logged into the same run (the
    `base_` model evaluated before the warm-ups): it prefixes the metric and artifact names.
    """
    marker = store.join(run_dir, "_tracking", f"step_{step}.json")
    done = store.read_json(marker)
    if done is not None:
        return done["metrics"]
    values = iteration_metrics(run_dir, step, cfg.eval.k, cfg.eval.best_of_k,
                               guidance_mode=cfg.guidance.mode)
    mlc = client(cfg)
    registered: dict = {}
    registers = cfg.tracking.log_checkpoints or (final and cfg.tracking.register_final)
    if policy_dir and registers and store.is_sealed(policy_dir):
        registered = register(cfg, mlc, run_id, run_dir, step, policy_dir, values.get("pass1"))
    from mlflow.entities import Metric
    now, model_id = int(time.time() * 1000), registered.get("model_id")
    datasets = _log_step_datasets(cfg, mlc, run_id, run_dir, step)
    evaluated = datasets.get("eval")
    mlc.log_batch(run_id, metrics=[
        Metric(prefix + k, float(v), now, step, model_id=model_id,
               **({"dataset_name": evaluated.name, "dataset_digest": evaluated.digest}
                  if evaluated is not None and k.startswith(EVAL_METRICS) else {}))
        for k, v in values.items()])
    if cfg.tracking.log_artifacts:
        _log_files(mlc, run_id, run_dir, step, prefix.rstrip("_"))
        _plot(mlc, run_id)
    from tasks.traces import log_step_traces
    log_step_traces(cfg, mlc, run_id, run_dir, step)
    store.write_json(marker, {"metrics": values, "registered": registered})
    run_logger().info(step_line(step, values, policy_dir, registered, prefix))
    return values


def step_line(step: int, values: dict[str, float], policy_dir: str | None = None,
              registered: dict | None = None, prefix: str = "") -> str:
    """One line of what step k logged: pass@1, episodes, resolve rate, loss, tokens/s, and the
    policy's checkpoint (with its registered version when there is one)."""
    parts = [f"pass@1 {values['pass1']:.3f} ± {values.get('pass1_sem', 0.0):.3f}"
             ] if "pass1" in values else []
    parts += [fmt.format(values[key]) for key, fmt in STEP_LINE if key in values]
    if policy_dir:
        parts.append(f"policy {policy_dir}")
    if registered:
        parts.append(f"registered as version {registered['version']} "
                     f"({', '.join(registered['aliases'])})")
    return f"{prefix}step {step}: " + (", ".join(parts) or "nothing evaluated or trained")


def _log_files(mlc: Any, run_id: str, run_dir: str, iteration: int, folder: str = "") -> None:
    it = store.join(run_dir, f"iter_{iteration}")
    for name in PARQUETS:
        url = store.join(it, f"{name}.parquet")
        if store.exists(url):
            mlc.log_artifact(run_id, store.local_copy(url), "/".join(filter(None, [folder,
                                                                          f"iter_{iteration}"])))


def _plot(mlc: Any, run_id: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in (("pass1", "pass@1"), ("reward_mean", "mean reward"),
                       ("base_pass1", "pass@1 before the warm-ups")):
        hist = sorted(mlc.get_metric_history(run_id, key), key=lambda m: m.step)
        if hist:
            ax.plot([m.step for m in hist], [m.value for m in hist], marker="o", label=label,
                    linestyle="-" if len(hist) > 1 else "none")
    ax.set_xlabel("iteration")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    mlc.log_figure(run_id, fig, PLOT)
    plt.close(fig)


def close_run(cfg: Config, run_id: str, status: str = "FINISHED") -> None:
    client(cfg).set_terminated(run_id, status=status)


def run_link(cfg: Config, run_id: str) -> str:
    """A URL of the run in the MLflow UI (http stores) or the command that opens one. The URL
    names the model-training view: MLflow 3's UI opens a run link in its GenAI view otherwise,
    whatever the experiment's kind."""
    uri = tracking_uri(cfg)
    if uri.startswith("http"):
        exp = client(cfg).get_run(run_id).info.experiment_id
        base = (cfg.tracking.ui_url or uri).rstrip("/")
        return f"{base}/#/experiments/{exp}/runs/{run_id}?{ML_VIEW}"
    return f"mlflow ui --backend-store-uri {uri}  (run {run_id})"
