"""`swe-rlvr train | evaluate | rft | deploy | serve | quickstart`.

    swe-rlvr train --config configs/quickstart.yaml algorithm.clip_high=0.3 orchestration.iterations=4
    swe-rlvr evaluate --config configs/quickstart.yaml --model runs/x/iter_1/checkpoint --split test
    swe-rlvr evaluate instances.source=swebench_lite.parquet --split all   # a file without splits
    swe-rlvr rft --config configs/quickstart.yaml
    swe-rlvr serve --config configs/quickstart.yaml      # on-demand + cron deployments, this process
    swe-rlvr deploy --config configs/quickstart.yaml     # register them for a work pool
    swe-rlvr quickstart                                  # build SmolLM2 if needed, then train
                                                         # (its config: --config, or the shipped one)

Every command checks the config first (`flows.preflight`) and prints one line naming the fix when
something is wrong; a run that fails later prints its failed stage, the run directory and the
Prefect flow run (`flows.api.RunFailed`). Prefect, MLflow and the flows are imported inside the
handlers.
"""

from __future__ import annotations

import argparse
import json

QUICKSTART_CONFIG = "configs/quickstart.yaml"
"""The quickstart's recipe: shipped in the package (`swe_rlvr.config.CONFIG_DIR`), which in a
checkout is the repository's configs/."""


def register(sub: argparse._SubParsersAction) -> None:
    for name, handler, text in (("train", _train, "train a policy (RFT warm-up + RL iterations)"),
                                ("rft", _rft, "rejection fine-tuning on the policy's own successes"),
                                ("evaluate", _evaluate, "pass@1 ± SEM and pass@k of a model")):
        cmd = _with_config(sub.add_parser(name, help=text))
        if name == "evaluate":
            cmd.add_argument("--model", default=None, help="HF model directory (default engine.model)")
            cmd.add_argument("--split", default=None, help="instance split: train, test, dev or "
                             "all (every instance; default eval.split)")
            cmd.add_argument("--verifier", default=None, help="trained verifier directory (a run's "
                             "iter_<k>/verifier) for best@k; needs eval.best_of_k > 0")
        cmd.set_defaults(handler=handler)
    serve = _with_config(sub.add_parser("serve", help="serve the training deployments here"))
    serve.add_argument("--limit", type=int, default=1, help="concurrent flow runs (default 1)")
    serve.set_defaults(handler=_serve)
    deploy = _with_config(sub.add_parser("deploy", help="register the deployments for a work pool"))
    deploy.set_defaults(handler=_deploy)
    quick = _with_config(sub.add_parser(
        "quickstart", help="build SmolLM2-135M if needed, then train on CPU"))
    quick.set_defaults(handler=_quickstart)


def _with_config(cmd: argparse.ArgumentParser) -> argparse.ArgumentParser:
    cmd.add_argument("--config", default=None, help="YAML config (e.g. configs/quickstart.yaml)")
    cmd.add_argument("--json", action="store_true", help="print the result as JSON")
    cmd.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                     help="dotted overrides, e.g. algorithm.clip_high=0.3")
    return cmd




def _print(result, as_json: bool = False) -> int:
    """The run's per-step metrics as a table (or JSON), then where to look at it."""
    if as_json:
        print(json.dumps({"run_dir": result.run_dir, "mlflow_run_id": result.mlflow_run_id,
                          "tracking_uri": result.tracking_uri, "policy": str(result.policy_dir),
                          "pass1": result.pass1,
                          "metrics": {str(k): v for k, v in result.metrics.items()}}, indent=1))
        return 0
    print(summary_table(result.metrics, result.base))
    print(f"\npolicy:        {result.policy_dir}\nrun directory: {result.run_dir}")
    print(f"MLflow run:    {result.mlflow_run_id}  (open: mlflow ui --backend-store-uri "
          f"{result.tracking_uri})")
    return 0


def summary_table(metrics: dict[int, dict[str, float]], base: dict[str, float] | None = None
                  ) -> str:
    """A fixed-width table: one row per step (policy version), the columns that step logged; a
    `base` row first when the model was also evaluated before its warm-ups."""
    ordered = ([("base", base)] if base else []) + [(str(s), m) for s, m in sorted(metrics.items())]
    from tasks.report import STEP_KEYS
    keys = [k for k in STEP_KEYS if any(k in m for _, m in ordered)]
    if not ordered or not keys:
        return "no metrics were logged"
    rows = [["step", *keys]]
    rows += [[step, *(f"{m[k]:.3f}" if k in m else "-" for k in keys)] for step, m in ordered]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows)


def _train(args: argparse.Namespace) -> int:
    from flows.api import train
    return _print(train(args.config, args.overrides), args.json)


def _rft(args: argparse.Namespace) -> int:
    from flows.api import rft
    return _print(rft(args.config, args.overrides), args.json)


def _evaluate(args: argparse.Namespace) -> int:
    from flows.api import evaluate
    return _print(evaluate(args.config, args.overrides, model=args.model, split=args.split,
                           verifier=args.verifier), args.json)


def _checked(args: argparse.Namespace):
    from flows.preflight import preflight
    from swe_rlvr.config import load_config
    cfg = load_config(args.config, args.overrides)
    preflight(cfg)
    return cfg


def _serve(args: argparse.Namespace) -> int:
    from flows.deployments import serve
    serve(args.config, _checked(args), limit=args.limit, overrides=args.overrides)
    return 0


def _deploy(args: argparse.Namespace) -> int:
    from flows.deployments import deploy
    for deployment_id in deploy(args.config, _checked(args), overrides=args.overrides):
        print(deployment_id)
    return 0


def _quickstart(args: argparse.Namespace) -> int:
    from swe_rlvr.config import load_config
    config = args.config or quickstart_config()
    from agent.models import ensure_recipe_model
    ensure_recipe_model(load_config(config, args.overrides).engine.model)
    from flows.api import train
    return _print(train(config, args.overrides), args.json)


def quickstart_config() -> str:
    """The shipped configs/quickstart.yaml (package data), wherever the command runs from."""
    from pathlib import Path

    from swe_rlvr.config import CONFIG_DIR, ConfigError
    path = CONFIG_DIR / Path(QUICKSTART_CONFIG).name
    if not path.is_file():
        raise ConfigError(f"{QUICKSTART_CONFIG} is not in this installation ({path} is missing); "
                          f"reinstall swe-rlvr, or pass --config <the quickstart YAML>.")
    return str(path)
