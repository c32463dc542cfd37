"""Sandboxes: working copies of instance repositories with isolated, limited command execution.

`open_sandbox` picks a backend by name from a plain dict; each backend module is imported only
when chosen, so the docker SDK never loads for the local backend.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.base import ExecResult, Sandbox, SandboxError

if TYPE_CHECKING:
    from swe_rlvr.config import SandboxConfig
    from swe_rlvr.instances import Instance

BACKENDS: dict[str, str] = {
    "local": "sandbox.local:LocalSandbox",
    "docker": "sandbox.docker:DockerSandbox",
}

__all__ = ["BACKENDS", "ExecResult", "Sandbox", "SandboxError", "open_sandbox"]


def open_sandbox(instance: Instance, cfg: SandboxConfig, repo_store: str | Path) -> Sandbox:
    """A fresh sandbox for `instance` on the backend `cfg.backend` names (close it, or use `with`)."""
    return backend_class(cfg.backend)(instance, cfg, repo_store)


def backend_class(name: str) -> Callable[[Instance, SandboxConfig, str | Path], Sandbox]:
    """The class registered under `name`, imported on first use."""
    if name not in BACKENDS:
        raise SandboxError(f"Unknown sandbox backend {name!r}; choose one of: {', '.join(BACKENDS)}.")
    module_name, class_name = BACKENDS[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise SandboxError(f"Sandbox backend {name!r} cannot load ({exc}); install its dependencies "
                           f"or choose another backend.") from exc
    return getattr(module, class_name)
