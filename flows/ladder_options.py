"""The ladder's options that change what an arm runs:
- `--mixed-window N` (`window_overrides`): the RL arms sample the instances that the rft arm's
  sampling split between resolved and unresolved; with `--window-per-iteration K`, K of them at
  each iteration, in turn, rather than all of them at every iteration;
- `--skip-eval rft` (`skippable`): the rft arm is trained, as the start of the dapo arms, but not
  evaluated: the dapo - warmup claim does not compare it, and an evaluation of the whole test
  split costs about 24 minutes on two cores. Its result (pass@1 None) stays out of the report and
  the seed files, and the dapo arms' curves then start at their first own evaluation;
- `--warmup-checkpoint CHECKPOINT` (`own_warmup`): a seed's own warm-up, trained earlier.

A seed's own warm-up, trained earlier, is evaluated by the ladder instead of trained again:

    swe-rlvr experiment ladder --only-seeds 0 --warmup-checkpoint <run>/warmup/iter_0/checkpoint

The warm-up is the costliest arm to train on a CPU (its SFT is most of an hour on two cores), and
a run that already trained a seed's warm-up by the ladder's recipe (a dev pilot, say, which
evaluated it on another split) has the very checkpoint the seed's warmup arm would train. Unlike
`--shared-warmup`, the checkpoint is this one seed's own: the seeds still each have their own
warm-up, so the evaluation protocol is unchanged and the seed pools with seeds that trained theirs
in the ladder. That holds only if the checkpoint was trained as the ladder would have trained it,
so `check_warmup_checkpoint` compares the config of the run that trained it, field by field, with
the config of the seed's warmup arm, and refuses the first field the warm-up reads that differs.
What the warm-up does not read (`WARMUP_FREE`): the evaluation, tracking, RL-only sections
(reward, guidance, verifier), instances.limit and instances.rotate (the expert replays every
train instance of its part), where the run lives, and thread counts. The seed's result records
the checkpoint's digest and the commit that trained it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from swe_rlvr.config import Config, ConfigError, flatten, load_config

WARMUP_FREE = ("eval", "tracking", "verifier", "guidance", "reward", "instances.limit",
               "instances.rotate", "orchestration.run_root", "orchestration.run_name",
               "orchestration.iterations", "orchestration.eval_base",
               "orchestration.eval_beside", "orchestration.eval_start", "engine.torch_threads",
               "trainer.torch_threads", "trainer.compile", "sandbox.workdir")
"""Config fields (or whole sections) that the expert warm-up does not read."""
log = logging.getLogger("swe_rlvr.ladder")

SKIPPABLE = ("rft",)
"""Arms that `--skip-eval` may train without evaluating: the rft arm, which the dapo arms start
from but the dapo - warmup claim does not compare."""


def skippable(skip_eval: Sequence[str], requested: Sequence[str]) -> frozenset[str]:
    """--skip-eval's arms, refused unless each is SKIPPABLE and not itself requested."""
    for name in skip_eval:
        if name not in SKIPPABLE or name in requested:
            raise ConfigError(f"--skip-eval {name}: only {', '.join(SKIPPABLE)} may be trained "
                              f"without an evaluation, and only when it is not in --arms (it is "
                              f"then run as the start of the arms after it); drop {name!r} from "
                              f"--skip-eval{' or from --arms' if name in requested else ''}.")
    return frozenset(skip_eval)


def check_window(size: int, per_iteration: int) -> None:
    """Refuse a --window-per-iteration that is negative or has no --mixed-window to rotate
    through; `run_ladder` calls it before any arm runs."""
    if per_iteration < 0:
        raise ConfigError(f"--window-per-iteration must be 0 (the whole window) or positive, "
                          f"got {per_iteration}.")
    if per_iteration and not size:
        raise ConfigError("--window-per-iteration rotates through the --mixed-window: give "
                          "--mixed-window N too, or drop --window-per-iteration.")


def window_overrides(policy: str, size: int, per_iteration: int = 0) -> list[str]:
    """A fixed RL window: the first `size` instances whose RFT sampling (the stage that trained
    the rft arm's checkpoint `policy`) was split between resolved and unresolved episodes. Nebius
    filter their RL pool to such instances; a fixed window makes the train resolve rate a curve
    over the same instances. `per_iteration` (0: all): iteration k samples the k-th run of that
    many of the window, rotating (`tasks.instances.window`), so a larger window costs no more
    per iteration and the policy meets more distinct instances in a run."""
    from swe_rlvr import artifacts, curriculum
    from tasks import store
    check_window(size, per_iteration)
    stage = Path(policy).parent
    episodes = artifacts.outcomes(store.read_rows(str(stage / "rollouts.parquet"), "rollouts"),
                                  store.read_rows(str(stage / "validations.parquet"), "validations"))
    ids = curriculum.mixed(curriculum.accumulate({}, episodes), size)
    if not ids:
        raise ConfigError(f"--mixed-window: no instance of the rft arm's sampling in {stage} was "
                          f"resolved in some episodes and not in others; give the rft arm more "
                          f"instances (instances.limit) or run without --mixed-window.")
    if len(ids) < size:
        log.warning("ladder: the rft arm's sampling split only %d instances, fewer than the "
                    "--mixed-window %d; RL samples those", len(ids), size)
    rotating = 0 < per_iteration < len(ids)
    return [f"instances.train_ids=[{','.join(ids)}]",
            f"instances.limit={per_iteration if rotating else len(ids)}",
            f"instances.rotate={'true' if rotating else 'false'}"]


def own_warmup(ladder, warmup, checkpoint: str, only_seeds: Sequence[int],
               shared_warmup: str | None) -> tuple[str, dict]:
    """--warmup-checkpoint checked against the warmup arm (`warmup`) of `ladder`'s one seed
    (`flows.experiment.Ladder` and `.Arm`): (its resolved path, its provenance)."""
    from flows.preflight import start_policy
    if shared_warmup is not None or len(set(only_seeds)) != 1 or "warmup" not in ladder.arms:
        raise ConfigError("--warmup-checkpoint is one seed's own warm-up: give exactly one seed "
                          "in --only-seeds, an --arms that runs the warmup arm, and no "
                          "--shared-warmup.")
    (seed,) = set(only_seeds)
    wanted = load_config(ladder.config, ladder.seed_overrides(warmup, seed,
                                                              start_policy(ladder.cfg)))
    return str(Path(checkpoint).resolve()), check_warmup_checkpoint(checkpoint, wanted)


def warmup_difference(trained: Config, wanted: Config) -> str | None:
    """The first field (dotted, in name order) that the warm-up reads and on which the two configs
    differ; None when they agree on all of them."""
    a, b = flatten(trained), flatten(wanted)
    for key in sorted(a.keys() | b.keys()):
        free = any(key == f or key.startswith(f + ".") for f in WARMUP_FREE)
        if not free and a.get(key) != b.get(key):
            return key
    return None


def check_warmup_checkpoint(checkpoint: str | Path, wanted: Config) -> dict:
    """Refuse `checkpoint` unless it is a warm-up's (`<run>/warmup/iter_0/checkpoint`, beside its
    run's config.yaml) trained under a config that agrees with `wanted` (the seed's warmup arm) on
    every field the warm-up reads; returns its provenance: digest and the commit that trained it."""
    from tasks.ladder_results import checkpoint_digest
    path = Path(checkpoint).resolve()
    run = path.parents[2] if len(path.parents) > 2 else path
    if not (path / "config.json").exists() or path.parts[-3:-1] != ("warmup", "iter_0") \
            or not (run / "config.yaml").exists():
        raise ConfigError(f"--warmup-checkpoint {checkpoint} is not a warm-up's checkpoint: pass "
                          f"<run>/warmup/iter_0/checkpoint of a run whose config.yaml is in <run> "
                          f"(e.g. <out>/warmup-seed0/warmup/iter_0/checkpoint of a ladder).")
    trained = load_config(run / "config.yaml")
    field = warmup_difference(trained, wanted)
    if field is not None:
        raise ConfigError(
            f"--warmup-checkpoint {checkpoint} was trained with {field}="
            f"{flatten(trained).get(field)!r}, but this seed's warmup arm would train with "
            f"{field}={flatten(wanted).get(field)!r}; pass the same "
            f"{field} (and seed) as the run that trained it, or leave --warmup-checkpoint out to "
            f"train the warm-up here.")
    return {"digest": checkpoint_digest(str(path)), "commit": trained_commit(run)}


def trained_commit(run: Path) -> str:
    """The git commit the MLflow run of run directory `run` recorded; "unknown" without one."""
    try:
        saved = json.loads((run / "mlflow_run.json").read_text())
        from mlflow.tracking import MlflowClient
        tags = MlflowClient(saved["tracking_uri"]).get_run(saved["run_id"]).data.tags
        return tags.get("mlflow.source.git.commit") or "unknown"
    except Exception:  # noqa: BLE001 - provenance is best-effort: a lost store is "unknown"
        return "unknown"
