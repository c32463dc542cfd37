"""Guidance and the best-of-k verifier through the real `train` flow: Prefect's ephemeral API, the
real sandbox and grading, and MLflow on SQLite, read back from the store rather than from the
flow's return value.

1. The scripted `weak` policy (it fixes an instance only when a `Location:` hint names the file)
   fails every instance unguided and recovers every one when guided, so the guided recovery rate
   logged to MLflow at step 0 must be exactly 1.0. With 2 instances x G=2 unguided failures and
   G'=1 guided success each: guided_instances = 2, pairs_built = 2 * min(1, 2) = 2.
2. The scripted `coin` policy fixes about half its episodes (a seeded coin per episode), and a
   failed episode submits an empty patch. Iteration 0's verifier, trained on its (issue, patch) ->
   resolved episodes (4 instances x G=2; issue + patch fit in 1024 tokens), must rank a real patch
   above an empty one on the held-out split, so best@2 at step 1 equals the fraction of instances
   with a resolved run among their 2 samples, which the coin's seeds make higher than pass@1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tasks import store

COMMON = ["orchestration.iterations=1", "orchestration.max_workers=1",
          "orchestration.rft_warmup=false", "instances.source=builtin", "instances.limit=2",
          "engine.max_batch=1", "agent.scaffold=bash", "agent.max_turns=6",
          "agent.context_tokens=8192", "reward.l_thr=4", "reward.t_max=6", "algorithm.group_size=2",
          "guidance.attempts=1", "trainer.sft_batch_size=2", "trainer.dpo_batch_pairs=2",
          "trainer.pack_tokens=8192", "eval.runs=2", "eval.k=2", "eval.limit=2"]


def run_overrides(root: Path, model: Path, name: str, *extra: str) -> list[str]:
    return [f"orchestration.run_root={root}", f"orchestration.run_name={name}",
            f"sandbox.workdir={root / 'work'}", f"sandbox.env_cache={root.parent / 'envs'}",
            f"engine.model={model}", *COMMON, *extra]



def logged(result, key: str) -> dict[int, float]:
    """step -> value of metric `key`, as stored in the run's MLflow tracking store."""
    from mlflow.tracking import MlflowClient
    mlc = MlflowClient(result.tracking_uri)
    return {m.step: m.value for m in mlc.get_metric_history(result.mlflow_run_id, key)}


@pytest.fixture(scope="module")
def weak_run(prefect_api, tmp_path_factory, tiny_model_dir):
    from flows import train
    root = tmp_path_factory.mktemp("guided-runs")
    return train(None, run_overrides(root, tiny_model_dir, "weak", "engine.name=scripted:weak",
                                     "algorithm.name=dpo", "guidance.mode=pairs"))


@pytest.mark.e2e
def test_guided_recovery_rate_in_mlflow_is_exactly_the_weak_policys(weak_run):
    assert logged(weak_run, "guided_recovery_rate") == {0: 1.0}
    assert logged(weak_run, "train_resolve_rate") == {0: 0.0}
    assert logged(weak_run, "unguided_resolve_rate") == {0: 0.0}
    assert logged(weak_run, "guided_resolve_rate") == {0: 1.0}
    assert logged(weak_run, "guided_instances") == {0: 2.0}
    assert logged(weak_run, "pairs_built") == {0: 2.0}
    assert logged(weak_run, "guidance_leakage")[0] == 0.0       # location only, no fix verbatim
    # Unguided at evaluation, the weak policy resolves nothing: pass@1 = 0 before and after.
    assert logged(weak_run, "pass1") == {0: 0.0, 1: 0.0}
    # best-of-k is off by default: no verifier stage ran and no best@k was logged.
    assert not (Path(weak_run.run_dir) / "iter_0" / "verifier").exists()
    assert logged(weak_run, "best2") == {}


@pytest.mark.e2e
def test_no_recovery_metric_when_guidance_is_off(prefect_api, tmp_path_factory, tiny_model_dir):
    """The same run with guidance off: no guided episodes, so no recovery metric at all."""
    from flows import train
    root = tmp_path_factory.mktemp("unguided-runs")
    result = train(None, run_overrides(root, tiny_model_dir, "unguided",
                                       "engine.name=scripted:weak",
                                       "algorithm.name=rft", "guidance.enabled=false",
                                       "eval.limit=1", "eval.runs=1", "eval.k=1"))
    assert logged(result, "train_resolve_rate") == {0: 0.0}
    assert logged(result, "guided_recovery_rate") == {}
    assert store.read_rows(str(Path(result.run_dir) / "iter_0" / "guidance.parquet"),
                           "guidance") == []


VERIFIER = ["eval.best_of_k=2", "instances.limit=4", "verifier.lr=3e-3", "verifier.epochs=10",
            "verifier.batch=4", "verifier.max_tokens=1024", "engine.seed=3"]


@pytest.fixture(scope="module")
def coin_run(prefect_api, tmp_path_factory, tiny_model_dir):
    from flows import train
    root = tmp_path_factory.mktemp("coin-runs")
    return train(None, run_overrides(root, tiny_model_dir, "coin", "engine.name=scripted:coin",
                                     "algorithm.name=rft", "guidance.mode=strip", *VERIFIER))


@pytest.mark.e2e
def test_best_of_k_reranks_the_evaluation_with_iteration_0s_verifier(coin_run):
    run = Path(coin_run.run_dir)
    verifier = run / "iter_0" / "verifier"
    assert store.is_sealed(str(verifier))
    sealed = store.read_json(str(verifier / store.SUCCESS))
    assert 0 < sealed["positives"] < sealed["examples"]          # both kinds to learn from
    step0 = store.read_rows(str(run / "iter_0" / "eval.parquet"), "eval")
    assert all(r["verifier_score"] is None for r in step0)      # policy 0: no verifier yet
    rows = store.read_rows(str(run / "iter_1" / "eval.parquet"), "eval")
    assert rows and all(r["verifier_score"] is not None for r in rows)
    by_instance: dict[str, list[dict]] = {}
    for r in rows:
        by_instance.setdefault(r["instance_id"], []).append(r)
    any_resolved = sum(any(r["resolved"] for r in runs) for runs in by_instance.values())
    pass1 = sum(r["resolved"] for r in rows) / len(rows)
    ceiling = any_resolved / len(by_instance)
    assert pass1 < ceiling, "the coin's seeds must give an instance one resolved run of two"
    # The verifier puts every resolved (non-empty) patch above its instance's empty one.
    for runs in by_instance.values():
        top = max(runs, key=lambda r: r["verifier_score"])
        assert top["resolved"] == any(r["resolved"] for r in runs), runs
    assert logged(coin_run, "best2") == {1: ceiling}
    assert logged(coin_run, "best2_submissions") == {1: float(len(by_instance))}
    assert logged(coin_run, "pass1")[1] == pytest.approx(pass1)
    assert logged(coin_run, "pass2")[1] == pytest.approx(ceiling)  # n = k = 2: any resolved
    assert 0 not in logged(coin_run, "best2")
