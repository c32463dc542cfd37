"""The training flow end to end under a real Prefect API and a real MLflow (SQLite) store.

The policy is the package's scripted `weak` policy (`engine.name: scripted:weak`) over a tiny
random Qwen2 checkpoint: unguided it lists the repo and submits nothing; guided (the hint names
the file to fix) it applies the gold patch. So every stage has real work: failures get guidance,
guided re-attempts resolve, DPO pairs exist and the update trains the tiny model for real.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from swe_rlvr.artifacts import SCHEMA_KEY
from tasks import store

ITERATIONS = 2
STAGES = ("instances", "rollouts", "validations", "guidance", "rollouts_guided",
          "validations_guided", "rewards", "update")
EVAL_STAGES = ("eval_instances", "eval_rollouts", "eval_validations", "eval")
TIMING_COLUMNS = {"gen_s", "exec_s", "wall_s", "duration_s", "tokens_per_s", "turns_json"}


def overrides(root: Path, model: Path, name: str) -> list[str]:
    return [f"orchestration.run_root={root}", f"orchestration.run_name={name}",
            f"orchestration.iterations={ITERATIONS}", "orchestration.max_workers=1",
            "orchestration.rft_warmup=true", "orchestration.eval_base=true",
            "orchestration.eval_beside=true",
            "instances.source=builtin", "instances.limit=2",
            f"sandbox.workdir={root / 'work'}", f"sandbox.env_cache={root.parent / 'envs'}",
            f"engine.model={model}", "engine.name=scripted:weak", "engine.max_batch=1",
            "agent.scaffold=bash", "agent.max_turns=8", "agent.context_tokens=8192",
            "reward.l_thr=6", "reward.t_max=8", "algorithm.name=dpo", "algorithm.group_size=2",
            "guidance.attempts=1", "trainer.sft_batch_size=2", "trainer.dpo_batch_pairs=2",
            "trainer.pack_tokens=8192", "eval.runs=2", "eval.k=2", "eval.limit=2"]


@pytest.fixture(scope="module")
def since():
    """When this module's first run started: the worker's Prefect database also holds the runs
    of every module that ran on the worker before this one."""
    return datetime.now(UTC)


def runs_since(client, since) -> tuple[list, list]:
    """(flow runs, task runs) that started after `since`."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterStartTime,
        TaskRunFilter,
        TaskRunFilterStartTime,
    )
    flows = client.read_flow_runs(flow_run_filter=FlowRunFilter(
        start_time=FlowRunFilterStartTime(after_=since)))
    tasks = client.read_task_runs(task_run_filter=TaskRunFilter(
        start_time=TaskRunFilterStartTime(after_=since)))
    return flows, tasks


@pytest.fixture(scope="module")
def trained(since, prefect_api, tmp_path_factory, tiny_model_dir):
    """One uninterrupted 2-iteration training run; (result, its overrides, seconds)."""
    from flows import train
    root = tmp_path_factory.mktemp("runs")
    args = overrides(root, tiny_model_dir, "straight")
    start = time.perf_counter()
    result = train(None, args)
    return result, args, time.perf_counter() - start


@pytest.mark.e2e
def test_every_stage_ran_and_every_artifact_has_its_schema(trained):
    result, _, _ = trained
    run = Path(result.run_dir)
    for k in range(ITERATIONS):
        done = store.stage_manifests(str(run / f"iter_{k}"))
        assert set(STAGES) <= set(done), f"iteration {k} lacks stages {set(STAGES) - set(done)}"
    for k in range(ITERATIONS + 1):
        assert set(EVAL_STAGES) <= set(store.stage_manifests(str(run / f"iter_{k}")))
    for path in run.rglob("*.parquet"):
        name = pq.read_schema(path).metadata[SCHEMA_KEY].decode().split("/")[0]
        store.read_table(str(path), name)                         # refuses a wrong version
    assert not list(run.rglob("*.tmp-*")) and not list(run.rglob("*.running"))
    rewards = store.read_rows(str(run / "iter_0" / "rewards.parquet"), "rewards")
    assert {r["guided"] for r in rewards} == {False, True}
    assert result.artifacts(0)["rollouts"].endswith("iter_0/rollouts.parquet")


@pytest.mark.e2e
def test_metrics_at_every_step_and_the_registry(trained):
    from mlflow.tracking import MlflowClient
    result, _, _ = trained
    mlc = MlflowClient(result.tracking_uri, registry_uri=result.tracking_uri)
    steps = lambda key: sorted(m.step for m in mlc.get_metric_history(result.mlflow_run_id, key))  # noqa: E731
    assert steps("pass1") == steps("pass1_sem") == [0, 1, 2]
    for key in ("train_resolve_rate", "guided_recovery_rate", "zero_advantage_group_fraction",
                "mean_turns", "format_error_rate", "submit_rate", "loss", "time_rollouts_s",
                "rss_rollouts_mb", "rss_update_mb"):
        assert steps(key) == [0, 1], key
    rss = mlc.get_metric_history(result.mlflow_run_id, "rss_update_mb")[0].value
    assert 100 < rss < 64 * 1024                     # the process's peak while the update ran
    for key in ("eval_format_error_rate", "eval_submit_rate", "eval_mean_turns"):
        assert steps(key) == [0, 1, 2], key
    # orchestration.eval_base: engine.model, evaluated before the RFT warm-up, at step 0
    assert steps("base_pass1") == steps("base_eval_submit_rate") == [0]
    assert result.base["pass1"] == mlc.get_metric_history(result.mlflow_run_id,
                                                          "base_pass1")[0].value
    assert (Path(result.run_dir) / "base" / "iter_0" / "eval.parquet").exists()
    assert result.metrics[0]["guided_recovery_rate"] == 1.0      # the hint names the file
    assert result.metrics[0]["train_resolve_rate"] == 0.0
    assert result.metrics[0]["train_steps"] > 0
    versions = mlc.search_model_versions("name='swe-rlvr-policy'")
    assert {v.tags["policy_version"] for v in versions} == {"0", "1", "2"}
    candidate = mlc.get_model_version_by_alias("swe-rlvr-policy", "candidate")
    assert candidate.tags["policy_version"] == "2"
    assert mlc.get_model_version_by_alias("swe-rlvr-policy", "champion")
    names = {f.path for f in mlc.list_artifacts(result.mlflow_run_id)}
    assert {"iter_0", "iter_1", "iter_2", "plots", "base"} <= names
    run = mlc.get_run(result.mlflow_run_id)          # the checkpoints: the run's logged models
    models = {mlc.get_logged_model(o.model_id).name for o in run.outputs.model_outputs}
    assert models == {"policy_0", "policy_1", "policy_2"}


@pytest.mark.e2e
def test_each_checkpoint_exists_and_loads(trained):
    from transformers import AutoModelForCausalLM
    result, _, _ = trained
    assert len(result.checkpoints) == ITERATIONS
    for ckpt in result.checkpoints:
        assert store.is_sealed(ckpt)
        model = AutoModelForCausalLM.from_pretrained(ckpt)
        assert model.config.model_type == "qwen2"
    first = store.read_json(store.join(result.checkpoints[0], store.SUCCESS))["sha256"]
    assert first != store.content_hash(str(Path(result.run_dir) / "rft" / "iter_0" / "checkpoint"))


@pytest.mark.e2e
def test_flow_run_has_summary_and_table_artifacts(trained):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    result, _, _ = trained
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(like_="train-straight")))
    kinds = {a.type for a in found}
    assert kinds == {"markdown", "table"}
    assert all(result.mlflow_run_id in (a.description or "") + str(a.data) for a in found)


@pytest.mark.e2e
def test_guided_stages_have_their_own_task_names_and_runs_name_the_iteration(trained, since):
    from prefect.client.orchestration import get_client
    with get_client(sync_client=True) as client:
        _, runs = runs_since(client, since)
    names = {r.name for r in runs}
    for k in range(ITERATIONS):
        assert {f"rollout-i{k}", f"validate-i{k}", f"rollout-guided-i{k}",
                f"validate-guided-i{k}", f"update-i{k}"} <= names, sorted(names)


@pytest.mark.e2e
def test_evaluation_of_policy_k_runs_beside_iteration_k_and_its_update_waits_for_it(trained, since):
    """orchestration.eval_beside (on here): policy k's evaluation is part of iteration k's
    flow run, waits on nothing of the iteration (so its rollouts run beside the iteration's, on
    one engine), and the update waits for it (the engine's memory is back before training)."""
    from prefect.client.orchestration import get_client
    with get_client(sync_client=True) as client:
        flow_runs, task_runs = runs_since(client, since)

    def upstream(run) -> set:
        return {i.id for inputs in run.task_inputs.values() for i in inputs
                if getattr(i, "input_type", "") == "task_run"}

    for k in range(ITERATIONS):
        iterations = [f for f in flow_runs if f.name == f"iteration-{k}"]
        assert iterations
        for flow_run in iterations:
            mine = {r.name: r for r in task_runs if r.flow_run_id == flow_run.id}
            assert {f"eval-instances-i{k}", f"eval-rollout-i{k}", f"eval-validate-i{k}",
                    f"evaluate-i{k}", f"rollout-i{k}", f"update-i{k}"} <= set(mine), sorted(mine)
            assert upstream(mine[f"eval-rollout-i{k}"]) == {mine[f"eval-instances-i{k}"].id}
            assert mine[f"evaluate-i{k}"].id in upstream(mine[f"update-i{k}"])
    alone = {f.name for f in flow_runs if f.name.startswith("eval-step-")}
    assert alone == {"eval-step-0", f"eval-step-{ITERATIONS}"}, alone  # the base row; the final


@pytest.mark.e2e
def test_rerun_reuses_every_finished_stage(trained):
    from flows import train
    result, args, first_seconds = trained
    before = {p: p.stat().st_mtime_ns for p in Path(result.run_dir).rglob("*.parquet")}
    start = time.perf_counter()
    again = train(None, args)
    assert again.metrics == result.metrics
    assert {p: p.stat().st_mtime_ns for p in Path(result.run_dir).rglob("*.parquet")} == before
    assert time.perf_counter() - start < first_seconds


# --------------------------------------------------------------------------- crash and resume

RUN_SPECIFIC = [(re.compile(r" in [0-9.]+s "), " in *s ")]               # pytest's duration
TOKEN_COLUMNS = {"token_ids", "loss_mask", "logprobs", "guidance_start", "guidance_end"}


def _rows(path: Path, tokens: bool = True) -> list[dict]:
    """Rows without timings; with tokens=False also without token columns, with pytest's
    duration masked in the texts. Nothing else is masked: commands and grading see the repository
    at /testbed whatever host directory holds it, and run with a fixed hash seed and no address
    randomisation (sandbox.isolation)."""
    name = pq.read_schema(path).metadata[SCHEMA_KEY].decode().split("/")[0]
    drop = TIMING_COLUMNS | (set() if tokens else TOKEN_COLUMNS)
    rows = [{k: v for k, v in r.items() if k not in drop} for r in store.read_rows(str(path), name)]
    if not tokens:
        for r in rows:
            for text in ("messages_json", "log_excerpt"):
                if text in r:
                    for pattern, mask in RUN_SPECIFIC:
                        r[text] = pattern.sub(mask, r[text])
    return rows


def _train_process(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "swe_rlvr.cli", "train", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _kill_when(proc: subprocess.Popen, marker: Path, timeout: float = 300) -> None:
    """SIGKILL the flow process (and its ephemeral API) as soon as `marker` appears."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert proc.poll() is None, f"the flow ended before {marker.name} appeared"
        assert time.monotonic() < deadline, f"{marker} never appeared"
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture(scope="module")
def resumed(trained, tmp_path_factory):
    """The same run, SIGKILLed during iteration 0's rollout and iteration 1's update, then rerun."""
    result, args, _ = trained
    root = tmp_path_factory.mktemp("crash")
    args = [a for a in args if not a.startswith(("orchestration.run_root", "orchestration.run_name"))]
    args += [f"orchestration.run_root={root}", "orchestration.run_name=crashy"]
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(root / "prefect"),   # the ephemeral API, its own database
               PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180")
    run = root / "crashy"
    _kill_when(_train_process(args, env), run / "iter_0" / "_stages" / "rollouts.running")
    assert not (run / "iter_0" / "_stages" / "rollouts.json").exists()      # killed mid-stage
    _kill_when(_train_process(args, env), run / "iter_1" / "_stages" / "update.running")
    assert not (run / "iter_1" / "_stages" / "update.json").exists()
    assert not store.is_sealed(str(run / "iter_1" / "checkpoint"))
    finished = subprocess.run([sys.executable, "-m", "swe_rlvr.cli", "train", *args], env=env,
                              capture_output=True, text=True, timeout=900)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return Path(result.run_dir), run


@pytest.mark.e2e
def test_killed_during_rollout_and_update_resumes_with_nothing_lost_or_repeated(resumed):
    straight, run = resumed
    files = sorted(p.relative_to(straight) for p in straight.rglob("*.parquet"))
    assert files == sorted(p.relative_to(run) for p in run.rglob("*.parquet"))
    for rel in files:
        assert _rows(run / rel, tokens=False) == _rows(straight / rel, tokens=False), rel
    episodes = [r["episode_id"] for k in range(ITERATIONS) for name in ("rollouts", "rollouts_guided")
                for r in _rows(run / f"iter_{k}" / f"{name}.parquet")]
    assert len(episodes) == len(set(episodes))                  # nothing done twice
    for k in range(ITERATIONS):
        assert store.is_sealed(str(run / f"iter_{k}" / "checkpoint"))


@pytest.mark.e2e
def test_resumed_run_is_token_and_weight_identical(resumed):
    straight, run = resumed
    for pattern in ("*rollouts*.parquet", "train_metrics.parquet"):
        for rel in sorted(p.relative_to(straight) for p in straight.rglob(pattern)):
            assert _rows(run / rel) == _rows(straight / rel), rel
    for k in range(ITERATIONS):
        ours = store.read_json(str(run / f"iter_{k}" / "checkpoint" / store.SUCCESS))["sha256"]
        theirs = store.read_json(str(straight / f"iter_{k}" / "checkpoint" / store.SUCCESS))["sha256"]
        assert ours == theirs, f"iteration {k}'s checkpoint differs from the uninterrupted run's"


# --------------------------------------------------------------------------- bad input first


def test_bad_input_fails_before_any_work_with_the_fix(tmp_path, tiny_model_dir):
    from flows import PreflightError, train
    from swe_rlvr.config import ConfigError
    base = [f"orchestration.run_root={tmp_path}", f"engine.model={tiny_model_dir}"]
    with pytest.raises(ConfigError, match="valid keys: .*clip_high"):
        train(None, base + ["algorithm.clip_hi=0.3"])
    with pytest.raises(PreflightError, match="swe-rlvr model tiny"):
        train(None, [f"orchestration.run_root={tmp_path}", "engine.model=/no/such/model"])
    with pytest.raises(PreflightError, match="unreachable.*tracking.mlflow_uri="):
        train(None, base + ["tracking.mlflow_uri=http://127.0.0.1:9"])
    from prefect.settings import PREFECT_API_URL, temporary_settings
    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        with pytest.raises(PreflightError, match="Prefect API at .* is down.*prefect server start"):
            train(None, base)
    assert list(tmp_path.iterdir()) == []                       # nothing was started
