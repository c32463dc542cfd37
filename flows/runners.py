"""How a flow runs its tasks: the task runner and the stage tasks with this run's options.

Task runners are picked by name (`orchestration.task_runner`): `threads` (Prefect's
`ThreadPoolTaskRunner`, the embedded default) or `ray` (`prefect-ray`'s `RayTaskRunner`, for a
cluster at `orchestration.ray_address`, or a local Ray started on demand). Imports are lazy, so
Ray is needed only when asked for. Ray workers run the stage tasks in their own processes and
report to the Prefect API of the driver (passed as PREFECT_API_URL in the job's runtime env), so
with Ray use a Prefect server rather than the ephemeral API when the cluster spans machines.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from swe_rlvr.config import Config, ConfigError


def _threads(cfg: Config) -> Any:
    from prefect.task_runners import ThreadPoolTaskRunner
    return ThreadPoolTaskRunner(max_workers=cfg.orchestration.max_workers)


def _ray(cfg: Config) -> Any:
    try:
        from prefect_ray.task_runners import RayTaskRunner
    except ImportError as exc:
        raise ConfigError("orchestration.task_runner=ray needs prefect-ray and ray: "
                          "pip install -e '.[ray]' (or set orchestration.task_runner=threads)."
                          ) from exc
    from prefect.settings import PREFECT_API_URL
    api = PREFECT_API_URL.value()
    # Ray workers report task runs to the same Prefect API as this process.
    init = {"runtime_env": {"env_vars": {"PREFECT_API_URL": api}}} if api else {}
    return RayTaskRunner(address=cfg.orchestration.ray_address or None, init_kwargs=init)


TASK_RUNNERS: dict[str, Callable[[Config], Any]] = {"threads": _threads, "ray": _ray}


def task_runner(cfg: Config) -> Any:
    """The task runner named by `orchestration.task_runner`."""
    name = cfg.orchestration.task_runner
    if name not in TASK_RUNNERS:
        raise ConfigError(f"Unknown orchestration.task_runner {name!r}; choose one of: "
                          f"{', '.join(TASK_RUNNERS)}.")
    return TASK_RUNNERS[name](cfg)


def stages(cfg: Config, run_dir: str) -> SimpleNamespace:
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
             "curriculum": curriculum}
    return SimpleNamespace(**{name: _named(t, name.replace("_", "-"), options)
                              for name, t in named.items()})


def _named(task: Any, name: str, options: dict[str, Any]) -> Any:
    """`task` under its stage name (`rollout-guided` apart from `rollout` in the UI), its runs
    named after the iteration (`rollout-guided-i3`)."""
    return task.with_options(name=name, task_run_name=f"{name}-i{{iteration}}", **options)


def _local_dir(url: str) -> Path | None:
    import fsspec
    fs, path = fsspec.core.url_to_fs(url)
    return Path(path).resolve() if "file" in fs.protocol else None
