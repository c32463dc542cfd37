"""The experiment ladder: base -> warm-up -> RFT -> DAPO (-> DAPO with guidance), over seeds.

    from flows.experiment import run_ladder
    report = run_ladder("configs/ladder.yaml", ["orchestration.iterations=2"], seeds=3,
                        out="runs/ladder")

Each arm starts from the policy of the arm before it (same seed) and is one ordinary flow run of
`flows.api` with the arm's overrides, so the ladder re-implements no stage:

| arm | flow | starts from | what it adds |
|---|---|---|---|
| base | evaluate | engine.model | nothing: the model as given |
| warmup | train, 0 iterations | engine.model | `orchestration.expert_warmup`: SFT on expert episodes |
| | | | of the train split |
| rft | rft | warmup | Nebius RFT on its own resolved train episodes |
| dapo | train, K iterations | rft | DAPO, guidance off |
| dapo_guided | train, K iterations | rft | guidance on; `guidance.mode` pairs trains DPO on (guided |
| | | | success, unguided failure) pairs (Agent-RLVR), strip/keep train DAPO |

K is `orchestration.iterations`. Every arm is evaluated on `eval.split` (the held-out test split;
it must differ from `instances.train_split`) with `eval.runs` runs per instance, after each RL
iteration; step 0 of the dapo arms is the rft arm's evaluation of the policy they start from
(`orchestration.eval_start=false`: evaluating it again with the same seed would measure the
same thing twice, at ~5 CPU minutes an evaluation at the CPU size). Seed s sets
`engine.seed` and `trainer.seed`. Everything lands under `out`: one run directory per (arm,
seed) named `<arm>-seed<s>` (`out` is the run root, so the SQLite MLflow store is
`out/mlflow.db`), `results/<arm>/seed<s>.json`, `report.md`, `ladder.png` (pass@1 per iteration)
and `curves.png` (train resolve and group-signal rate per training iteration). Run directories do
not outlive their machine, so with `results_dir` (e.g. docs/ladder) each (arm, seed) result is
also merged into a small committable `seed-<s>.json` with its commit, config and hardware, and
`swe-rlvr experiment report` rebuilds the report from those files alone (`tasks.ladder_results`).

The design is stated before anything runs (`plan_ladder`, `swe-rlvr experiment ladder --plan`):
the arms, the seeds, the evaluation's instances x runs = graded episodes per arm and seed, and the
minimum detectable difference in pass@1 that they give at an assumed base rate
(`tasks.ladder_stats.mdd`); the report repeats it above its paired comparisons.

MLflow: one parent run for the ladder, one child run per arm (the aggregate over seeds), and each
(arm, seed) flow run as a child of its arm (tag `mlflow.parentRunId`).

A shared warm-up (`shared_warmup`, `--shared-warmup CHECKPOINT`): the warmup arm of every seed
evaluates that one checkpoint (with the seed's own evaluation sampling) instead of training its
own, and the arms after it start from it. The seeds then still vary the RL and the evaluation
sampling, but not the warm-up, whose own variance goes unmeasured; the seed files record the
checkpoint's digest, so seeds with different warm-ups are never pooled, and the report says so.

Resumable: an (arm, seed) whose result file exists is skipped, and an interrupted one resumes
inside its flow from the last finished stage. `only_seeds` runs a subset of the seeds, so that
several processes can share `out` (the seeds' chains are independent; give each process
`trainer.torch_threads=1` so that they do not oversubscribe the cores); the report covers every
seed with a result, and a last run without `only_seeds` completes it. The ladder is a plain
driver rather than a flow of its own: every arm is its own flow run in Prefect, and nothing here
needs Prefect's retries.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flows.ladder_options import check_window, own_warmup, skippable, window_overrides
from flows.preflight import start_policy
from swe_rlvr.config import Config, ConfigError, load_config
from tasks import ladder_tracking

log = logging.getLogger("swe_rlvr.ladder")
PLAN_BASE_RATE = 0.1
"""The pass@1 the minimum detectable difference assumes unless told (--base-rate): near what the
ladder's arms reach at the CPU size, where the MDD is smaller than at 0.5."""


@dataclass(frozen=True)
class Arm:
    name: str
    flow: str
    """flows.api function: evaluate, train or rft."""
    parent: str | None
    """The arm whose policy this one starts from (None: engine.model)."""
    overrides: tuple[str, ...]


ARMS: dict[str, Arm] = {a.name: a for a in (
    Arm("base", "evaluate", None, ()),
    Arm("warmup", "train", None, ("orchestration.expert_warmup=true",
                                "orchestration.rft_warmup=false", "orchestration.iterations=0")),
    Arm("rft", "rft", "warmup", ()),
    Arm("dapo", "train", "rft", ("orchestration.expert_warmup=false",
                                 "orchestration.rft_warmup=false", "guidance.enabled=false",
                                 "algorithm.name=dapo")),
    Arm("dapo_guided", "train", "rft", ("orchestration.expert_warmup=false",
                                        "orchestration.rft_warmup=false", "guidance.enabled=true")),
)}


SHARED_WARMUP = Arm("warmup", "evaluate", None, ())
"""The warmup arm when its warm-up was trained elsewhere (shared across seeds, or the seed's own
from an earlier run): an evaluation of that policy."""


def arms_to_run(requested: Sequence[str]) -> list[str]:
    """The requested arms plus the arms they start from, in ladder order."""
    unknown = [a for a in requested if a not in ARMS]
    if unknown or not requested:
        raise ConfigError(f"Unknown arm(s) {', '.join(map(repr, unknown)) or '(none given)'}; "
                          f"choose from: {', '.join(ARMS)} (e.g. --arms base,warmup,rft).")
    wanted = set(requested)
    for name in reversed(list(ARMS)):
        parent = ARMS[name].parent
        if name in wanted and parent:
            wanted.add(parent)
    return [a for a in ARMS if a in wanted]


def arm_overrides(arm: Arm, cfg: Config) -> list[str]:
    """The arm's own overrides; the guided arm's algorithm follows guidance.mode. An RL arm that
    starts from another arm's policy does not evaluate it again (that arm did, on the same split
    and seed); `inherit_start` makes that evaluation its step 0."""
    extra = []
    if arm.name == "dapo_guided":
        extra = [f"algorithm.name={'dpo' if cfg.guidance.mode == 'pairs' else 'dapo'}"]
    if arm.flow == "train" and arm.parent:
        extra.append("orchestration.eval_start=false")
    return [*arm.overrides, *extra]


def inherit_start(row: dict, parent: dict | None) -> dict:
    """The arm's result with step 0 (its starting policy) taken from the parent arm's evaluation
    when the arm did not evaluate it itself (and the parent did: `--skip-eval`)."""
    if parent is None or parent["pass1"] is None or "0" in row["pass1_by_step"]:
        return row
    return {**row, "pass1_by_step": {"0": parent["pass1"], **row["pass1_by_step"]}}


def check_ladder(cfg: Config) -> None:
    """Refuse, before any arm runs, a config the ladder cannot report honestly on (choices such
    as orchestration.expert_style are checked when the config loads)."""
    if cfg.eval.split == cfg.instances.train_split:
        raise ConfigError(f"eval.split and instances.train_split are both {cfg.eval.split!r}: the "
                          f"ladder evaluates on a held-out split; set eval.split=test (or another "
                          f"split that training never sees).")


@dataclass
class Ladder:
    """One ladder invocation: its base config, output folder and MLflow runs."""

    config: str | None
    overrides: list[str]
    cfg: Config
    out: Path
    seeds: list[int]
    arms: list[str]
    base_rate: float = PLAN_BASE_RATE
    results_dir: Path | None = None
    """Where the committable seed-<n>.json files go (`tasks.ladder_results`); None: nowhere."""
    shared_warmup: str | None = None
    """A warm-up checkpoint every seed's warmup arm evaluates instead of training its own."""
    meta: dict | None = None
    """`tasks.ladder_results.ladder_meta` of this invocation, when results_dir is set."""
    mixed_window: int = 0
    """RL arms sample a fixed window of this many instances, those whose sampling in the rft arm
    of the same seed was split between resolved and unresolved (`window_overrides`); 0: the
    config's own instances."""
    window_per_iteration: int = 0
    """With mixed_window: each RL iteration samples this many of the window, in turn (0: all)."""
    skip_eval: frozenset[str] = frozenset()
    """Arms trained but not evaluated (`flows.ladder_options.SKIPPABLE`): their results hold a
    pass@1 of None and stay out of the report and the seed files."""
    warmup_checkpoint: str | None = None
    """The one seed's own warm-up, trained earlier by the same recipe (`flows.ladder_options`)."""
    warmup_trained: dict | None = None
    """Its provenance: digest and the commit that trained it."""

    def seed_overrides(self, arm: Arm, seed: int, policy: str) -> list[str]:
        return [*self.overrides, *arm_overrides(arm, self.cfg), f"engine.model={policy}",
                f"engine.seed={seed}", f"trainer.seed={seed}",
                f"orchestration.run_root={self.out}",
                f"orchestration.run_name={arm.name}-seed{seed}"]

    def result_path(self, arm: str, seed: int) -> Path:
        return self.out / "results" / arm / f"seed{seed}.json"

    def load(self, arm: str, seed: int) -> dict | None:
        """The (arm, seed)'s result; one written by an earlier swe-rlvr is completed from its run
        directory and saved (`tasks.ladder_report.complete`)."""
        path = self.result_path(arm, seed)
        if not path.exists():
            return None
        from tasks.ladder_report import complete
        row = json.loads(path.read_text())
        done = complete(row, path)
        if done is not row:
            path.write_text(json.dumps(done, indent=1))
        return done

    def results(self) -> dict[str, list[dict]]:
        """The evaluated results of every arm, over the seeds that have one."""
        found = {a: [r if r and r["pass1"] is not None else None
                     for r in (self.load(a, s) for s in self.seeds)] for a in self.arms}
        return {a: [r for r in rs if r] for a, rs in found.items() if any(rs)}


def eval_instance_count(cfg: Config) -> int:
    """How many instances each evaluation grades: the selection of the `instances` task (the
    split's pool under instances.ids and instances.tiers, its first eval.limit)."""
    from swe_rlvr.loaders import load_instances
    from tasks.instances import pool, window
    loaded = load_instances(cfg.instances.source, format=cfg.instances.format,
                            skip_invalid=cfg.instances.skip_invalid)
    chosen = pool(loaded.instances, cfg.eval.split, cfg.instances.ids, cfg.instances.tiers)
    return len(window(chosen, cfg.eval.limit, 0))


def design_lines(cfg: Config, arms: Sequence[str], seeds: Sequence[int],
                 base_rate: float = PLAN_BASE_RATE) -> list[str]:
    """The ladder's design as markdown bullets: arms, seeds, graded episodes and the MDD."""
    from tasks.ladder_stats import mdd
    n, runs = eval_instance_count(cfg), cfg.eval.runs
    return [f"- arms: {', '.join(arms)}; seeds: {', '.join(map(str, seeds))}",
            f"- evaluation: {n} `{cfg.eval.split}` instances x {runs} run(s) = {n * runs} graded "
            f"episodes per arm per seed ({n * runs * len(seeds)} per arm over the seeds)",
            f"- minimum detectable difference in pass@1 between two arms: "
            f"{mdd(n, runs, len(seeds), base_rate):.3f} (paired over instances, two-sided alpha "
            f"0.05, power 0.8, base rate {base_rate:g}; `tasks.ladder_stats.mdd`)"]


def plan_ladder(config: str | Path | None = None, overrides: Sequence[str] = (), seeds: int = 3,
                arms: Sequence[str] = tuple(ARMS), base_rate: float = PLAN_BASE_RATE) -> str:
    """The design `run_ladder` would run, as text; runs nothing."""
    if seeds < 1:
        raise ConfigError(f"--seeds must be at least 1 (got {seeds}); use 3 or more for a CI.")
    cfg = load_config(config, list(overrides))
    check_ladder(cfg)
    return "\n".join(["ladder design:", *design_lines(cfg, arms_to_run(list(arms)),
                                                      list(range(seeds)), base_rate)])


def run_ladder(config: str | Path | None = None, overrides: Sequence[str] = (), seeds: int = 3,
               arms: Sequence[str] = tuple(ARMS), out: str | Path = "runs/ladder",
               only_seeds: Sequence[int] = (), base_rate: float = PLAN_BASE_RATE,
               results_dir: str | Path | None = None, shared_warmup: str | None = None,
               mixed_window: int = 0, skip_eval: Sequence[str] = (),
               warmup_checkpoint: str | None = None, window_per_iteration: int = 0) -> str:
    """Run (or resume) the ladder; returns the path of report.md. `only_seeds` (a subset of
    0..seeds-1) runs just those; the report still covers every seed that has a result.
    `base_rate`: the pass@1 the design's minimum detectable difference assumes. `results_dir`:
    every (arm, seed) result, finished now or earlier, is also merged into its committable
    `results_dir/seed-<s>.json` (`tasks.ladder_results`). `shared_warmup`: a warm-up checkpoint
    that every seed's warmup arm evaluates instead of training one (module docstring).
    `mixed_window`, `window_per_iteration`: `Ladder`'s fields. `skip_eval`: arms (`skippable`)
    trained without an evaluation. `warmup_checkpoint`: the one seed's own warm-up, trained
    earlier by the same recipe, which its warmup arm evaluates instead of training
    (`flows.ladder_options`)."""
    from flows.preflight import preflight
    if seeds < 1:
        raise ConfigError(f"--seeds must be at least 1 (got {seeds}); use 3 or more for a CI.")
    outside = sorted(set(only_seeds) - set(range(seeds)))
    if outside:
        raise ConfigError(f"--only-seeds {','.join(map(str, outside))} is not among the seeds "
                          f"0..{seeds - 1} of --seeds {seeds}; raise --seeds or drop them.")
    out = Path(out).resolve()
    overrides = list(overrides)
    cfg = load_config(config, overrides + [f"orchestration.run_root={out}"])
    check_ladder(cfg)
    check_window(mixed_window, window_per_iteration)
    preflight(cfg)
    ladder = Ladder(str(config) if config else None, overrides, cfg, out, list(range(seeds)),
                    arms_to_run(list(arms)), base_rate, mixed_window=mixed_window,
                    window_per_iteration=window_per_iteration,
                    skip_eval=skippable(skip_eval, arms))
    if warmup_checkpoint is not None:
        ladder.warmup_checkpoint, ladder.warmup_trained = own_warmup(
            ladder, ARMS["warmup"], warmup_checkpoint, only_seeds, shared_warmup)
    if shared_warmup is not None:
        if not (Path(shared_warmup) / "config.json").exists():
            raise ConfigError(f"--shared-warmup {shared_warmup} is not a model checkpoint (no "
                              f"config.json); pass a warm-up's checkpoint directory, e.g. "
                              f"<out>/warmup-seed0/warmup/iter_0/checkpoint.")
        ladder.shared_warmup = str(Path(shared_warmup).resolve())
    if results_dir is not None:
        from tasks.ladder_results import ladder_meta
        ladder.results_dir = Path(results_dir).resolve()
        ladder.meta = ladder_meta(cfg, ladder.config, overrides, eval_instance_count(cfg),
                                  ladder.shared_warmup, mixed_window, ladder.results_dir,
                                  window_per_iteration)
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    parent = ladder_tracking.tracking_run(cfg, out, None)
    log.info("ladder: out %s\n%s", out, "\n".join(design_lines(cfg, ladder.arms, ladder.seeds,
                                                                base_rate)))
    for name in ladder.arms:
        arm_run = ladder_tracking.tracking_run(cfg, out / "arms" / name, parent)
        for seed in sorted(set(only_seeds)) or ladder.seeds:
            _run_arm_seed(ladder, ARMS[name], seed, arm_run)
        ladder_tracking.log_arm(cfg, arm_run, parent, name, ladder.results().get(name, []),
                                out / "arms" / name)
        report = _write_outputs(ladder, time.monotonic() - began)
    ladder_tracking.finish(cfg, parent, out, ladder)
    return str(report)


def _run_arm_seed(ladder: Ladder, arm: Arm, seed: int, arm_run: str) -> dict:
    done = ladder.load(arm.name, seed)
    if done:
        log.info("ladder: %s seed %d already done (pass@1 %s), skipped", arm.name, seed,
                 "not evaluated" if done["pass1"] is None else f"{done['pass1']:.3f}")
        _record(ladder, done)
        return done
    parent = None
    if arm.parent:
        parent = ladder.load(arm.parent, seed)
        if parent is None:
            raise ConfigError(f"Arm {arm.name!r} seed {seed} starts from arm {arm.parent!r}, "
                              f"which has no result in {ladder.out}; include it in --arms.")
        policy = parent["policy"]
    else:
        policy = start_policy(ladder.cfg)
    shared = arm.name == "warmup" and ladder.shared_warmup is not None
    own = arm.name == "warmup" and ladder.warmup_checkpoint is not None
    if shared or own:
        arm, policy = SHARED_WARMUP, str(ladder.shared_warmup or ladder.warmup_checkpoint)
    log.info("ladder: %s seed %d %s %s", arm.name, seed, "evaluates the shared warm-up" if shared
             else "evaluates its warm-up trained earlier" if own else "starting from", policy)
    window = (window_overrides(policy, ladder.mixed_window, ladder.window_per_iteration)
              if ladder.mixed_window and arm.flow == "train" and arm.parent == "rft" else [])
    scored = arm.name not in ladder.skip_eval
    began = time.monotonic()
    result = _flow(arm.flow)(ladder.config, ladder.seed_overrides(arm, seed, policy) + window,
                             **({} if scored else {"evaluate": False}))
    from tasks.ladder_report import seed_result
    row = inherit_start(seed_result(arm.name, seed, result, time.monotonic() - began, scored),
                        parent)
    if window:
        row = {**row, "train_ids": window[0].split("=", 1)[1]}
    if shared:
        from tasks.ladder_results import checkpoint_digest
        row = {**row, "policy": policy, "shared_warmup": checkpoint_digest(policy)}
    if own:
        row = {**row, "policy": policy, "warmup_trained": ladder.warmup_trained}
    ladder_tracking.tag_child(ladder.cfg, row["mlflow_run_id"], arm_run, arm.name, seed)
    path = ladder.result_path(arm.name, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(row, indent=1))
    if scored:
        log.info("ladder: %s seed %d done in %.1f min: pass@1 %.3f, format errors %.2f, submit "
                 "%.2f, turns %.1f", arm.name, seed, row["wall_s"] / 60, row["pass1"],
                 row["format_error_rate"], row["submit_rate"], row["mean_turns"])
    else:
        log.info("ladder: %s seed %d trained in %.1f min, not evaluated (--skip-eval)", arm.name,
                 seed, row["wall_s"] / 60)
    _record(ladder, row)
    return row


def _record(ladder: Ladder, row: dict) -> None:
    """Merge the (arm, seed) result into its committable seed file, when the ladder has one and
    the arm was evaluated."""
    if ladder.results_dir is None or ladder.meta is None or row["pass1"] is None:
        return
    from tasks.ladder_results import finished_at, update_seed_file
    path = ladder.result_path(row["arm"], row["seed"])
    update_seed_file(ladder.results_dir / f"seed-{row['seed']}.json", row,
                     {**ladder.meta, "finished": finished_at(path)})


def _flow(name: str):
    from flows import api
    return {"evaluate": api.evaluate, "train": api.train, "rft": api.rft}[name]


def _write_outputs(ladder: Ladder, wall_s: float) -> Path:
    from tasks.ladder_report import write_curves, write_plot, write_report
    results = ladder.results()
    cfg = ladder.cfg
    header = ["# swe-rlvr experiment ladder", "",
              f"- config: `{ladder.config}`, overrides: `{' '.join(ladder.overrides) or '(none)'}`",
              f"- model: `{cfg.engine.model}`; scaffold `{cfg.agent.scaffold}`, max turns "
              f"{cfg.agent.max_turns}, group size {cfg.algorithm.group_size}, RL iterations "
              f"{cfg.orchestration.iterations}, guidance mode `{cfg.guidance.mode}`",
              f"- evaluation: split `{cfg.eval.split}`, {cfg.eval.runs} run(s) per instance"
              f"{f', first {cfg.eval.limit} instances' if cfg.eval.limit else ''}; training split "
              f"`{cfg.instances.train_split}`",
              *design_lines(cfg, ladder.arms, ladder.seeds, ladder.base_rate),
              f"- this invocation's wall time: {wall_s / 60:.1f} min",
              "", "![pass@1 per iteration](ladder.png)"]
    report = ladder.out / "report.md"
    write_report(report, results, header)
    write_plot(ladder.out / "ladder.png", results)
    write_curves(ladder.out / "curves.png", results)
    return report
