"""One run, everywhere: the Prefect flow run takes the run directory's name, every stage says
what it did in the run log, and the MLflow run carries the flow run's id and the git commit."""

from __future__ import annotations

import logging

import pytest
from prefect import flow

from swe_rlvr.config import load_config
from tasks import store, tracking
from tasks.report import summarize, tracked_run
from tasks.runlog import manifest_line
from tasks.stage import iter_dir


def _eval_stage(run_dir: str) -> None:
    """A stage writing one eval row, through the real `store.stage` bookkeeping."""
    url = store.join(iter_dir(run_dir, 0), "eval.parquet")
    row = {"instance_id": "i0", "run": 0, "episode_id": "i0/s0", "resolved": True,
           "infra_failure": False, "termination": "submitted", "turns": 3, "format_errors": 0,
           "verifier_score": None}
    with store.stage(iter_dir(run_dir, 0), "eval", "key-1") as st:
        st.output("main", url, store.write_table(url, "eval", [row]), rows=1)


@flow(name="probe")
def probe_flow(root: str, name: str) -> tuple[str, str]:
    """The flows' skeleton: a tracked run, one stage, its step logged and the summary."""
    cfg = load_config(None, [f"orchestration.run_root={root}"])
    run_dir = store.join(root, name)
    with tracked_run(cfg, run_dir) as run_id:
        _eval_stage(run_dir)
        steps = {0: tracking.log_step(cfg, run_id, run_dir, 0)}
        markdown = summarize(cfg, run_id, run_dir, steps, "probe")
    return run_id, markdown


@pytest.fixture(scope="module")
def probed(prefect_api, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    state = probe_flow(str(root), "probe-run", return_state=True)
    run_id, markdown = state.result()
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker
    APILogWorker.drain_all(timeout=10)
    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(state.state_details.flow_run_id)
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run.id])))
    cfg = load_config(None, [f"orchestration.run_root={root}"])
    yield cfg, flow_run, run_id, markdown, [entry.message for entry in logs]


@pytest.mark.e2e
def test_the_flow_run_is_named_after_the_run_directory(probed):
    _, flow_run, _, _, _ = probed
    assert flow_run.name == "probe-run"


@pytest.mark.e2e
def test_mlflow_run_carries_the_flow_run_and_the_commit_and_the_summary_links_it(probed):
    cfg, flow_run, run_id, markdown, _ = probed
    tags = tracking.client(cfg).get_run(run_id).data.tags
    assert tags["prefect.flow_run_id"] == str(flow_run.id)
    assert tags["prefect.flow_run_url"].endswith(f"/runs/flow-run/{flow_run.id}")
    assert tags["mlflow.source.git.commit"] == tracking.git_commit()
    assert len(tags["mlflow.source.git.commit"]) == 40          # this checkout is a git one
    assert f"MLflow run: `{run_id}`" in markdown


@pytest.mark.e2e
def test_each_stage_and_step_says_what_it_did_in_the_run_log(probed):
    _, _, _, _, messages = probed
    assert any(m.startswith("eval: main 1 rows -> ") and m.endswith("MB")
               for m in messages), messages
    assert any(m.startswith("step 0: pass@1 1.000 ± 0.000") for m in messages), messages


@pytest.mark.e2e
def test_the_experiment_opens_as_model_training(probed):
    cfg = probed[0]
    exp = tracking.client(cfg).get_experiment_by_name(cfg.tracking.experiment)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"


def test_outside_a_flow_stages_log_to_the_module_logger_and_no_commit_outside_git(tmp_path,
                                                                                   caplog,
                                                                                   monkeypatch):
    monkeypatch.delenv("SWE_RLVR_GIT_COMMIT", raising=False)
    with caplog.at_level(logging.INFO, logger="tasks.stage"):
        _eval_stage(str(tmp_path / "plain"))
    line = caplog.records[-1].getMessage()
    assert line.startswith("eval: main 1 rows -> ") and "iter_0/eval.parquet" in line
    assert tracking.git_commit(tmp_path) == ""
    monkeypatch.setenv("SWE_RLVR_GIT_COMMIT", "c0ffee")      # what the team image records
    assert tracking.git_commit(tmp_path) == "c0ffee"
    assert tracking.git_commit() != "c0ffee"                 # a checkout's own commit wins
    assert manifest_line({"stage": "update", "outputs": {}, "wall_s": 2.0,
                          "peak_rss_mb": 900.0}) == "update: no outputs; 2.0 s, peak RSS 900 MB"
