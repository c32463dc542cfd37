"""A tiny training run against a real `mlflow server` explains itself there: a trace for every
evaluation episode (turn spans, the grade), the failed ones of a step found by their tags, its
datasets with digests, and its final policy as a logged model linked to its metrics."""

from __future__ import annotations

import json

import pytest

from process_support import start_mlflow_server, stop
from swe_rlvr.config import load_config
from tasks import store, traces, tracking

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served_run(prefect_api, tmp_path_factory, tiny_model_dir):
    """`mlflow server` on 127.0.0.1 and one 1-iteration run tracked on it: the scripted `weak`
    policy fails every unguided episode and resolves its guided re-attempts, so DPO trains on
    the pairs and every evaluation episode fails."""
    proc, url = start_mlflow_server(tmp_path_factory.mktemp("mlflow-server"))
    root = tmp_path_factory.mktemp("runs")
    args = [f"orchestration.run_root={root}", "orchestration.run_name=traced",
            "orchestration.iterations=1", "orchestration.max_workers=1",
            "orchestration.rft_warmup=false", "instances.source=builtin", "instances.limit=2",
            f"sandbox.workdir={root / 'work'}", f"sandbox.env_cache={root.parent / 'envs'}",
            f"engine.model={tiny_model_dir}", "engine.name=scripted:weak", "engine.max_batch=1",
            "agent.scaffold=bash", "agent.max_turns=8", "agent.context_tokens=8192",
            "reward.l_thr=6", "reward.t_max=8", "algorithm.name=dpo", "algorithm.group_size=2",
            "guidance.attempts=1", "trainer.dpo_batch_pairs=2", "trainer.pack_tokens=8192",
            "eval.runs=2", "eval.k=2", "eval.limit=2", f"tracking.mlflow_uri={url}",
            "tracking.log_checkpoints=false", "tracking.register_final=true",
            "tracking.trace_train_episodes=2"]
    try:
        from flows import train
        result = train(None, args)
        yield load_config(None, args), result
    finally:
        stop(proc)


def test_every_eval_episode_is_a_trace_with_its_turns_and_grade(served_run):
    cfg, result = served_run
    for step in sorted(result.metrics):
        evaluated = store.read_rows(store.join(result.run_dir, f"iter_{step}", "eval.parquet"),
                                    "eval")
        found = traces.find(cfg, result.mlflow_run_id,
                            f"tags.stage = 'eval' AND tags.iteration = '{step}'")
        assert sorted(t.info.tags["episode_id"] for t in found) == sorted(
            r["episode_id"] for r in evaluated)
    failed = traces.find(cfg, result.mlflow_run_id, traces.failed_eval_filter(1))
    assert len(failed) == 4 and {t.info.tags["outcome"] for t in failed} == {"failed"}
    import mlflow
    trace = mlflow.get_trace(failed[0].info.trace_id)
    names = [s.name for s in trace.data.spans]
    assert names[0] == "episode" and {"llm 0", "tool 0"} <= set(names)
    root = trace.data.spans[0]
    assert root.attributes["outcome"] == "failed" and root.attributes["resolved"] is False
    assert "fail_to_pass_failed" in root.attributes
    assert trace.data.spans[names.index("tool 0")].attributes["exit_code"] == 0
    training = traces.find(cfg, result.mlflow_run_id, "tags.stage = 'rollout'")
    assert len(training) == 2                                      # trace_train_episodes


def test_the_run_lists_its_datasets_with_digests_and_describes_itself(served_run):
    cfg, result = served_run
    run = tracking.client(cfg).get_run(result.mlflow_run_id)
    assert run.data.tags[tracking.NOTE].startswith("DPO on ")
    assert "system/cpu_utilization_percentage" in run.data.metrics      # system metrics, on
    datasets = {d.dataset.name: d.dataset for d in run.inputs.dataset_inputs}
    assert {"train-pool", "rl-window-0", "eval-test"} <= set(datasets)
    window = store.read_rows(store.join(result.run_dir, "iter_0", "instances.parquet"),
                             "instances")
    assert datasets["rl-window-0"].digest == tracking.instances_digest(window)
    assert json.loads(datasets["eval-test"].profile) == {"instances": 2}


def test_the_final_policy_is_a_logged_model_linked_to_its_metrics(served_run):
    cfg, result = served_run
    mlc = tracking.client(cfg)
    version = mlc.get_model_version_by_alias(cfg.tracking.registered_model, "champion")
    model = mlc.get_logged_model(version.tags["model_id"])
    assert model.source_run_id == result.mlflow_run_id and version.source == (
        f"models:/{model.model_id}")
    linked = {m.key: m for m in model.metrics}
    assert linked["pass1"].value == result.metrics[max(result.metrics)]["pass1"]
    assert linked["pass1"].dataset_name == "eval-test"         # measured on the eval set
    run = mlc.get_run(result.mlflow_run_id)
    assert [o.model_id for o in run.outputs.model_outputs] == [model.model_id]
