"""Retraining continues from the champion and moves it only when the new policy is better on the
same instances and seeds by more than the margin (tracking.champion_margin_sems of the champion's
SEM); the decision and both scores land in MLflow and a Prefect artifact."""

from __future__ import annotations

import pytest
from prefect import flow

from swe_rlvr.config import load_config
from tasks import registry, tracking
from tasks.report import decide_champion

NAME = "swe-rlvr-policy"


def test_the_margin_is_sems_of_the_champion():
    champion = {"pass1": 0.5, "pass1_sem": 0.05}
    # threshold = 0.5 + 1 * 0.05 = 0.55: 0.56 promotes, 0.55 does not
    assert registry.champion_decision(champion, {"pass1": 0.56}, 1.0)["promoted"]
    assert not registry.champion_decision(champion, {"pass1": 0.55}, 1.0)["promoted"]
    # margin 0: any gain promotes; a tie never does
    assert registry.champion_decision(champion, {"pass1": 0.51}, 0.0)["promoted"]
    assert not registry.champion_decision(champion, {"pass1": 0.5}, 0.0)["promoted"]


def _registry(tmp_path) -> tuple:
    """A run with two registered versions; version 1 is champion."""
    cfg = load_config(None, [f"orchestration.run_root={tmp_path}"])
    run_id = tracking.open_run(cfg, str(tmp_path / "retrain-run"))
    mlc = tracking.client(cfg)
    mlc.create_registered_model(NAME)
    for _ in range(2):
        mlc.create_model_version(NAME, str(tmp_path), run_id=run_id)
    mlc.set_registered_model_alias(NAME, "champion", "1")
    return cfg, run_id


@flow(name="decide")
def _decide(cfg, run_id: str, champion: dict, new: dict) -> dict:
    return decide_champion(cfg, run_id, "2", champion, new, f"models:/{NAME}@champion")


@pytest.mark.e2e
def test_decision_moves_champion_only_above_the_margin_and_is_recorded(tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    cfg, run_id = _registry(tmp_path)
    mlc = tracking.client(cfg)
    weak, gold = {"pass1": 0.0, "pass1_sem": 0.0}, {"pass1": 1.0, "pass1_sem": 0.0}
    kept = _decide(cfg, run_id, gold, weak)                   # the new policy is worse
    assert not kept["promoted"]
    assert str(mlc.get_model_version_by_alias(NAME, "champion").version) == "1"
    assert mlc.get_run(run_id).data.tags["swe_rlvr.retrain"] == "kept"
    promoted = _decide(cfg, run_id, weak, gold)               # the new policy is better
    assert promoted["promoted"] and promoted["threshold"] == 0.0
    assert str(mlc.get_model_version_by_alias(NAME, "champion").version) == "2"
    run = mlc.get_run(run_id)
    assert run.data.tags["swe_rlvr.retrain"] == "promoted"
    assert run.data.metrics["retrain_new_pass1"] == 1.0
    assert run.data.metrics["retrain_champion_pass1"] == 0.0
    assert mlc.get_model_version(NAME, "2").tags["retrain_promoted"] == "True"
    assert registry.champion_uri(cfg) == f"models:/{NAME}@champion"
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(like_=f"retrain-{run_id}"[:60])))
    assert any("version 2 is the new champion" in str(a.data) for a in found)


def test_the_scheduled_deployment_runs_the_retrain_flow(tmp_path):
    from flows.deployments import ON_DEMAND, SCHEDULED, runner_deployments
    cfg = load_config(None, [f"orchestration.run_root={tmp_path}"])
    flows = {d.name: d.entrypoint for d in runner_deployments("cfg.yaml", cfg)}
    assert flows[SCHEDULED].endswith("retrain_flow") and flows[ON_DEMAND].endswith("train_flow")


def _flow_overrides(root, model, variant: str, name: str) -> list[str]:
    return [f"orchestration.run_root={root}", f"orchestration.run_name={name}",
            "orchestration.iterations=1", "orchestration.max_workers=1",
            "instances.source=builtin", "instances.limit=1", f"engine.model={model}",
            f"engine.name=scripted:{variant}", "engine.max_batch=1", "agent.scaffold=bash",
            "agent.max_turns=8", "agent.context_tokens=8192", "reward.l_thr=6", "reward.t_max=8",
            "algorithm.name=dpo", "algorithm.group_size=2", "guidance.attempts=1",
            "trainer.sft_batch_size=2", "trainer.dpo_batch_pairs=2", "trainer.pack_tokens=8192",
            "eval.runs=1", "eval.k=1", "eval.limit=1", "tracking.log_checkpoints=false",
            f"sandbox.workdir={root / 'work'}", f"sandbox.env_cache={root / 'envs'}"]


@pytest.mark.slow
def test_retrain_end_to_end_with_scripted_policies(tmp_path, tiny_model_dir):
    """With no champion the retrain starts from engine.model; the scripted policy's replies do not
    depend on the weights, so scripted:weak's new policy ties its start and champion is not set.
    Then the decision between real scripted:gold and scripted:weak evaluations of the same
    instances and seeds promotes gold over weak and keeps weak under gold."""
    from flows import evaluate
    from flows.retrain import retrain_flow
    weak_args = _flow_overrides(tmp_path, tiny_model_dir, "weak", "retrain-weak")
    decision = retrain_flow(None, weak_args)
    cfg = load_config(None, weak_args)
    assert decision["started_from"] == str(tiny_model_dir) and not decision["promoted"]
    assert registry.champion_uri(cfg) == ""
    mlc = tracking.client(cfg)
    assert str(mlc.get_model_version_by_alias(NAME, "candidate").version) == decision["version"]
    scores = {v: evaluate(None, _flow_overrides(tmp_path, tiny_model_dir, v, f"eval-{v}"))
              .metrics[0] for v in ("weak", "gold")}
    assert scores["gold"]["pass1"] > scores["weak"]["pass1"]
    run_id = mlc.get_model_version(NAME, decision["version"]).run_id
    kept = _decide_version(cfg, run_id, decision["version"], scores["gold"], scores["weak"])
    assert not kept["promoted"] and registry.champion_uri(cfg) == ""
    promoted = _decide_version(cfg, run_id, decision["version"], scores["weak"], scores["gold"])
    assert promoted["promoted"] and registry.champion_uri(cfg) == f"models:/{NAME}@champion"


@flow(name="decide-version")
def _decide_version(cfg, run_id: str, version: str, champion: dict, new: dict) -> dict:
    return decide_champion(cfg, run_id, version, champion, new, "scripted")
