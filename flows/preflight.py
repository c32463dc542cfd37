"""Checks that run before any expensive work, each failure naming its fix.

`preflight(cfg)` collects every problem it finds (a missing model or instance file, an
unreachable MLflow server, a Prefect API that is down, an unknown task runner, eval.k or
eval.best_of_k > eval.runs, an estimated peak memory above what the machine has free, a
`models:/` engine.model the MLflow registry does not hold) and raises
one `PreflightError` listing them all, so a misconfigured run fails in a second instead of after
an hour of rollouts. A wrong config key never gets this
far: `load_config` already refuses it, listing the valid keys.
"""

from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

from swe_rlvr.config import Config, ConfigError

LOCAL_ENGINES = ("hf", "vllm", "vllm-server", "auto", "scripted")
"""Engines that load `engine.model` from a local directory (and that the trainer updates)."""


log = logging.getLogger(__name__)


class PreflightError(ConfigError):
    """The run cannot start; the message lists each problem with its fix."""


def preflight(cfg: Config, check_prefect: bool = True, trains: bool = True) -> None:
    """Raise PreflightError naming every problem (and its fix) that would stop this run
    (`trains`: the run updates the policy, so the update's memory counts too)."""
    model = _model(cfg)
    problems = [p for p in (_task_runner(cfg), model, _instances(cfg), _eval(cfg),
                            "" if model else _memory(cfg, trains),
                            _mlflow(cfg), _prefect() if check_prefect else "") if p]
    if problems:
        raise PreflightError("Cannot start the run:\n  - " + "\n  - ".join(problems))


def _task_runner(cfg: Config) -> str:
    from flows.runners import TASK_RUNNERS
    name = cfg.orchestration.task_runner
    if name not in TASK_RUNNERS:
        return (f"Unknown orchestration.task_runner {name!r}; choose one of: "
                f"{', '.join(TASK_RUNNERS)}.")
    if name == "ray":
        import importlib.util
        if importlib.util.find_spec("prefect_ray") is None or importlib.util.find_spec("ray") is None:
            return ("orchestration.task_runner=ray needs prefect-ray and ray: "
                    "pip install -e '.[ray]', or set orchestration.task_runner=threads.")
    return ""


MODEL_FIX = ("build one with `swe-rlvr model tiny runs/.models/tiny` (tests) or "
             "`swe-rlvr model smollm2 runs/.models/smollm2` (quickstart), or set "
             "engine.model=<HF model directory>")


def start_policy(cfg: Config) -> str:
    """engine.model: the policy a run starts from. Every engine needs it (the openai engine for
    its tokenizer), so a run without one is refused here as in `preflight`."""
    if not cfg.engine.model:
        raise PreflightError(f"engine.model is not set; {MODEL_FIX}.")
    return cfg.engine.model


def _model(cfg: Config) -> str:
    model = cfg.engine.model
    if not model:
        return f"engine.model is not set; {MODEL_FIX}."
    if cfg.engine.name.partition(":")[0] not in LOCAL_ENGINES:
        return ""
    if model.startswith("models:/"):
        return _registered(cfg, model)
    if not Path(model).is_dir():
        return f"engine.model {model!r} does not exist; {MODEL_FIX}."
    if not (Path(model) / "config.json").exists():
        return f"engine.model {model!r} has no config.json, so it is not an HF model directory; {MODEL_FIX}."
    return ""


def _registered(cfg: Config, uri: str) -> str:
    """A `models:/` engine.model names a version in the registry (the flow downloads it)."""
    from tasks.registry import model_version
    try:
        model_version(cfg, uri)
    except ConfigError as exc:
        return str(exc)
    return ""


def _memory(cfg: Config, trains: bool) -> str:
    """The run's estimated peak host memory (`swe_rlvr.memory`) against what is available."""
    model = cfg.engine.model
    if cfg.engine.name.partition(":")[0] not in LOCAL_ENGINES or not model:
        return ""
    from swe_rlvr import memory
    from trainer.engine_torch import pick_device
    from trainer.forward import head_chunk_rows
    try:
        dims = memory.model_dims(model)
    except (OSError, ValueError, KeyError, ImportError):   # an architecture transformers lacks:
        return ""                                          # the engine's own load will say so
    engine_here = cfg.engine.name in ("hf", "auto") and pick_device(cfg.engine.device).type == "cpu"
    trainer_here = trains and pick_device(cfg.trainer.device).type == "cpu"
    est = memory.estimate(cfg, dims, memory.engine_dtype_bytes(cfg.engine.dtype),
                          head_chunk_rows(dims.shape.vocab), engine_here, trainer_here)
    avail = memory.available_bytes()
    if est.peak <= avail:
        from swe_rlvr.allocator import active
        log.info("memory: estimated peak %.1f GiB of %.1f GiB available (%s); allocator %s",
                 est.peak / memory.GIB, avail / memory.GIB, memory.describe(est), active())
        return ""
    part, size, knob = est.largest()
    return (f"the run's estimated peak memory is {est.peak / memory.GIB:.1f} GiB but "
            f"{avail / memory.GIB:.1f} GiB is available ({memory.describe(est)}); the largest "
            f"part is {part} ({size / memory.GIB:.1f} GiB): {memory.FIXES[knob](cfg)}")


def _instances(cfg: Config) -> str:
    source = cfg.instances.source
    if source == "builtin" or "://" in source or Path(source).exists():
        return ""
    return (f"instances.source {source!r} does not exist; point it at a JSON/JSONL/Parquet file "
            f"of SWE-bench-family records, or use instances.source=builtin.")


def _eval(cfg: Config) -> str:
    if cfg.eval.every < 1:
        return f"eval.every ({cfg.eval.every}) must be at least 1 (evaluate every N iterations)."
    if not 1 <= cfg.eval.k <= cfg.eval.runs:
        return (f"eval.k ({cfg.eval.k}) must be between 1 and eval.runs ({cfg.eval.runs}): "
                f"pass@k is estimated from the runs; raise eval.runs or lower eval.k.")
    if not 0 <= cfg.eval.best_of_k <= cfg.eval.runs:
        return (f"eval.best_of_k ({cfg.eval.best_of_k}) must be between 0 (off) and eval.runs "
                f"({cfg.eval.runs}): the verifier reranks each instance's runs in blocks of "
                f"best_of_k; raise eval.runs or lower eval.best_of_k.")
    return ""


def _mlflow(cfg: Config) -> str:
    uri = cfg.tracking.mlflow_uri
    if not uri or uri.startswith("sqlite:"):
        return ""
    if uri.startswith(("http://", "https://")):
        try:
            _get(uri.rstrip("/") + "/health")
        except (OSError, urllib.error.URLError) as exc:
            return (f"MLflow tracking server {uri} is unreachable ({_reason(exc)}); start it "
                    f"(`docker compose -f infra/docker-compose.yml up -d mlflow`, or `mlflow "
                    f"server`), or set tracking.mlflow_uri= (empty) to use SQLite under the run root.")
        return ""
    if uri.startswith("file:") or "://" not in uri:
        return (f"tracking.mlflow_uri {uri!r} is a file store, which MLflow 3 refuses; use "
                f"sqlite:///<path>/mlflow.db, an http(s) server, or leave it unset.")
    return ""


def _prefect() -> str:
    from prefect.settings import PREFECT_API_URL
    api = PREFECT_API_URL.value()
    if not api:
        return ""  # the ephemeral API: nothing to reach
    try:
        _get(api.rstrip("/") + "/health")
    except (OSError, urllib.error.URLError) as exc:
        where = "the PREFECT_API_URL environment variable" if os.environ.get("PREFECT_API_URL") \
            else "the active Prefect profile"
        return (f"the Prefect API at {api} is down ({_reason(exc)}); start it (`prefect server "
                f"start`, or `docker compose -f infra/docker-compose.yml up -d`), or unset "
                f"PREFECT_API_URL ({where}; `prefect config unset PREFECT_API_URL`) to run on "
                f"the embedded ephemeral API.")
    return ""


def _get(url: str, timeout: float = 5.0) -> None:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        response.read()


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(reason)
