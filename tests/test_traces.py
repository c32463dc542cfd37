"""Episodes as MLflow traces: the turns read back from a ROLLOUTS row (by hand), the choice of
training episodes, the run's datasets and description, and real traces in a real MLflow store
(SQLite: no server), found again by their tags."""

from __future__ import annotations

import json

import pytest

from agent.trajectory import Trajectory
from agent.turns import exit_code, turns
from swe_rlvr.artifacts import EpisodeOutcome
from swe_rlvr.config import load_config
from tasks import store, tracking
from tasks.traces import chosen, log_step_traces, turn_times
from tasks.tracking_store import client

SYSTEM = {"role": "system", "content": "You fix issues."}
ISSUE = {"role": "user", "content": "Fix `mean()` in statkit/core.py."}


def _trajectory(instance_id: str = "demo__x-1", iteration: int = 0, sample: int = 0,
                guided: bool = False) -> Trajectory:
    """Two turns: `ls` (exit 0), then a reply with no command block (a format error)."""
    t = Trajectory(instance_id, guided=guided, iteration=iteration, sample=sample,
                   started_at=1_700_000_000.0)
    t.add_context([1, 2, 3])
    t.add_reply([10, 11], [-0.5, -0.25], at_s=0.1, gen_s=0.5)
    t.turn_log[-1]["exec_s"] = 0.2
    t.add_context([4, 5])
    t.add_reply([12], [-1.0], at_s=1.0, gen_s=0.25)
    t.mask_last_reply()
    t.format_errors = 1
    t.messages = [SYSTEM, ISSUE,
                  {"role": "assistant", "content": "Let me look.\n```bash\nls\n```"},
                  {"role": "user", "content": "core.py\n[exit code 0]"},
                  {"role": "assistant", "content": "I think it is fine."},
                  {"role": "user", "content": "Your reply has no command block."}]
    t.termination, t.wall_s, t.gen_s, t.exec_s = "max_turns", 2.0, 0.75, 0.2
    return t


def _grade(episode_id: str, instance_id: str, resolved: bool = False, infra: bool = False,
           tampered: bool = False) -> dict:
    return {"episode_id": episode_id, "instance_id": instance_id, "patch_applied": True,
            "apply_method": "git-apply", "tests_status_json": "{}", "f2p_passed": [],
            "f2p_failed": [] if resolved else ["tests/test_core.py::test_mean"],
            "p2p_passed": [], "p2p_failed": [], "resolution": "FULL" if resolved else "NO",
            "resolved": resolved, "reference_resolved": resolved, "guards": [],
            "tampered": tampered, "tamper_reason": "canary failed" if tampered else "",
            "infra_failure": infra, "infra_reason": "image build failed" if infra else "",
            "log_excerpt": "", "duration_s": 0.5}


# --------------------------------------------------------------------------- turns, by hand

def test_exit_code_is_the_last_note_the_tool_appended():
    assert exit_code("core.py\n[exit code 0]") == 0
    assert exit_code("[exit code 0]\n[exit code 2]\n") == 2    # printed by the command, then real
    assert exit_code("killed\n[exit code -9]") == -9
    assert exit_code("[exit code 0]\nmore output") is None       # not the last line: not a note
    assert exit_code("Opened core.py (120 lines)") is None


def test_turns_of_a_row_with_its_turn_log():
    first, second = turns(_trajectory().to_row())
    assert (first.command, first.observation, first.exit_code) == ("ls", "core.py\n[exit code 0]", 0)
    assert (first.prompt_tokens, first.gen_tokens, first.format_error) == (3, 2, False)
    assert first.logprob_sum == pytest.approx(-0.75)
    assert (first.at_s, first.gen_s, first.exec_s) == (0.1, 0.5, 0.2)
    assert (second.command, second.exit_code, second.format_error) == ("", None, True)
    assert (second.prompt_tokens, second.gen_tokens, second.logprob_sum) == (7, 1, -1.0)
    assert second.observation == "Your reply has no command block."


def test_turns_of_a_row_written_before_the_turn_log():
    row = _trajectory().to_row()
    del row["turns_json"]
    first, _ = turns(row)
    assert first.command == "ls" and first.exit_code == 0
    assert (first.prompt_tokens, first.logprob_sum, first.format_error, first.at_s) == (
        None, None, None, None)
    assert Trajectory.from_row(row).turn_log == []


def test_the_turn_log_survives_the_row():
    t = _trajectory()
    back = Trajectory.from_row(t.to_row())
    assert (back.started_at, back.turn_log) == (t.started_at, t.turn_log)


def test_turn_times_from_the_log_else_the_wall_time_shared():
    assert turn_times(turns(_trajectory().to_row()), 2.0) == [
        (0.1, pytest.approx(0.6), pytest.approx(0.8)), (1.0, 1.25, 1.25)]
    row = _trajectory().to_row()
    row["turns_json"] = None
    assert turn_times(turns(row), 4.0) == [(0.0, 1.0, 2.0), (2.0, 3.0, 4.0)]


def test_chosen_is_stable_and_keeps_the_order():
    rows = [{"episode_id": f"i{k}/i0/s0"} for k in range(10)]
    picked = chosen(rows, 3)
    assert len(picked) == 3 and picked == [r for r in rows if r in picked]
    assert chosen(list(reversed(rows)), 3) == list(reversed(picked))
    assert chosen(rows, -1) == rows and chosen(rows, 20) == rows and chosen(rows, 0) == []


def test_outcome_names_each_way_an_episode_ends():
    row = _trajectory().to_row()
    eid, iid = row["episode_id"], row["instance_id"]
    assert EpisodeOutcome(row, _grade(eid, iid, resolved=True)).outcome == "resolved"
    assert EpisodeOutcome(row, _grade(eid, iid)).outcome == "failed"
    assert EpisodeOutcome(row, _grade(eid, iid, tampered=True)).outcome == "tampered"
    assert EpisodeOutcome(row, _grade(eid, iid, infra=True)).outcome == "infra_failure"
    assert EpisodeOutcome(row, None).outcome == "no_validation"
    assert EpisodeOutcome({**row, "termination": "error"}, _grade(eid, iid)).outcome == "crash"


def test_instances_digest_ignores_order_and_sees_commits():
    a = [{"instance_id": "x-1", "base_commit": "c1"}, {"instance_id": "x-2", "base_commit": "c2"}]
    assert tracking.instances_digest(a) == tracking.instances_digest(a[::-1])
    assert tracking.instances_digest(a) != tracking.instances_digest(
        [a[0], {**a[1], "base_commit": "c3"}])


def test_the_description_states_the_recipe():
    cfg = load_config("configs/ladder.yaml", [])
    text = tracking.describe(cfg, {"mlflow.source.git.commit": "0123456789abcdef",
                                   "prefect.flow_run_url": "http://127.0.0.1:4200/runs/flow-run/x"})
    assert text.startswith("DAPO on `runs/.models/smollm2` after RFT warm-up: 1 iteration(s) "
                           "of 8 `train` instances of `builtin` (tiers easy, generated) x G=4")
    assert "10 `test` instances x 1 run(s)" in text and "Commit `0123456789ab`" in text
    assert text.endswith("Prefect flow run: http://127.0.0.1:4200/runs/flow-run/x")
    evaluation = tracking.describe(cfg, {}, trains=False)
    assert evaluation == ("Evaluation of `runs/.models/smollm2` on 10 `test` instances of "
                          "`builtin` x 1 run(s).")


# --------------------------------------------------------------------------- real MLflow store

def _write_iteration(run_dir: str) -> None:
    """iter_0: 2 training episodes (one resolved), their rewards and guidance for one guided
    re-attempt; iter_1: 3 evaluation episodes (resolved, failed, infrastructure failure)."""
    train = [_trajectory("demo__x-1", 0, s) for s in range(2)]
    rows = [t.to_row() for t in train]
    grades = [_grade(rows[0]["episode_id"], "demo__x-1", resolved=True),
              _grade(rows[1]["episode_id"], "demo__x-1")]
    it0 = store.join(run_dir, "iter_0")
    store.write_table(store.join(it0, "rollouts.parquet"), "rollouts", rows)
    store.write_table(store.join(it0, "validations.parquet"), "validations", grades)
    store.write_table(store.join(it0, "rewards.parquet"), "rewards", [
        {"episode_id": r["episode_id"], "instance_id": "demo__x-1", "guided": False,
         "reward_resolved": float(k == 0), "reward_turns": 0.0, "reward_overlong": 0.0,
         "reward_format": 0.0, "reward": float(k == 0), "advantage": 0.5 - k, "kept": True,
         "drop_reason": ""} for k, r in enumerate(rows)])
    guided = _trajectory("demo__x-1", 0, 0, guided=True).to_row()
    store.write_table(store.join(it0, "rollouts_guided.parquet"), "rollouts", [guided])
    store.write_table(store.join(it0, "validations_guided.parquet"), "validations",
                      [_grade(guided["episode_id"], "demo__x-1")])
    store.write_table(store.join(it0, "guidance.parquet"), "guidance", [
        {"instance_id": "demo__x-1", "failed_episode_id": rows[1]["episode_id"], "plan": "",
         "feedback": "", "location": "statkit/core.py:12", "text": "Look at line 12.",
         "source": "rules", "leakage": 0.0}])
    evals = [_trajectory(f"demo__x-{k}", 1, 0).to_row() for k in range(3)]
    it1 = store.join(run_dir, "iter_1")
    store.write_table(store.join(it1, "eval_rollouts.parquet"), "rollouts", evals)
    store.write_table(store.join(it1, "eval_validations.parquet"), "validations", [
        _grade(evals[0]["episode_id"], "demo__x-0", resolved=True),
        _grade(evals[1]["episode_id"], "demo__x-1"),
        _grade(evals[2]["episode_id"], "demo__x-2", infra=True)])


def _search(cfg, run_id: str, filter_string: str) -> list:
    import mlflow

    from tasks.traces import flush
    from tasks.tracking_store import use_store
    experiment = client(cfg).get_run(run_id).info.experiment_id
    use_store(cfg)
    flush()
    return mlflow.search_traces(locations=[experiment], filter_string=filter_string,
                                run_id=run_id, return_type="list")


def test_episodes_become_traces_found_by_their_tags(tmp_path):
    root = tmp_path / "runs"
    cfg = load_config(None, [f"orchestration.run_root={root}", "tracking.trace_train_episodes=1",
                             "tracking.log_artifacts=false", "tracking.log_checkpoints=false"])
    run_dir = str(root / "run-a")
    _write_iteration(run_dir)
    run_id = tracking.open_run(cfg, run_dir)
    mlc = client(cfg)
    assert log_step_traces(cfg, mlc, run_id, run_dir, 0) == {"rollout": 1, "rollouts_guided": 1}
    assert log_step_traces(cfg, mlc, run_id, run_dir, 1) == {"eval": 3}
    assert log_step_traces(cfg, mlc, run_id, run_dir, 1) == {}          # a resume logs nothing

    failed = _search(cfg, run_id, "tags.stage = 'eval' AND tags.iteration = '1' "
                                  "AND tags.outcome = 'failed'")
    assert [t.info.tags["instance_id"] for t in failed] == ["demo__x-1"]
    trace = failed[0]
    assert trace.info.state.value == "ERROR"
    spans = {s.name: s for s in trace.data.spans}
    assert list(spans) == ["episode", "llm 0", "tool 0", "llm 1", "tool 1"]
    episode = spans["episode"]
    assert episode.inputs["issue"] == ISSUE["content"]
    assert episode.attributes["fail_to_pass_failed"] == ["tests/test_core.py::test_mean"]
    assert episode.start_time_ns == 1_700_000_000 * 10**9
    tool = spans["tool 0"]
    assert tool.inputs == {"command": "ls"} and tool.attributes["exit_code"] == 0
    assert tool.outputs == {"observation": "core.py\n[exit code 0]"}
    assert tool.start_time_ns == episode.start_time_ns + 600_000_000     # at 0.1 s + 0.5 s
    assert spans["llm 0"].attributes["logprob_sum"] == pytest.approx(-0.75)
    assert spans["llm 0"].attributes["tokens_per_s"] == 4.0
    assert spans["llm 1"].attributes["format_error"] is True
    assert "exit_code" not in spans["tool 1"].attributes

    infra = _search(cfg, run_id, "tags.outcome = 'infra_failure'")
    assert infra[0].data.spans[0].attributes["infra_reason"] == "image build failed"
    assert [t.info.state.value for t in _search(
        cfg, run_id, "tags.stage = 'eval' AND tags.outcome = 'resolved'")] == [
        "OK"]
    training = _search(cfg, run_id, "tags.stage = 'rollout'")
    assert len(training) == 1 and "advantage" in training[0].data.spans[0].attributes
    guided = _search(cfg, run_id, "tags.stage = 'rollouts_guided'")
    assert guided[0].data.spans[0].inputs["guidance"] == "Look at line 12."
    assert guided[0].info.tags["guided"] == "true"


def test_tracing_off_leaves_no_trace(tmp_path):
    root = tmp_path / "runs"
    cfg = load_config(None, [f"orchestration.run_root={root}", "tracking.traces=false",
                             "tracking.log_artifacts=false", "tracking.log_checkpoints=false"])
    run_dir = str(root / "run-b")
    _write_iteration(run_dir)
    run_id = tracking.open_run(cfg, run_dir)
    tracking.log_step(cfg, run_id, run_dir, 1)
    assert _search(cfg, run_id, "") == []
    assert not list((root / "run-b" / "_tracking").glob("traces_*"))


def test_the_run_carries_its_datasets_and_description(tmp_path):
    root = tmp_path / "runs"
    cfg = load_config(None, [f"orchestration.run_root={root}", "instances.source=builtin",
                             "tracking.log_artifacts=false", "tracking.log_checkpoints=false"])
    run_dir = str(root / "run-c")
    from swe_rlvr.loaders import load_instances
    some = load_instances("builtin").instances[:3]
    store.write_table(store.join(run_dir, "iter_0", "instances.parquet"), "instances",
                      [i.to_row() for i in some[:2]])
    store.write_table(store.join(run_dir, "iter_0", "eval_instances.parquet"), "instances",
                      [i.to_row() for i in some])
    run_id = tracking.open_run(cfg, run_dir)
    tracking.log_step(cfg, run_id, run_dir, 0)
    run = client(cfg).get_run(run_id)
    assert run.data.tags[tracking.NOTE].startswith("DAPO on")
    datasets = {d.dataset.name: d for d in run.inputs.dataset_inputs}
    pool = datasets["train-pool"]
    assert json.loads(pool.dataset.profile)["instances"] > 100
    assert json.loads(pool.dataset.source)["split"] == "train"
    assert [t.value for t in pool.tags] == ["training"]
    window, evaluated = datasets["rl-window-0"], datasets["eval-test"]
    assert json.loads(window.dataset.profile) == {"instances": 2}
    assert evaluated.dataset.digest == tracking.instances_digest([i.to_row() for i in some])
    again = tracking.open_run(load_config(None, [f"orchestration.run_root={root}",
                                                 "instances.source=builtin"]),
                              str(root / "run-d"))
    twin = {d.dataset.name: d for d in client(cfg).get_run(again).inputs.dataset_inputs}
    assert twin["train-pool"].dataset.digest == pool.dataset.digest


def test_an_evaluation_run_logs_no_train_pool_so_a_file_without_splits_can_be_evaluated(tmp_path):
    import dataclasses

    from swe_rlvr.builtin import load_builtin
    from swe_rlvr.loaders import write_instances
    plain = tmp_path / "plain.jsonl"          # no split at all: there is no train pool to log
    write_instances(plain, [dataclasses.replace(i, split="") for i in load_builtin("test")[:2]])
    root = tmp_path / "runs"
    cfg = load_config(None, [f"orchestration.run_root={root}", f"instances.source={plain}",
                             "eval.split=all"])
    run_id = tracking.open_run(cfg, str(root / "eval-plain"), trains=False)
    run = client(cfg).get_run(run_id)
    assert run.inputs.dataset_inputs == []
    assert run.data.tags[tracking.NOTE].startswith("Evaluation of ")
    with pytest.raises(ValueError, match="No instances of split 'train'"):
        tracking.open_run(cfg, str(root / "train-plain"))


def test_the_bench_sets_tracing_against_the_stages_that_made_the_episodes(tmp_path):
    from bench.tracing import tracing_rows
    run_dir = str(tmp_path / "runs" / "bench")
    _write_iteration(run_dir)
    cfg = load_config(None, ["tracking.trace_train_episodes=1", "tracking.traces=false"])
    manifests = {"iteration": {"rollouts": {"wall_s": 30.0}, "validations": {"wall_s": 10.0},
                               "rollouts_guided": {"wall_s": 20.0}},
                 "evaluation": {"eval_rollouts": {"wall_s": 50.0}}}
    rows = tracing_rows(cfg, run_dir, manifests, tmp_path)      # traces on whatever cfg says
    assert [(r["stage"], r["traces"], r["stage_wall_s"]) for r in rows] == [
        ("rollout", 1, 40.0), ("rollouts_guided", 1, 20.0), ("eval", 3, 50.0)]
    for r in rows:
        assert r["share"] == pytest.approx((r["build_s"] + r["export_cpu_s"]) / r["stage_wall_s"])
