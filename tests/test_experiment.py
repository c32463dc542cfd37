"""The experiment ladder: its confidence-interval math, its split guard, its design (`--plan`), and
the whole ladder at toy size (the tiny random model, 1 seed, 1 RL iteration, 2 train and 2 test
instances, G=2) under a real Prefect API and a real MLflow store. The instance intervals and
the report's readers have their own tests (`tests/test_ladder_stats.py`).

The random tiny model solves nothing, so the toy ladder checks the plumbing, not learning: every
arm runs its flow, the warm-up trains on train-split expert episodes only, the report, the plots
and the MLflow parent -> arm -> seed runs exist with their metrics, each result holds its
per-instance tally and training curve, and a rerun skips every arm.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from flows.experiment import ARMS, Arm, arm_overrides, arms_to_run, check_ladder, inherit_start
from swe_rlvr.config import ConfigError, load_config
from tasks.ladder import aggregate_arm, curve, mean_ci, stage_seconds, t_critical
from tasks.metrics import episode_stats

# --------------------------------------------------------------------------- the math


def test_t_critical_matches_the_table_and_the_expansion_beyond_it():
    assert t_critical(1) == 12.706
    assert t_critical(2) == 4.303            # 3 seeds: more than twice the normal 1.96
    assert t_critical(30) == 2.042
    # df=31 by Cornish-Fisher: 1.96 + (7.530 + 1.960)/124 + (144.6 + 120.5 + 5.88)/92256
    #                         = 1.96 + 0.0765 + 0.0029 = 2.0394 (tables: 2.0395)
    assert t_critical(31) == pytest.approx(2.0395, abs=1e-3)
    assert t_critical(10_000) == pytest.approx(1.960, abs=1e-3)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        t_critical(0)


def test_mean_ci_of_three_seeds_is_the_t_interval():
    # mean 0.4; s = sqrt(((-.2)^2 + 0 + .2^2) / 2) = 0.2; half = 4.303 * 0.2 / sqrt(3) = 0.49687
    mean, low, high = mean_ci([0.2, 0.4, 0.6])
    assert mean == pytest.approx(0.4)
    assert low == pytest.approx(0.4 - 0.49687, abs=1e-5)
    assert high == pytest.approx(0.4 + 0.49687, abs=1e-5)


def test_mean_ci_of_one_seed_has_no_interval_and_equal_seeds_a_zero_width_one():
    mean, low, high = mean_ci([0.5])
    assert mean == 0.5 and math.isnan(low) and math.isnan(high)
    assert mean_ci([0.3, 0.3]) == pytest.approx((0.3, 0.3, 0.3))
    with pytest.raises(ValueError, match="at least one value"):
        mean_ci([])


def test_episode_stats_are_per_turn_and_per_episode_rates():
    rollouts = [{"turns": 4, "format_errors": 1, "termination": "submitted"},
                {"turns": 2, "format_errors": 2, "termination": "format_errors"}]
    # format errors (1 + 2) / (4 + 2) turns = 0.5; 1 of 2 submitted; (4 + 2) / 2 = 3 turns
    assert episode_stats(rollouts) == {"format_error_rate": 0.5, "submit_rate": 0.5,
                                       "mean_turns": 3.0}
    assert episode_stats([])["submit_rate"] == 0.0


def test_stage_seconds_sum_into_the_report_columns():
    manifests = [{"rollouts": {"wall_s": 10.0}, "validations": {"wall_s": 5.0},
                  "eval_rollouts": {"wall_s": 3.0}, "eval": {"wall_s": 0.5}},
                 {"expert": {"wall_s": 2.0}, "update": {"wall_s": 7.0},
                  "guidance": {"wall_s": 1.0}, "rewards": {"wall_s": 0.25}}]
    # rollout 10 + 2 (expert); grading 5 + 0.25 (rewards); eval 3 + 0.5
    assert stage_seconds(manifests) == {"rollout": 12.0, "grading": 5.25, "guidance": 1.0,
                                        "update": 7.0, "eval": 3.5}
    with pytest.raises(ValueError, match="STAGE_BUCKETS"):
        stage_seconds([{"mystery": {"wall_s": 1.0}}])


def _seed(pass1: float, by_step: dict[str, float], fmt: float, wall: float) -> dict:
    return {"pass1": pass1, "pass1_by_step": by_step, "format_error_rate": fmt,
            "submit_rate": 1 - fmt, "mean_turns": 3.0, "wall_s": wall,
            "times": {"rollout": wall / 2, "eval": wall / 2}}


def test_aggregate_arm_and_curve_over_two_seeds():
    seeds = [_seed(0.1, {"0": 0.0, "1": 0.1}, 0.2, 60.0),
             _seed(0.3, {"0": 0.2, "1": 0.3}, 0.4, 120.0)]
    row = aggregate_arm(seeds)
    # mean 0.2; s = sqrt(2 * 0.1^2 / 1) = 0.14142; half = 12.706 * 0.14142 / sqrt(2) = 1.2706
    assert row["pass1"] == pytest.approx(0.2)
    assert row["pass1_ci_high"] - row["pass1"] == pytest.approx(1.2706, abs=1e-4)
    assert row["format_error_rate"] == pytest.approx(0.3) and row["wall_s"] == 90.0
    assert row["time_rollout_s"] == 45.0 and row["time_update_s"] == 0.0
    steps, means, halves = curve(seeds)
    assert steps == [0, 1]
    assert means == pytest.approx([0.1, 0.2])
    assert halves == pytest.approx([1.2706, 1.2706], abs=1e-4)   # both steps spread 0.1 apart


# --------------------------------------------------------------------------- the arms


def test_arms_bring_their_prerequisites_in_ladder_order():
    assert arms_to_run(["dapo"]) == ["warmup", "rft", "dapo"]
    assert arms_to_run(["dapo_guided", "base"]) == ["base", "warmup", "rft", "dapo_guided"]
    with pytest.raises(ConfigError, match="choose from: base, warmup, rft, dapo, dapo_guided"):
        arms_to_run(["ppo"])


def test_guided_arm_trains_dpo_on_pairs_and_dapo_otherwise():
    guided = ARMS["dapo_guided"]
    assert "algorithm.name=dpo" in arm_overrides(guided, load_config(None, ["guidance.mode=pairs"]))
    assert "algorithm.name=dapo" in arm_overrides(guided, load_config(None, ["guidance.mode=strip"]))
    assert isinstance(guided, Arm) and guided.parent == "rft"


def test_rl_arms_take_step_0_from_the_arm_they_start_from():
    cfg = load_config(None, [])
    assert "orchestration.eval_start=false" in arm_overrides(ARMS["dapo"], cfg)
    assert "orchestration.eval_start=false" in arm_overrides(ARMS["dapo_guided"], cfg)
    for name in ("base", "warmup", "rft"):                 # no parent, or not an RL flow
        assert "orchestration.eval_start=false" not in arm_overrides(ARMS[name], cfg)
    rft = {"pass1": 0.1, "pass1_by_step": {"0": 0.1}}
    dapo = {"pass1": 0.2, "pass1_by_step": {"1": 0.2}}
    assert inherit_start(dapo, rft)["pass1_by_step"] == {"0": 0.1, "1": 0.2}
    assert inherit_start(dapo, None) is dapo
    evaluated = {"pass1": 0.2, "pass1_by_step": {"0": 0.3, "1": 0.2}}   # its own step 0 stands
    assert inherit_start(evaluated, rft) is evaluated
    unevaluated = {"pass1": None, "pass1_by_step": {}}                # --skip-eval rft
    assert inherit_start(dapo, unevaluated) is dapo


def test_ladder_refuses_to_evaluate_on_the_training_split():
    with pytest.raises(ConfigError, match="eval.split and instances.train_split"):
        check_ladder(load_config(None, ["eval.split=train"]))
    with pytest.raises(ConfigError, match="orchestration.expert_style='teacher' is not one of: splice, explore, sed"):
        check_ladder(load_config(None, ["orchestration.expert_style=teacher"]))


def test_plan_states_the_design_and_its_mdd_without_running_anything(tmp_path, capsys):
    """`--plan` counts the evaluation's instances with the instances task's own selection (here
    the 2 test ids of TOY's instances.ids) and prints the MDD, and nothing is written."""
    from swe_rlvr.cli import main
    out = tmp_path / "ladder"
    assert main(["experiment", "ladder", "--plan", "--seeds", "3", "--arms", "rft",
                 "--out", str(out), *TOY]) == 0
    printed = capsys.readouterr().out
    assert "- arms: warmup, rft; seeds: 0, 1, 2" in printed
    assert "2 `test` instances x 1 run(s) = 2 graded episodes per arm per seed (6 per arm" in printed
    # n=2, r=1, S=3, p=0.1: 2.801585 * sqrt(0.18 / 6) = 2.801585 * 0.173205 = 0.48525
    assert "between two arms: 0.485 (" in printed and "base rate 0.1;" in printed
    assert not out.exists()
    from flows.experiment import plan_ladder
    assert "base rate 0.5;" in plan_ladder("configs/ladder.yaml", TOY, seeds=1, base_rate=0.5)


def test_only_seeds_outside_the_seeds_is_refused_before_anything_runs(tmp_path):
    from flows.experiment import run_ladder
    with pytest.raises(ConfigError, match=r"--only-seeds 2 is not among the seeds 0\.\.1"):
        run_ladder("configs/ladder.yaml", seeds=2, only_seeds=[1, 2], out=tmp_path / "ladder")
    assert not (tmp_path / "ladder").exists()


# --------------------------------------------------------------------------- the split guard


def test_expert_task_refuses_test_instances_before_running_anything(tmp_path, tiny_model_dir):
    """A warm-up pointed at the test split (instances.train_split=test) must fail in the expert
    task, naming the refused ids, before a single sandbox or episode exists."""
    from agent.expert import SplitError
    from swe_rlvr.builtin import load_builtin
    from tasks import store
    from tasks.expert import expert_rollouts
    url = str(tmp_path / "iter_0" / "instances.parquet")
    store.write_table(url, "instances", [i.to_row() for i in load_builtin("test")[:2]])
    cfg = load_config(None, [f"orchestration.run_root={tmp_path}",
                             f"sandbox.workdir={tmp_path / 'work'}"])
    with pytest.raises(SplitError, match="swe-rlvr__iniconf-3"):
        expert_rollouts.fn(str(tmp_path), 0, url, str(tiny_model_dir), cfg)
    assert not (tmp_path / "iter_0" / "rollouts.parquet").exists()
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())


# --------------------------------------------------------------------------- the toy ladder

# instances.ids holds 4 train and 2 test ids (all easy): each split keeps its own. With
# configs/ladder.yaml's expert_share 0.5, the first 2 train ids in stable hash order are the
# warm-up's (its expert replays 2 episodes, not all 53) and the other 2 are what RFT and DAPO
# sample; evaluation sees the test pair.
EXPERT_PART = {"swe-rlvr__ledger-m025", "swe-rlvr__texttable-m005"}
RL_PART = {"swe-rlvr__semverkit-m003", "swe-rlvr__iniconf-m001"}
TOY_IDS = f"[{', '.join(sorted(EXPERT_PART | RL_PART))}, swe-rlvr__iniconf-3, swe-rlvr__iniconf-m019]"
TOY = [f"instances.ids={TOY_IDS}", "eval.runs=1", "eval.k=1", "algorithm.group_size=2",
       "orchestration.iterations=1", "orchestration.max_workers=2", "orchestration.expert_epochs=1",
       "agent.max_format_errors=2", "trainer.sft_batch_size=4", "trainer.compile=false",
       "guidance.attempts=1", "tracking.log_checkpoints=false", "engine.max_batch=4"]



@pytest.fixture(scope="module")
def ladder(prefect_api, tmp_path_factory, tiny_model_dir):
    """The whole ladder at toy size; (out dir, report path, seconds)."""
    from flows.experiment import run_ladder
    out = tmp_path_factory.mktemp("ladder")
    start = time.perf_counter()
    report = run_ladder("configs/ladder.yaml", [*TOY, f"engine.model={tiny_model_dir}",
                                                f"sandbox.workdir={out / 'work'}"],
                        seeds=1, out=out)
    return out, Path(report), time.perf_counter() - start


@pytest.mark.e2e
def test_report_has_a_row_per_arm_and_the_plot_is_a_png(ladder):
    out, report, _ = ladder
    text = report.read_text()
    for arm in ARMS:
        assert f"| {arm} | 1 | 0.000 | n=1 |" in text, arm     # random weights solve nothing
    for column in ("format err", "submit", "turns", "rollout min", "grading min", "guidance min",
                   "update min", "eval min"):
        assert column in text
    assert "| dapo | 0 | 0: 0.000, 1: 0.000 |" in text          # pass@1 before and after DAPO
    assert not (out / "dapo-seed0" / "iter_0" / "eval_rollouts.parquet").exists()  # step 0: rft's
    assert (out / "dapo-seed0" / "iter_1" / "eval_rollouts.parquet").exists()
    assert (out / "ladder.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for section in ("## Paired comparisons", "## What the intervals support", "## Training curves",
                    "## Guided recovery (dapo_guided)", "## Cost per arm",
                    "- minimum detectable difference in pass@1 between two arms: "):
        assert section in text, section
    # nothing solved anywhere: every paired difference is 0 on both test instances
    assert "| dapo − warmup | pooled | 2 | 1/1 | 0.000 | 0.000 | +0.000 | [0.000, 0.000] | no |" in text
    assert "dapo − warmup = +0.000" in text and "no measured difference" in text


@pytest.mark.e2e
def test_each_result_holds_its_instance_tally_and_training_curve(ladder):
    import json
    out, _, _ = ladder
    test_ids = {"swe-rlvr__iniconf-3", "swe-rlvr__iniconf-m019"}
    results = {arm: json.loads((out / "results" / arm / "seed0.json").read_text()) for arm in ARMS}
    for arm, row in results.items():
        assert row["instances"] == {i: [0, 1] for i in test_ids}, arm   # 1 run, none resolved
    assert results["base"]["training"] == {} and results["warmup"]["training"] == {}
    for arm in ("rft", "dapo", "dapo_guided"):           # RFT's sampling, DAPO's iteration 0
        (only,) = results[arm]["training"].values()
        assert list(results[arm]["training"]) == ["0"], arm
        assert only["train_samples"] == 4 and only["groups"] == 2, arm   # 2 instances x G=2
    guided = results["dapo_guided"]["training"]["0"]
    assert guided["guided_instances"] == 2 and guided["guided_recovered"] == 0


@pytest.mark.e2e
def test_warm_up_and_rl_train_on_their_own_parts_of_the_train_split(ladder):
    from swe_rlvr.builtin import load_builtin
    from tasks import store
    out, _, _ = ladder
    warm = out / "warmup-seed0" / "warmup" / "iter_0"
    seen = {r["instance_id"] for r in store.read_rows(str(warm / "rollouts.parquet"), "rollouts")}
    assert seen == EXPERT_PART                                         # the expert's part only
    for rolls in [out / "rft-seed0" / "rft" / "iter_0" / "rollouts.parquet",
                  out / "dapo-seed0" / "iter_0" / "rollouts.parquet"]:
        sampled = {r["instance_id"] for r in store.read_rows(str(rolls), "rollouts")}
        assert sampled == RL_PART, rolls                               # never a demonstrated one
    assert seen <= {i.instance_id for i in load_builtin("train")}
    assert not seen & {i.instance_id for i in load_builtin("test")}
    steps = store.read_rows(str(warm / "train_metrics.parquet"), "train_metrics")
    assert steps, "the warm-up ran no optimiser step"
    assert store.is_sealed(str(warm / "checkpoint"))


@pytest.mark.e2e
def test_mlflow_has_a_parent_an_arm_child_per_arm_and_a_seed_child_per_arm(ladder):
    from mlflow.tracking import MlflowClient
    out, _, _ = ladder
    mlc = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = mlc.search_runs([mlc.get_experiment_by_name("swe-rlvr").experiment_id])
    by_parent: dict[str, list] = {}
    for run in runs:
        by_parent.setdefault(run.data.tags.get("mlflow.parentRunId", ""), []).append(run)
    (parent,) = by_parent[""]
    arms = {r.data.tags["swe_rlvr.arm"]: r for r in by_parent[parent.info.run_id]}
    assert set(arms) == set(ARMS)
    for name, arm in arms.items():
        for key in ("pass1", "format_error_rate", "submit_rate", "mean_turns", "time_eval_s"):
            assert key in arm.data.metrics, (name, key)
        assert parent.data.metrics[f"{name}.pass1"] == 0.0
        (seed,) = by_parent[arm.info.run_id]
        assert seed.data.tags["swe_rlvr.seed"] == "0" and "pass1" in seed.data.metrics
    assert len(mlc.get_metric_history(arms["dapo"].info.run_id, "pass1")) == 2   # steps 0 and 1
    assert {f.path for f in mlc.list_artifacts(parent.info.run_id)} >= {"report.md", "ladder.png"}


@pytest.mark.e2e
def test_rerun_skips_every_finished_arm(ladder, tiny_model_dir):
    from flows.experiment import run_ladder
    out, report, seconds = ladder
    results = sorted((out / "results").rglob("*.json"))
    before = {p: p.stat().st_mtime_ns for p in results}
    start = time.perf_counter()
    run_ladder("configs/ladder.yaml", [*TOY, f"engine.model={tiny_model_dir}",
                                       f"sandbox.workdir={out / 'work'}"], seeds=1, out=out)
    assert {p: p.stat().st_mtime_ns for p in results} == before
    assert len(results) == len(ARMS)
    assert time.perf_counter() - start < seconds / 3
    from mlflow.tracking import MlflowClient
    mlc = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    dapo = mlc.search_runs([mlc.get_experiment_by_name("swe-rlvr").experiment_id],
                           "tags.swe_rlvr.arm = 'dapo'")
    arm_runs = [r for r in dapo if "swe_rlvr.seed" not in r.data.tags]
    assert len(arm_runs) == 1                                          # no second arm run
    assert arm_runs[0].info.status == "FINISHED"                       # reopened, closed again
    assert len(mlc.get_metric_history(arm_runs[0].info.run_id, "pass1")) == 2   # nothing logged twice


@pytest.mark.e2e
def test_only_seeds_runs_that_seed_and_the_report_covers_every_finished_one(ladder, tiny_model_dir):
    """A process per seed shares `out`: seed 1 of the base arm runs alone, seed 0's result is left
    as it was, and the report's base row is over both seeds."""
    from flows.experiment import run_ladder
    out, _, _ = ladder
    seed0 = out / "results" / "base" / "seed0.json"
    before = seed0.stat().st_mtime_ns
    report = run_ladder("configs/ladder.yaml", [*TOY, f"engine.model={tiny_model_dir}",
                                                f"sandbox.workdir={out / 'work'}"],
                        seeds=2, arms=["base"], out=out, only_seeds=[1])
    assert seed0.stat().st_mtime_ns == before
    assert sorted(p.name for p in (out / "results" / "base").glob("*.json")) == ["seed0.json",
                                                                                  "seed1.json"]
    assert "| base | 2 | 0.000 |" in Path(report).read_text()


@pytest.mark.e2e
def test_a_shared_warm_up_is_evaluated_per_seed_not_trained(ladder, tiny_model_dir, tmp_path):
    """--shared-warmup: seed 1's warmup arm evaluates seed 0's warm-up checkpoint (no SFT), its
    result and seed file carry the checkpoint's digest, and the report says the warm-up is
    shared."""
    from flows.experiment import run_ladder
    from tasks.ladder_results import checkpoint_digest
    out, _, _ = ladder
    shared = json.loads((out / "results" / "warmup" / "seed0.json").read_text())["policy"]
    again = tmp_path / "shared"
    run_ladder("configs/ladder.yaml", [*TOY, f"engine.model={tiny_model_dir}",
                                       f"sandbox.workdir={again / 'work'}"],
               seeds=2, arms=["warmup"], out=again, only_seeds=[1], shared_warmup=shared,
               results_dir=tmp_path / "committed")
    row = json.loads((again / "results" / "warmup" / "seed1.json").read_text())
    assert row["policy"] == shared and row["shared_warmup"] == checkpoint_digest(shared)
    assert row["times"].get("update", 0.0) == 0.0 and row["training"] == {}   # nothing trained
    seed = json.loads((tmp_path / "committed" / "seed-1.json").read_text())
    assert seed["arms"]["warmup"]["shared_warmup"] == checkpoint_digest(shared)
    from tasks.ladder_results import write_committed_report
    text = write_committed_report(tmp_path / "committed", tmp_path / "report.md")
    assert "one warm-up shared by every seed" in text


@pytest.mark.e2e
def test_a_seeds_own_warm_up_is_evaluated_and_an_unevaluated_rft_stays_out(ladder, tiny_model_dir,
                                                                          tmp_path):
    """--warmup-checkpoint and --skip-eval rft: seed 0's warmup arm evaluates the warm-up that the
    toy ladder trained (same recipe, same seed), the rft arm trains without an evaluation, dapo
    starts from it, and the seed file and the report hold warmup and dapo only. Another recipe's
    warm-up is refused, naming the field, before anything runs."""
    from flows.experiment import run_ladder
    from tasks.ladder_results import checkpoint_digest, write_committed_report
    out, _, _ = ladder
    own = json.loads((out / "results" / "warmup" / "seed0.json").read_text())["policy"]
    again = tmp_path / "own"
    base = [*TOY, f"engine.model={tiny_model_dir}", f"sandbox.workdir={again / 'work'}"]
    with pytest.raises(ConfigError, match="trained with trainer.rft_lr=0.0001, but"):
        run_ladder("configs/ladder.yaml", [*base, "trainer.rft_lr=0.001"], seeds=1,
                   arms=["warmup"], out=again, only_seeds=[0], warmup_checkpoint=own)
    run_ladder("configs/ladder.yaml", base, seeds=1, arms=["warmup", "dapo"], out=again,
               only_seeds=[0], skip_eval=["rft"], warmup_checkpoint=own,
               results_dir=tmp_path / "committed")
    row = {arm: json.loads((again / "results" / arm / "seed0.json").read_text())
           for arm in ("warmup", "rft", "dapo")}
    assert row["warmup"]["policy"] == own and row["warmup"]["training"] == {}
    assert row["warmup"]["warmup_trained"]["digest"] == checkpoint_digest(own)
    assert row["warmup"]["times"].get("update", 0.0) == 0.0                 # nothing trained
    assert row["rft"]["pass1"] is None and list(row["rft"]["training"]) == ["0"]
    assert not (again / "rft-seed0" / "iter_0" / "eval_rollouts.parquet").exists()
    assert row["dapo"]["pass1_by_step"] == {"1": 0.0}                 # no step 0 to inherit
    seed = json.loads((tmp_path / "committed" / "seed-0.json").read_text())
    assert sorted(seed["arms"]) == ["dapo", "warmup"]
    from mlflow.tracking import MlflowClient
    mlc = MlflowClient(f"sqlite:///{again / 'mlflow.db'}")
    runs = mlc.search_runs([mlc.get_experiment_by_name("swe-rlvr").experiment_id])
    assert {r.info.status for r in runs} == {"FINISHED"}              # the rft arm's run too
    text = write_committed_report(tmp_path / "committed", tmp_path / "report.md")
    assert "| dapo − warmup | pooled |" in text and "| rft |" not in text
    assert f"trained earlier, at commit `{row['warmup']['warmup_trained']['commit']}`" in text
