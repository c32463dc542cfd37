"""MLflow tracking on a real SQLite store: params, metrics at step = policy version, artifacts,
the registry's `candidate` and `champion` aliases, and no double logging on resume."""

from __future__ import annotations

import shutil

import pytest

from swe_rlvr.config import load_config
from tasks import store, tracking


def _eval_rows(resolved: list[list[bool]]) -> list[dict]:
    """resolved[i][r]: instance i, run r."""
    return [{"instance_id": f"i{i}", "run": r, "episode_id": f"i{i}/i0/s{r}", "resolved": ok,
             "infra_failure": False, "termination": "submitted", "turns": 3, "format_errors": 0,
             "verifier_score": None}
            for i, runs in enumerate(resolved) for r, ok in enumerate(runs)]


def _checkpoint(run_dir: str, name: str, model_dir) -> str:
    """A sealed copy of the tiny model as iteration `name`'s checkpoint."""
    ckpt = shutil.copytree(model_dir, store.join(run_dir, name, "checkpoint"))
    store.seal_dir(str(ckpt))
    return str(ckpt)


@pytest.fixture(scope="module")
def tracked(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("runs")
    cfg = load_config(None, [f"orchestration.run_root={root}", "eval.k=2"])
    run_dir = store.join(str(root), "run-a")
    # pass@1 by step: 0.5, 0.75, 0.25 (runs of 2 over 2 instances)
    for step, grid in enumerate([[[True, False], [False, True]], [[True, True], [True, False]],
                                 [[False, False], [True, False]]]):
        store.write_table(store.join(run_dir, f"iter_{step}", "eval.parquet"), "eval",
                          _eval_rows(grid))
    run_id = tracking.open_run(cfg, run_dir)
    policies = [_checkpoint(run_dir, f"iter_{k}", tiny_model_dir) for k in range(3)]
    logged = {k: tracking.log_step(cfg, run_id, run_dir, k, policies[k]) for k in range(3)}
    return cfg, run_dir, run_id, logged


def test_metrics_are_logged_at_step_equal_policy_version(tracked):
    cfg, _, run_id, logged = tracked
    mlc = tracking.client(cfg)
    history = sorted((m.step, m.value) for m in mlc.get_metric_history(run_id, "pass1"))
    assert history == [(0, 0.5), (1, 0.75), (2, 0.25)]
    assert {m.step for m in mlc.get_metric_history(run_id, "pass1_sem")} == {0, 1, 2}
    assert logged[1]["pass2"] == pytest.approx(1.0)
    params = mlc.get_run(run_id).data.params
    assert params["algorithm.clip_high"] == "0.28" and params["eval.k"] == "2"


def test_registry_champion_is_the_best_and_candidate_the_latest(tracked):
    cfg, _, _, logged = tracked
    mlc = tracking.client(cfg)
    name = cfg.tracking.registered_model
    champion = mlc.get_model_version_by_alias(name, "champion")
    candidate = mlc.get_model_version_by_alias(name, "candidate")
    assert champion.tags["policy_version"] == "1" and champion.tags["pass1"] == "0.75"
    assert candidate.tags["policy_version"] == "2"
    model = mlc.get_logged_model(champion.tags["model_id"])   # the run's logged model, linked
    assert (model.name, model.source_run_id) == ("policy_1", tracked[2])   # to its step's metrics
    assert {m.key: m.value for m in model.metrics if m.step == 1}["pass1"] == 0.75
    assert champion.source == f"models:/{model.model_id}"


def test_artifacts_and_plot_are_logged(tracked):
    cfg, _, run_id, _ = tracked
    mlc = tracking.client(cfg)
    assert [f.path for f in mlc.list_artifacts(run_id, "iter_1")] == ["iter_1/eval.parquet"]
    assert [f.path for f in mlc.list_artifacts(run_id, "plots")] == ["plots/progress.png"]
    policy_1 = mlc.search_logged_models([mlc.get_run(run_id).info.experiment_id],
                                        filter_string="name = 'policy_1'")[0]
    assert {f.path for f in mlc.list_logged_model_artifacts(policy_1.model_id)} >= {
        "MLmodel", "model", "components"}                  # MLflow's transformers flavor
    assert tracking.tracking_uri(cfg).startswith("sqlite:///")
    assert "mlartifacts" in mlc.get_run(run_id).info.artifact_uri


def test_resume_reuses_the_run_and_logs_no_step_twice(tracked):
    cfg, run_dir, run_id, logged = tracked
    assert tracking.open_run(cfg, run_dir) == run_id
    assert tracking.log_step(cfg, run_id, run_dir, 1) == logged[1]
    mlc = tracking.client(cfg)
    assert len(mlc.get_metric_history(run_id, "pass1")) == 3
    assert len(mlc.search_model_versions(f"name='{cfg.tracking.registered_model}'")) == 3


@pytest.mark.e2e
def test_a_flow_body_that_raises_leaves_its_mlflow_run_failed_and_a_rerun_reopens_it(tmp_path):
    from tasks.report import tracked_run
    cfg = load_config(None, [f"orchestration.run_root={tmp_path}"])
    run_dir = str(tmp_path / "crashing")
    with pytest.raises(RuntimeError, match="boom"):
        with tracked_run(cfg, run_dir) as run_id:
            raise RuntimeError("boom")
    assert tracking.client(cfg).get_run(run_id).info.status == "FAILED"
    with tracked_run(cfg, run_dir) as again:                 # the resumed run: same MLflow run
        assert tracking.client(cfg).get_run(again).info.status == "RUNNING"
    assert again == run_id
    assert tracking.client(cfg).get_run(run_id).info.status == "FINISHED"
