"""The ladder's options that change what an arm runs (`flows.ladder_options`): the mixed RL
window read from the rft arm's real sampling artifacts, which arms --skip-eval may leave
unevaluated, and the check that a --warmup-checkpoint was trained by the recipe the seed's
warmup arm would use. The toy ladder runs the last two end to end (`tests/test_experiment.py`)."""

from __future__ import annotations

import json

import pytest
import yaml

from flows.ladder_options import WARMUP_FREE, check_warmup_checkpoint, skippable, warmup_difference
from swe_rlvr.config import ConfigError, load_config, to_dict


def test_only_an_unrequested_rft_arm_may_skip_its_evaluation():
    assert skippable(["rft"], ["warmup", "dapo"]) == frozenset({"rft"})
    assert skippable([], ["warmup"]) == frozenset()
    with pytest.raises(ConfigError, match="--skip-eval dapo: only rft may be"):
        skippable(["dapo"], ["warmup", "dapo"])
    with pytest.raises(ConfigError, match="drop 'rft' from --skip-eval or from --arms"):
        skippable(["rft"], ["rft", "dapo"])


def test_warmup_difference_names_the_first_field_the_warm_up_reads():
    ladder = load_config("configs/ladder.yaml", [])
    free = ["eval.split=dev", "eval.runs=8", "instances.limit=128", "reward.turn_penalty=false",
            "orchestration.iterations=6", "trainer.torch_threads=1", "tracking.traces=false"]
    assert warmup_difference(ladder, load_config("configs/ladder.yaml", free)) is None
    assert warmup_difference(ladder, load_config("configs/ladder.yaml", ["trainer.seed=1"])) \
        == "trainer.seed"
    assert warmup_difference(ladder, load_config(
        "configs/ladder.yaml", ["orchestration.expert_epochs=2", "trainer.lr=1e-3"])) \
        == "orchestration.expert_epochs"                        # the first in name order
    assert all("." in f or f in ("eval", "tracking", "verifier", "guidance", "reward")
               for f in WARMUP_FREE)


def _warmup_run(root, cfg) -> str:
    """A run directory as the warmup arm leaves it: config.yaml, and a sealed-looking checkpoint
    at warmup/iter_0/checkpoint holding a config.json and weights to digest."""
    checkpoint = root / "warmup-seed0" / "warmup" / "iter_0" / "checkpoint"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    (root / "warmup-seed0" / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg)))
    return str(checkpoint)


def test_a_warmup_checkpoint_is_refused_unless_its_run_used_the_same_recipe(tmp_path):
    trained = load_config("configs/ladder.yaml", ["eval.split=dev", "eval.limit=25"])
    checkpoint = _warmup_run(tmp_path, trained)
    same = check_warmup_checkpoint(checkpoint, load_config("configs/ladder.yaml", ["eval.limit=0"]))
    assert len(same["digest"]) == 64 and same["commit"] == "unknown"   # no MLflow run beside it
    with pytest.raises(ConfigError, match=r"trained with trainer.seed=0, but this seed's warmup "
                                          r"arm would train with trainer.seed=2"):
        check_warmup_checkpoint(checkpoint, load_config("configs/ladder.yaml", ["trainer.seed=2"]))
    with pytest.raises(ConfigError, match="is not a warm-up's checkpoint"):
        check_warmup_checkpoint(tmp_path / "warmup-seed0", trained)      # the run, not its checkpoint
    json.dumps(same)                                                     # goes into a result file
def test_the_mixed_window_is_the_rft_samplings_split_instances(tmp_path):
    """window_overrides reads the rft stage's real artifacts beside its checkpoint: of three
    instances sampled twice, only the one resolved once and not the other time is kept."""
    from flows.ladder_options import window_overrides
    from swe_rlvr.config import ConfigError, load_config
    from tasks import store
    stage = tmp_path / "rft" / "iter_0"
    (stage / "checkpoint").mkdir(parents=True)
    wins = {("A", 0): True, ("A", 1): True, ("B", 0): True, ("B", 1): False,
            ("C", 0): False, ("C", 1): False}
    rollouts = [_full_row("rollouts", episode_id=f"{i}{s}", instance_id=i, sample=s,
                          termination="submitted") for i, s in wins]
    grades = [_full_row("validations", episode_id=f"{i}{s}", instance_id=i, resolved=won)
              for (i, s), won in wins.items()]
    store.write_table(str(stage / "rollouts.parquet"), "rollouts", rollouts)
    store.write_table(str(stage / "validations.parquet"), "validations", grades)
    got = window_overrides(str(stage / "checkpoint"), 8)
    assert got == ["instances.train_ids=[B]", "instances.limit=1", "instances.rotate=false"]
    assert load_config("configs/ladder.yaml", got).instances.train_ids == ("B",)
    store.write_table(str(stage / "validations.parquet"), "validations",
                      [{**g, "resolved": False} for g in grades])
    with pytest.raises(ConfigError, match="no instance of the rft arm's sampling"):
        window_overrides(str(stage / "checkpoint"), 8)


def test_a_window_per_iteration_rotates_through_the_mixed_window(tmp_path):
    """With --window-per-iteration K below the window's size, RL samples K of the window at each
    iteration, in turn (instances.rotate); at or above it, the whole window as before."""
    from flows.experiment import run_ladder
    from flows.ladder_options import window_overrides
    from swe_rlvr.config import ConfigError, load_config
    from tasks import store
    from tasks.instances import window
    stage = tmp_path / "rft" / "iter_0"
    (stage / "checkpoint").mkdir(parents=True)
    wins = {(i, s): s == 0 for i in "BDE" for s in (0, 1)}          # each split: won once
    store.write_table(str(stage / "rollouts.parquet"), "rollouts",
                      [_full_row("rollouts", episode_id=f"{i}{s}", instance_id=i, sample=s,
                                 termination="submitted") for i, s in wins])
    store.write_table(str(stage / "validations.parquet"), "validations",
                      [_full_row("validations", episode_id=f"{i}{s}", instance_id=i, resolved=won)
                       for (i, s), won in wins.items()])
    checkpoint = str(stage / "checkpoint")
    got = window_overrides(checkpoint, 8, per_iteration=2)
    assert got == ["instances.train_ids=[B,D,E]", "instances.limit=2", "instances.rotate=true"]
    cfg = load_config("configs/ladder.yaml", got).instances
    assert (cfg.limit, cfg.rotate) == (2, True)
    assert [window(list("BDE"), cfg.limit, k) for k in range(3)] == [list("BD"), list("EB"),
                                                                     list("DE")]
    assert window_overrides(checkpoint, 8, per_iteration=3) == window_overrides(checkpoint, 8)
    assert window_overrides(checkpoint, 8)[1:] == ["instances.limit=3", "instances.rotate=false"]
    with pytest.raises(ConfigError, match="--window-per-iteration must be 0"):
        window_overrides(checkpoint, 8, per_iteration=-1)
    with pytest.raises(ConfigError, match="give --mixed-window N too"):
        run_ladder("configs/ladder.yaml", out=tmp_path / "ladder", window_per_iteration=2)


def _full_row(name: str, **values) -> dict:
    """A row of the versioned `name` table: each column's type's zero, then `values`."""
    import pyarrow as pa

    from swe_rlvr.artifacts import versioned
    zero = {pa.types.is_string: "", pa.types.is_boolean: False, pa.types.is_integer: 0,
            pa.types.is_floating: 0.0, pa.types.is_list: []}
    row = {f.name: next((z for test, z in zero.items() if test(f.type)), None)
           for f in versioned(name)}
    return {**row, **values}
