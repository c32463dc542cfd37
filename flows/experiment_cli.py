"""`swe-rlvr experiment ladder`: base -> warm-up -> RFT -> DAPO (-> guided), with CIs over seeds.

    swe-rlvr experiment ladder                                  # configs/ladder.yaml, 3 seeds
    swe-rlvr experiment ladder --seeds 1 --arms base,warmup eval.limit=4 --out runs/ladder-quick
    swe-rlvr experiment ladder --only-seeds 1 trainer.torch_threads=1   # beside --only-seeds 0,2
    swe-rlvr experiment ladder orchestration.iterations=3 engine.device=cuda engine.name=vllm
    swe-rlvr experiment ladder --plan eval.limit=0 eval.runs=4    # the design and its MDD only
    swe-rlvr experiment ladder --only-seeds 0 --results-dir docs/ladder   # + committable seed-0.json
    swe-rlvr experiment ladder --arms warmup,dapo --skip-eval rft   # rft trained, not evaluated
    swe-rlvr experiment report docs/ladder/mixed --out docs/ladder-cpu.md   # the report from those

The design (arms, seeds, graded episodes per arm and seed, minimum detectable difference) is
printed before anything runs; --plan prints it and stops. Rerunning with the same --out resumes:
finished (arm, seed) pairs are skipped. See `flows.experiment` for the arms and where everything
lands, and `tasks.ladder_results` for the committable seed files and the report built from them.
"""

from __future__ import annotations

import argparse

LADDER_CONFIG = "configs/ladder.yaml"
REPORT_OUT = "docs/ladder-cpu.md"


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("experiment", help="reproducible experiments (the learning ladder)")
    experiments = group.add_subparsers(dest="experiment", metavar="EXPERIMENT")
    experiments.required = True
    from flows.experiment import ARMS, PLAN_BASE_RATE
    ladder = experiments.add_parser("ladder", help="base -> warm-up -> RFT -> DAPO (-> guided), "
                                                   "evaluated on the test split over seeds")
    ladder.add_argument("--config", default=LADDER_CONFIG,
                        help=f"YAML config (default {LADDER_CONFIG})")
    ladder.add_argument("--seeds", type=int, default=3,
                        help="seeds 0..N-1 (default 3; a CI needs >= 2)")
    ladder.add_argument("--only-seeds", default="",
                        help="comma list of the seeds (of 0..N-1) this process runs, so that "
                             "several processes can share --out; the report covers every "
                             "finished seed")
    ladder.add_argument("--arms", default=",".join(ARMS),
                        help=f"comma list of {', '.join(ARMS)} (prerequisite arms are added)")
    ladder.add_argument("--out", default="runs/ladder", help="output folder (default runs/ladder)")
    ladder.add_argument("--plan", action="store_true",
                        help="print the design (arms, seeds, eval instances x runs, minimum "
                             "detectable difference) and exit without running anything")
    ladder.add_argument("--base-rate", type=float, default=PLAN_BASE_RATE,
                        help=f"pass@1 the minimum detectable difference assumes "
                             f"(default {PLAN_BASE_RATE})")
    ladder.add_argument("--results-dir", default=None,
                        help="where the committable seed-<n>.json files go, e.g. docs/ladder "
                             "(each finished arm of a seed is merged into its seed's file)")
    ladder.add_argument("--shared-warmup", default=None, metavar="CHECKPOINT",
                        help="a warm-up checkpoint every seed's warmup arm evaluates instead of "
                             "training its own (the seeds then vary the RL and evaluation "
                             "sampling only; the report says so)")
    ladder.add_argument("--mixed-window", type=int, default=0, metavar="N",
                        help="RL arms sample a fixed window of N instances: those whose "
                             "sampling in the seed's rft arm was split between resolved and "
                             "unresolved (set instances.limit above N for the rft arm's "
                             "sampling); 0: the config's own instances (default)")
    ladder.add_argument("--window-per-iteration", type=int, default=0, metavar="K",
                        help="with --mixed-window: each RL iteration samples K instances of the "
                             "window, the next K at the next iteration (rotating), instead of the "
                             "whole window every iteration; 0: the whole window (default)")
    ladder.add_argument("--skip-eval", default="", metavar="ARMS",
                        help="comma list of prerequisite arms to train without evaluating "
                             "(rft: the dapo arms start from it, the dapo - warmup claim does "
                             "not compare it); their results stay out of the report")
    ladder.add_argument("--warmup-checkpoint", default=None, metavar="CHECKPOINT",
                        help="the one seed's (--only-seeds) own warm-up, trained earlier by the "
                             "same recipe (<run>/warmup/iter_0/checkpoint): its warmup arm "
                             "evaluates it instead of training it again; refused when the run "
                             "that trained it differs in a field the warm-up reads")
    ladder.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="dotted overrides, e.g. orchestration.iterations=2 eval.runs=3")
    ladder.set_defaults(handler=_ladder)
    report = experiments.add_parser("report", help="the ladder's report from committed "
                                                   "seed-<n>.json files alone")
    report.add_argument("dir", metavar="DIR",
                        help="folder of seed-<n>.json files (ladder --results-dir), e.g. "
                             "docs/ladder, and its design.json when the claim is judged at "
                             "several looks (tasks.ladder_design)")
    report.add_argument("--out", default=REPORT_OUT,
                        help=f"markdown report; its two PNGs go beside it (default {REPORT_OUT})")
    report.set_defaults(handler=_report)


def _ladder(args: argparse.Namespace) -> int:
    import logging
    from pathlib import Path

    from flows.experiment import plan_ladder, run_ladder
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per Prefect API call buries progress
    from swe_rlvr.config import load_config
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    print(plan_ladder(args.config, args.overrides, seeds=args.seeds, arms=arms,
                      base_rate=args.base_rate))
    if args.plan:
        return 0
    from agent.models import ensure_recipe_model
    ensure_recipe_model(load_config(args.config, args.overrides).engine.model)
    try:
        only = [int(s) for s in args.only_seeds.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--only-seeds takes a comma list of seed numbers, e.g. 1,2 "
                         f"(got {args.only_seeds!r})") from None
    report = run_ladder(args.config, args.overrides, seeds=args.seeds, arms=arms, out=args.out,
                        only_seeds=only, base_rate=args.base_rate, results_dir=args.results_dir,
                        shared_warmup=args.shared_warmup, mixed_window=args.mixed_window,
                        skip_eval=[a.strip() for a in args.skip_eval.split(",") if a.strip()],
                        warmup_checkpoint=args.warmup_checkpoint,
                        window_per_iteration=args.window_per_iteration)
    print(Path(report).read_text())
    print(f"report: {report}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from flows.experiment import ARMS
    from swe_rlvr.config import ConfigError
    from tasks.ladder_results import write_committed_report
    folder = Path(args.dir)
    if not folder.is_dir():
        raise ConfigError(f"DIR {args.dir} is not a folder; pass the --results-dir of `swe-rlvr "
                          f"experiment ladder` (e.g. docs/ladder).")
    write_committed_report(folder, Path(args.out), order=list(ARMS))
    print(f"report: {args.out}")
    return 0
