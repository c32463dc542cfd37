"""Nebius's curriculum: histories by hand, then three real training iterations whose pool shrinks
exactly as the rule says.

The flow test runs the package's scripted `weak` policy (unguided it submits nothing; guided it
applies the gold patch) with one unguided and one guided attempt per instance, two instances per
iteration and `curriculum_min_tries=1`. So after each iteration its two instances are retired as
`never_solved`: the guided successes do not count (were they counted, each instance would stand
at 1 of 2 = 0.5 < 2/3 and stay).
"""

from __future__ import annotations

import pytest

from swe_rlvr.artifacts import outcomes
from swe_rlvr.curriculum import Record, accumulate, from_rows, mixed, retire_reason, to_rows


def roll(eid: str, iid: str, guided: bool = False, termination: str = "submitted") -> dict:
    return {"episode_id": eid, "instance_id": iid, "guided": guided, "termination": termination}


def grade(eid: str, resolved: bool, infra: bool = False) -> dict:
    return {"episode_id": eid, "resolved": resolved, "infra_failure": infra}


def test_history_counts_unguided_samples_only():
    rollouts = [roll("a0", "A"), roll("a1", "A"), roll("ag", "A", guided=True),
                roll("b0", "B"), roll("b1", "B", termination="error"), roll("c0", "C")]
    grades = [grade("a0", True), grade("a1", False), grade("ag", True), grade("b0", False),
              grade("b1", False), grade("c0", False, infra=True)]
    h = accumulate({"A": Record("A", 2, 2)}, outcomes(rollouts, grades))
    # A: 2/2 before, then a0 (solved) and a1; the guided ag does not count. B: b0 only (b1
    # crashed). C: its one episode failed on infrastructure, so no attempt at all.
    assert h == {"A": Record("A", 4, 3), "B": Record("B", 1, 0)}
    assert from_rows(to_rows(h, 2 / 3, 2)) == h


def test_mixed_keeps_the_split_instances_in_order_up_to_the_limit():
    h = {"A": Record("A", 4, 4), "B": Record("B", 4, 1), "C": Record("C", 4, 0),
         "D": Record("D", 4, 3), "E": Record("E", 2, 1)}
    assert mixed(h, 0) == ["B", "D", "E"]       # A always, C never: no signal
    assert mixed(h, 2) == ["B", "D"]


@pytest.mark.parametrize("attempts, solved, reason", [
    (3, 2, "solved_often"),      # 2/3 reaches max_rate 2/3
    (3, 1, ""),                  # 1/3: still learning
    (1, 0, ""),                  # one failure < min_tries 2
    (2, 0, "never_solved"),      # 0 of min_tries
    (0, 0, ""),                  # never tried
    (1, 1, "solved_often"),      # 1/1
])
def test_retire_reason_by_hand(attempts, solved, reason):
    assert retire_reason(Record("X", attempts, solved), max_rate=2 / 3, min_tries=2) == reason


@pytest.mark.e2e
def test_three_iterations_shrink_the_pool_as_computed_by_hand(prefect_api, tmp_path, tiny_model_dir):
    from flows import train
    from swe_rlvr.builtin import load_builtin
    from swe_rlvr.config import load_config
    from tasks import store
    from tasks.instances import pool
    from tasks.tracking import client

    args = [f"orchestration.run_root={tmp_path}", "orchestration.run_name=cur",
            "orchestration.iterations=3", "orchestration.max_workers=1",
            "orchestration.eval_start=false", "instances.source=builtin", "instances.limit=2",
            f"sandbox.workdir={tmp_path / 'work'}", f"sandbox.env_cache={tmp_path / 'envs'}",
            f"engine.model={tiny_model_dir}", "engine.name=scripted:weak", "engine.max_batch=1",
            "agent.scaffold=bash", "agent.max_turns=8", "agent.context_tokens=8192",
            "algorithm.name=dpo", "algorithm.group_size=1", "guidance.attempts=1",
            "algorithm.curriculum=true", "algorithm.curriculum_min_tries=1",
            "trainer.sft_batch_size=2", "trainer.dpo_batch_pairs=2", "trainer.pack_tokens=8192",
            "eval.runs=1", "eval.k=1", "eval.limit=1"]
    result = train(None, args)
    order = [i.instance_id for i in pool(load_builtin(), "train")]
    n = len(order)
    # Iteration k's pool is the split less the 2k instances retired so far, and its window is
    # the k-th window of 2 over that pool: order[0:2]; then pool order[2:] at offset 2 ->
    # order[4:6]; then pool order[2:4] + order[6:] at offset 4 -> order[8:10].
    windows = [order[0:2], order[4:6], order[8:10]]
    run = tmp_path / "cur"
    for k in range(3):
        chosen = [r["instance_id"] for r in store.read_rows(str(run / f"iter_{k}" /
                                                                 "instances.parquet"), "instances")]
        assert chosen == windows[k], k
        history = store.read_rows(str(run / f"iter_{k}" / "curriculum.parquet"), "curriculum")
        retired = sorted(r["instance_id"] for r in history if r["retired"] == "never_solved")
        assert retired == sorted(i for w in windows[:k] for i in w), k
        assert all(r["solved"] == 0 and r["attempts"] == 1 for r in history)
    cfg = load_config(None, args)
    pools = [m.value for m in sorted(client(cfg).get_metric_history(result.mlflow_run_id,
                                                                     "curriculum_pool"),
                                     key=lambda m: m.step)]
    assert pools == [n, n - 2, n - 4]
