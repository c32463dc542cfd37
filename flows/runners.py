"""How a flow runs its tasks: the task runner and the stage tasks with this run's options.

Task runners are picked by name (`orchestration.task_runner`): `threads` (Prefect's
`ThreadPoolTaskRunner`, here one that stops at once on Ctrl-C or SIGTERM; the embedded default)
or `ray` (`prefect-ray`'s `RayTaskRunner`). Imports are lazy, so Ray is needed only when asked
for. Ray workers run the stage tasks in their own processes and report to the Prefect API of the
driver (passed as PREFECT_API_URL in the job's runtime env), so with Ray use a Prefect server
rather than the ephemeral API when the cluster spans machines.

The driver joins one Ray cluster per run (`connect_ray`): the one at `orchestration.ray_address`
or RAY_ADDRESS, else a local one it starts once and stops at exit. `RayTaskRunner` reuses an
initialised Ray and leaves it running, so sub-flows do not each start (8-10 s) and stop a cluster.
The local cluster is hermetic: its own temp dir and session, RAY_AUTH_MODE set from
`orchestration.ray_auth_mode` (a `~/.ray/auth_token` left by another run cannot switch it), node
IP 127.0.0.1, so its GCS and raylets listen on loopback only, and no dashboard. On a machine that
others share, `ray_auth_mode: token` also keeps their processes out of it.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import Task
from prefect.futures import PrefectFuture
from prefect.task_runners import ThreadPoolTaskRunner

from swe_rlvr.config import Config, ConfigError


class StoppableThreadPoolTaskRunner(ThreadPoolTaskRunner):
    """Prefect's `ThreadPoolTaskRunner`, except that a flow stopped by Ctrl-C or SIGTERM leaves
    at once. Prefect raises those in the main thread (KeyboardInterrupt, its TerminationSignal);
    the runner's exit then shut its pool down waiting, and a running stage's thread never hears
    the signal, so a stopped ladder sampled or graded on until the whole stage ended. Here the
    pool is shut down without waiting: queued tasks are cancelled, the running ones are left to
    die with the process (`swe_rlvr.cli.stop`), and what a rerun needs is on disk already."""

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        if exc_type is not None and not issubclass(exc_type, Exception) and self._executor:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None               # so the base's exit does not shut it down waiting
        super().__exit__(exc_type, exc_value, traceback)


def _threads(cfg: Config) -> Any:
    return StoppableThreadPoolTaskRunner(max_workers=cfg.orchestration.max_workers)


def _ray(cfg: Config) -> Any:
    try:
        from prefect_ray.task_runners import RayTaskRunner
    except ImportError as exc:
        raise ConfigError("orchestration.task_runner=ray needs prefect-ray and ray: "
                          "pip install -e '.[ray]' (or set orchestration.task_runner=threads)."
                          ) from exc
    connect_ray(cfg)
    return RayTaskRunner()                      # reuses this process's Ray, never shuts it down


def connect_ray(cfg: Config) -> None:
    """Join this run's Ray cluster once per process: `orchestration.ray_address`, else
    RAY_ADDRESS, else a local cluster started here (stopped at exit)."""
    import ray
    if ray.is_initialized():
        return
    _auth_env(cfg)
    address = cfg.orchestration.ray_address or os.environ.get("RAY_ADDRESS")
    if address:
        if address.split(":")[0] in ("127.0.0.1", "localhost"):
            _loopback()
        ray.init(address=address, runtime_env=_runtime_env())
    else:
        _local_ray(cfg)
    atexit.register(ray.shutdown)


def _local_ray(cfg: Config) -> None:
    """A one-node cluster on 127.0.0.1 in its own temp dir (short: Ray's socket paths are)."""
    import ray
    _loopback()
    temp = tempfile.mkdtemp(prefix="ray-")
    atexit.register(shutil.rmtree, temp, ignore_errors=True)    # runs after ray.shutdown
    if cfg.orchestration.ray_auth_mode == "token" and not _token_given():
        token = Path(temp) / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)
    ray.init(address="local", num_cpus=cfg.orchestration.ray_num_cpus or None,
             include_dashboard=False, _temp_dir=temp, _node_ip_address="127.0.0.1",
             runtime_env=_runtime_env())


def _loopback() -> None:
    """Keep 127.0.0.1 as this node's address: Ray swaps it for the machine's outward address
    unless multi-node clusters are off (Ray's switch for Windows and macOS). Ray's child
    processes read the variable, this process (Ray already imported) the constant."""
    from ray._private import ray_constants
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def _auth_env(cfg: Config) -> None:
    """RAY_AUTH_MODE from the config, for this process and the Ray processes it starts."""
    from ray._raylet import Config as RayConfig
    os.environ["RAY_AUTH_MODE"] = cfg.orchestration.ray_auth_mode
    RayConfig.initialize("")                    # Ray's own way to re-read RAY_* variables


def _token_given() -> bool:
    return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"))


def _runtime_env() -> dict[str, Any]:
    """Ray workers report task runs to the same Prefect API as this process."""
    from prefect.settings import PREFECT_API_URL
    api = PREFECT_API_URL.value()
    return {"env_vars": {"PREFECT_API_URL": api}} if api else {}


TASK_RUNNERS: dict[str, Callable[[Config], Any]] = {"threads": _threads, "ray": _ray}


def task_runner(cfg: Config) -> Any:
    """The task runner named by `orchestration.task_runner`."""
    name = cfg.orchestration.task_runner
    if name not in TASK_RUNNERS:
        raise ConfigError(f"Unknown orchestration.task_runner {name!r}; choose one of: "
                          f"{', '.join(TASK_RUNNERS)}.")
    return TASK_RUNNERS[name](cfg)


def stages(cfg: Config, run_dir: str) -> Stages:
    """The stage tasks with this run's retries and cache (keys stored beside the artifacts)."""
    from prefect.cache_policies import NO_CACHE

    from tasks.cache import ARTIFACT_INPUTS
    from tasks.curriculum import curriculum
    from tasks.evaluate import evaluate
    from tasks.guidance import guidance
    from tasks.instances import instances
    from tasks.reward import reward
    from tasks.rollout import rollout
    from tasks.update import update
    from tasks.validate import validate
    from tasks.verifier import verifier

    local = _local_dir(run_dir)
    policy = ARTIFACT_INPUTS if cfg.orchestration.cache else NO_CACHE
    options: dict[str, Any] = dict(retries=cfg.orchestration.retries,
                                   retry_delay_seconds=[cfg.orchestration.retry_delay_s * 3 ** i
                                                        for i in range(max(1, cfg.orchestration.retries))])
    if local is not None and cfg.orchestration.cache:
        policy = policy.configure(key_storage=local / ".prefect" / "cache")
        options["result_storage"] = local / ".prefect" / "results"
    options["cache_policy"] = policy
    named = {"instances": instances, "rollout": rollout, "validate": validate,
             "guidance": guidance, "reward": reward, "update": update, "evaluate": evaluate,
             "verifier": verifier, "rollout_guided": rollout, "validate_guided": validate,
             "curriculum": curriculum, "eval_instances": instances, "eval_rollout": rollout,
             "eval_validate": validate}
    tasks = {name: _named(t, name.replace("_", "-"), options) for name, t in named.items()}
    gpus = update_resources(cfg)
    update_task = tasks.pop("update")
    return Stages(update=WithRayResources(update_task, gpus) if gpus else update_task, **tasks)


def update_resources(cfg: Config) -> dict[str, Any]:
    """Ray resources of the update task: `trainer.num_gpus` GPUs where the trainer may train on
    a GPU (trainer.device auto or cuda) and the run's Ray cluster has GPUs, so Ray places the
    update (and its torchrun ranks) on a GPU node; nothing otherwise (the update trains on CPU)."""
    if cfg.orchestration.task_runner != "ray" or cfg.trainer.device == "cpu":
        return {}
    import ray
    if not ray.is_initialized():
        return {}
    per_node = max((n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n.get("Alive")),
                   default=0.0)
    if per_node <= 0:
        return {}
    if cfg.trainer.num_gpus > per_node:
        raise ConfigError(f"trainer.num_gpus is {cfg.trainer.num_gpus}, but the Ray cluster's "
                          f"largest node has {per_node:g} GPUs and the update runs on one node "
                          f"(torchrun); lower trainer.num_gpus or add a node with more GPUs.")
    return {"num_gpus": cfg.trainer.num_gpus}


class WithRayResources:
    """A stage task whose `submit` asks the Ray task runner for `resources` (prefect-ray's
    `remote_options`); everything else is the task's own."""

    def __init__(self, task: Task[..., str], resources: dict[str, Any]) -> None:
        self.task, self.resources = task, resources

    def submit(self, *args: Any, **kwargs: Any) -> PrefectFuture[str]:
        from prefect_ray.context import remote_options
        with remote_options(**self.resources):
            return self.task.submit(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)


StageTask = Task[..., str]
"""A stage task: its runs return the URL of what they wrote."""


@dataclass(frozen=True)
class Stages:
    """The stage tasks of one run directory (`stages`), each under its stage name (`rollout_guided`
    runs as `rollout-guided`) with the run's retries and cache. `update` asks the Ray task runner
    for GPUs where `update_resources` finds them."""

    instances: StageTask
    rollout: StageTask
    validate: StageTask
    guidance: StageTask
    reward: StageTask
    update: StageTask | WithRayResources
    evaluate: StageTask
    verifier: StageTask
    rollout_guided: StageTask
    validate_guided: StageTask
    curriculum: StageTask
    eval_instances: StageTask
    eval_rollout: StageTask
    eval_validate: StageTask


def _named(task: Any, name: str, options: dict[str, Any]) -> Task[..., str]:
    """`task` under its stage name (`rollout-guided` apart from `rollout` in the UI), its runs
    named after the iteration (`rollout-guided-i3`)."""
    return task.with_options(name=name, task_run_name=f"{name}-i{{iteration}}", **options)


def _local_dir(url: str) -> Path | None:
    import fsspec
    fs, path = fsspec.core.url_to_fs(url)
    return Path(path).resolve() if "file" in fs.protocol else None
