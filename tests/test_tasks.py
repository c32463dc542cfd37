"""Stage tasks as plain functions (`task.fn`): artifacts, skip-if-done, cache keys, retries, metrics.

No Prefect API is needed here: `task.fn` runs the body directly. The stage libraries are real.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swe_rlvr.config import load_config
from tasks import store
from tasks.cache import input_key
from tasks.errors import InfraError, is_infra_error, retry_on_infra
from tasks.metrics import eval_summary, pass_at_k, rollout_summary


def _episode(iid: str, run: int, resolved: bool, infra: bool = False) -> tuple[dict, dict]:
    eid = f"{iid}/i0/s{run}"
    rollout = {"episode_id": eid, "instance_id": iid, "iteration": 0, "sample": run,
               "guided": False, "policy_version": 0, "token_ids": [1, 2, 3],
               "loss_mask": [0, 1, 1], "logprobs": [0.0, -0.5, -0.7], "guidance_start": -1,
               "guidance_end": -1, "messages_json": "[]", "turns": 2, "format_errors": 0,
               "termination": "submitted", "patch": "", "gen_tokens": 2, "gen_s": 0.1,
               "exec_s": 0.1, "wall_s": 0.2, "error": "", "turns_json": None}
    grade = {"episode_id": eid, "instance_id": iid, "patch_applied": True, "apply_method": "git-apply",
             "tests_status_json": "{}", "f2p_passed": [], "f2p_failed": [], "p2p_passed": [],
             "p2p_failed": [], "resolution": "FULL" if resolved else "NO", "resolved": resolved,
             "reference_resolved": resolved, "guards": [], "tampered": False, "tamper_reason": "",
             "infra_failure": infra, "infra_reason": "", "log_excerpt": "", "duration_s": 0.1}
    return rollout, grade


# --------------------------------------------------------------------------- metrics


def test_pass_at_k_unbiased_estimator():
    # n=3 runs, c=1 resolved, k=2: 1 - C(2,2)/C(3,2) = 1 - 1/3
    assert pass_at_k(3, 1, 2) == pytest.approx(2 / 3)
    assert pass_at_k(3, 0, 2) == 0.0
    assert pass_at_k(3, 2, 2) == 1.0          # n - c = 1 < k: every pair holds a success
    with pytest.raises(ValueError, match="eval.k"):
        pass_at_k(2, 1, 3)


def test_tamper_rate_counts_tampered_grades_among_graded_samples():
    """`train_tamper_rate` goes to MLflow with every iteration: the share of graded episodes
    (infrastructure failures excluded) whose canaries caught a change to how the tests run."""
    pairs = [_episode("a", r, resolved=False) for r in range(3)] + [_episode("b", 0, False, infra=True)]
    rollouts, grades = [p[0] for p in pairs], [p[1] for p in pairs]
    grades[0]["tampered"] = True
    summary = rollout_summary(rollouts, grades)
    assert summary["train_tamper_rate"] == pytest.approx(1 / 3)              # 1 of 3 usable
    assert summary["train_infra_failure_rate"] == pytest.approx(1 / 4)


def test_eval_summary_mean_over_runs_with_sem():
    # run 0 resolves a, b (2/2 = 1.0); run 1 resolves a only (0.5): pass@1 = 0.75,
    # SEM = stdev([1.0, 0.5]) / sqrt(2) = 0.35355 / 1.41421 = 0.25
    rows = [{"instance_id": i, "run": r, "resolved": ok, "infra_failure": False}
            for i, r, ok in [("a", 0, True), ("b", 0, True), ("a", 1, True), ("b", 1, False)]]
    out = eval_summary(rows, k=2)
    assert out["pass1"] == pytest.approx(0.75)
    assert out["pass1_sem"] == pytest.approx(0.25)
    assert out["pass2"] == pytest.approx(1.0)  # each instance has one success in 2 runs


# --------------------------------------------------------------------------- store and keys


def test_write_table_is_versioned_and_read_refuses_other_versions(tmp_path):
    url = str(tmp_path / "iter_0" / "eval.parquet")
    store.write_table(url, "eval", [])
    assert store.read_table(url, "eval").schema.metadata[b"swe_rlvr.schema"] == b"eval/v1"
    pq.write_table(pa.table({"x": [1]}), url)
    with pytest.raises(ValueError, match="Re-run that stage"):
        store.read_table(url, "eval")
    assert not list((tmp_path / "iter_0").glob("*.tmp-*"))


def test_input_key_follows_content_not_names_and_ignores_tracking(tmp_path):
    cfg = load_config()
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    a.write_bytes(b"same"), b.write_bytes(b"same")
    key = input_key("rewards", {"rollouts_path": str(a), "cfg": cfg})
    assert key == input_key("rewards", {"rollouts_path": str(b), "cfg": cfg})
    moved = load_config(None, ["tracking.mlflow_uri=http://x", "orchestration.iterations=9"])
    assert key == input_key("rewards", {"rollouts_path": str(a), "cfg": moved})
    b.write_bytes(b"changed")
    assert key != input_key("rewards", {"rollouts_path": str(b), "cfg": cfg})
    assert key != input_key("rewards", {"rollouts_path": str(a),
                                        "cfg": load_config(None, ["reward.l_thr=3"])})


# --------------------------------------------------------------------------- retries


class _State:
    def __init__(self, exc):
        self.exc = exc

    def result(self, raise_on_failure=True):
        raise self.exc


def test_retries_only_on_infrastructure_errors():
    class InfraError2(InfraError):
        pass

    class InfraErrorElsewhere(RuntimeError):
        pass
    InfraErrorElsewhere.__name__ = "InfraError"  # a library's own InfraError, matched by name
    for exc in (InfraError("sandbox died"), InfraError2("x"), ConnectionError("reset"),
                TimeoutError("slow"), InfraErrorElsewhere("docker")):
        assert is_infra_error(exc) and retry_on_infra(None, None, _State(exc))
    for exc in (ValueError("bad value"), KeyError("k"), FileNotFoundError("gone")):
        assert not retry_on_infra(None, None, _State(exc))


# --------------------------------------------------------------------------- stage tasks


def test_evaluate_task_writes_eval_rows_once(tmp_path):
    from tasks.evaluate import evaluate
    pairs = [_episode(i, r, ok) for i, r, ok in [("a", 0, True), ("a", 1, False), ("b", 0, False),
                                                  ("b", 1, False, )]]
    run = str(tmp_path / "run")
    rolls = store.join(run, "iter_0", "eval_rollouts.parquet")
    grades = store.join(run, "iter_0", "eval_validations.parquet")
    store.write_table(rolls, "rollouts", [p[0] for p in pairs])
    store.write_table(grades, "validations", [p[1] for p in pairs])
    url = evaluate.fn(run, 0, rolls, grades)
    rows = store.read_rows(url, "eval")
    assert [(r["instance_id"], r["run"], r["resolved"]) for r in rows] == [
        ("a", 0, True), ("a", 1, False), ("b", 0, False), ("b", 1, False)]
    manifest = json.loads((tmp_path / "run/iter_0/_stages/eval.json").read_text())
    assert manifest["outputs"]["main"]["sha256"] == store.content_hash(url)
    mtime = (tmp_path / "run/iter_0/eval.parquet").stat().st_mtime_ns
    assert evaluate.fn(run, 0, rolls, grades) == url          # done: not rewritten
    assert (tmp_path / "run/iter_0/eval.parquet").stat().st_mtime_ns == mtime


def test_instances_task_rotates_training_windows(tmp_path):
    from tasks.instances import instances
    cfg = load_config(None, ["instances.limit=2", f"orchestration.run_root={tmp_path}"])
    run = str(tmp_path / "run")
    first = store.read_rows(instances.fn(run, 0, cfg, "train"), "instances")
    second = store.read_rows(instances.fn(run, 1, cfg, "train"), "instances")
    assert len(first) == len(second) == 2
    assert {r["split"] for r in first + second} == {"train"}
    assert not {r["instance_id"] for r in first} & {r["instance_id"] for r in second}
    evals = store.read_rows(instances.fn(run, 1, cfg, "test", out="eval_instances", limit=2,
                                         rotate=False), "instances")
    assert {r["split"] for r in evals} == {"test"}


def test_instances_rotate_false_keeps_the_first_window_at_every_iteration(tmp_path):
    """instances.rotate=false: the train curve is over the same instances (flows.iteration passes
    cfg.instances.rotate to the task)."""
    from tasks.instances import instances
    cfg = load_config(None, ["instances.limit=2", "instances.rotate=false",
                             f"orchestration.run_root={tmp_path}"])
    assert cfg.instances.rotate is False and load_config(None, []).instances.rotate is True
    run = str(tmp_path / "run")
    ids = [[r["instance_id"] for r in store.read_rows(
        instances.fn(run, k, cfg, "train", rotate=cfg.instances.rotate), "instances")]
        for k in (0, 1, 5)]
    assert len(ids[0]) == 2 and ids[0] == ids[1] == ids[2]


class _Inst:
    def __init__(self, iid: str, split: str = "train", difficulty: str = "easy"):
        self.instance_id, self.split, self.difficulty = iid, split, difficulty


def test_select_orders_by_a_stable_hash_and_cuts_the_expert_and_rl_parts():
    from tasks.instances import select, split_parts, stable_order
    # sha256("a") = ca97..., ("b") = 3e23..., ("c") = 2e7d..., ("d") = 18ac...: order d, c, b, a
    assert sorted("abcd", key=stable_order) == ["d", "c", "b", "a"]
    pool = [_Inst(i) for i in "abcd"] + [_Inst("e", split="test"), _Inst("f", difficulty="hard")]
    ids = lambda xs: [x.instance_id for x in xs]  # noqa: E731
    # sha256("f") = 252f...: between d (18ac) and c (2e7d)
    assert ids(select(pool, "train", (), 0, 0)) == ["d", "f", "c", "b", "a"]
    assert ids(select(pool, "train", (), 0, 0, tiers=("easy",))) == ["d", "c", "b", "a"]
    # share 0.5 of 4: round(2.0) = 2 -> expert d, c; rl b, a; windows of 1 rotate within a part
    easy = dict(tiers=("easy",), expert_share=0.5)
    assert ids(select(pool, "train", (), 0, 0, part="expert", **easy)) == ["d", "c"]
    assert ids(select(pool, "train", (), 1, 1, part="rl", **easy)) == ["a"]
    assert split_parts(["x", "y"], 1.0) == {"all": ["x", "y"], "expert": ["x", "y"], "rl": ["x", "y"]}
    with pytest.raises(ValueError, match="expert_share must be in"):
        split_parts(["x"], 0.0)
    with pytest.raises(ValueError, match="leaves no 'rl' instances"):
        select(pool, "train", ("a",), 0, 0, part="rl", expert_share=0.9)


def test_train_ids_restrict_the_rl_part_after_the_cut_and_name_ids_outside_it():
    """`train_ids` come after the expert/rl cut: the parts stay those of the whole split (d, c
    expert; b, a rl, as above), so a window of RL ids cannot pull in a demonstrated instance."""
    from tasks.instances import select
    pool = [_Inst(i) for i in "abcd"]
    ids = lambda xs: [x.instance_id for x in xs]  # noqa: E731
    assert ids(select(pool, "train", (), 0, 0, part="rl", expert_share=0.5, train_ids=("a",))) == ["a"]
    assert ids(select(pool, "train", (), 1, 3, part="rl", expert_share=0.5,
                      train_ids=("a", "b"))) == ["a"]    # window 3 of 1 over [b, a]
    with pytest.raises(ValueError, match="outside the 'rl' part of split 'train': c, d"):
        select(pool, "train", (), 0, 0, part="rl", expert_share=0.5, train_ids=("a", "d", "c"))


def test_reward_task_scores_unguided_and_guided_episodes(tmp_path):
    from tasks.reward import reward
    cfg = load_config(None, ["algorithm.group_size=2"])
    run = str(tmp_path / "run")
    pairs = [_episode("a", 0, True), _episode("a", 1, False), _episode("b", 0, False),
             _episode("b", 1, False, infra=True)]
    rolls, grades = store.join(run, "iter_0", "rollouts.parquet"), store.join(run, "iter_0", "validations.parquet")
    store.write_table(rolls, "rollouts", [p[0] for p in pairs])
    store.write_table(grades, "validations", [p[1] for p in pairs])
    rows = {r["episode_id"]: r for r in store.read_rows(reward.fn(run, 0, [rolls], [grades], cfg),
                                                        "rewards")}
    assert rows["a/i0/s0"]["kept"] and rows["a/i0/s0"]["advantage"] > 0
    assert rows["b/i0/s1"]["drop_reason"] == "infra_failure"   # no sample, never reward 0
    assert rows["b/i0/s0"]["drop_reason"] == "no_signal"        # a group of one failure
