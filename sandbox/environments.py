"""Per-instance Python environments for the local backend (SWE-rebench `install_config` style).

`ensure_env` returns the environment whose `bin/` comes first on the sandbox's PATH:
- fast path: when the spec asks only for the running interpreter's Python version and packages it
  already has (the built-in suite: `pip_packages=("pytest",)`, no install), the running
  interpreter's environment is reused and nothing is built;
- otherwise a virtualenv is built under `SandboxConfig.env_cache`, keyed by a hash of the spec (and
  of the repo and base commit when requirement files or an install command read the checkout),
  under a file lock, and reused by every later sandbox.

Simplifications:
- Builds run on the host with network access and without the command sandbox: their commands come
  from the dataset, not from the agent. `apt`/`apt-get` lines of `pre_install` are skipped (the
  Docker backend runs them).
- The repo's own `install` runs in a private copy of the base (`<env>/src`), so an editable install
  points there; the working copy (and its `src/`) go first on PYTHONPATH so the agent's edits are
  what the tests import. Repos whose compiled extensions must be rebuilt after an edit need the
  Docker backend.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from sandbox.base import SandboxError
from sandbox.workspace import sandbox_root


class EnvBuildError(SandboxError):
    """Building an instance environment failed: an infrastructure failure, never a wrong patch."""


@dataclass(frozen=True)
class PythonEnv:
    bin_dir: str
    """Directory put first on PATH (holds `python`, `pip`, `pytest`)."""
    repo_on_path: bool = False
    """Put the working copy (and its src/) first on PYTHONPATH (the repo was installed)."""

    def env_vars(self, workdir: str) -> tuple[tuple[str, str], ...]:
        out = [("VIRTUAL_ENV", str(Path(self.bin_dir).parent))]
        if self.repo_on_path:
            out.append(("PYTHONPATH", f"{workdir}:{workdir}/src"))
        return tuple(out)


def ensure_env(instance, cfg, base: Path) -> PythonEnv:
    """The environment for `instance`, reusing the running interpreter when that suffices."""
    if satisfied_by_running(instance.env):
        return PythonEnv(bin_dir=str(Path(sys.executable).parent))
    return build_env(instance, cfg, base)


@functools.lru_cache(maxsize=256)
def satisfied_by_running(spec) -> bool:
    """True when the spec needs nothing the running interpreter lacks."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if spec.python and spec.python != running:
        return False
    if spec.pre_install or spec.reqs_path or spec.install:
        return False
    return all(_installed(req) for req in spec.pip_packages)


def _installed(requirement: str) -> bool:
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:
        return False
    try:
        req = Requirement(requirement)
        version = metadata.version(req.name)
    except (InvalidRequirement, metadata.PackageNotFoundError):
        return False
    return req.specifier.contains(version, prereleases=True)


def env_key(instance) -> str:
    spec = instance.env
    parts = {"python": spec.python, "pre_install": spec.pre_install, "reqs": spec.reqs_path,
             "pip": spec.pip_packages, "install": spec.install}
    if spec.reqs_path or spec.install or spec.pre_install:
        parts.update(repo=instance.repo, commit=instance.base_commit)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def build_env(instance, cfg, base: Path) -> PythonEnv:
    """Build (once, under a lock) and return the cached virtualenv for the instance's spec."""
    cache = Path(cfg.env_cache) if cfg.env_cache else sandbox_root(cfg.workdir) / "envs"
    env_dir = cache / f"{instance.repo.replace('/', '__')}-py{instance.env.python}-{env_key(instance)}"
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    with _locked(env_dir.parent / f"{env_dir.name}.lock"):
        if not (env_dir / ".ready").exists():
            shutil.rmtree(env_dir, ignore_errors=True)
            try:
                _build(instance.env, env_dir, base)
            except EnvBuildError:
                shutil.rmtree(env_dir, ignore_errors=True)
                raise
            (env_dir / ".ready").write_text("ok")
    return PythonEnv(bin_dir=str(env_dir / "bin"), repo_on_path=bool(instance.env.install))


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(spec, env_dir: Path, base: Path) -> None:
    _create_venv(spec.python, env_dir, with_pip=bool(spec.reqs_path or spec.pip_packages or spec.install))
    src = env_dir / "src"
    subprocess.run(["cp", "-a", f"{base}/.", str(src)], check=True)
    for line in spec.pre_install:
        if line.split()[:1] not in (["apt"], ["apt-get"], ["sudo"]):
            _step(line, src, env_dir)
    for req in spec.reqs_path:
        _step(f"python -m pip install -r {req}", src, env_dir)
    if spec.pip_packages:
        _step("python -m pip install " + " ".join(f"'{p}'" for p in spec.pip_packages), src, env_dir)
    if spec.install:
        _step(spec.install, src, env_dir)


def find_python(version: str) -> str | None:
    """An interpreter for `version` that actually runs: on PATH, else in pyenv's versions."""
    import os
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(str(p) for p in pyenv_root.glob(f"versions/{version}.*/bin/python{version}"))
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "import venv"], capture_output=True).returncode == 0:
            return candidate
    return None


def _create_venv(version: str, env_dir: Path, with_pip: bool) -> None:
    python = find_python(version)
    if python:
        pip = [] if with_pip else ["--without-pip"]
        _run([python, "-m", "venv", *pip, str(env_dir)], f"creating a Python {version} virtualenv")
    elif shutil.which("uv"):
        _run(["uv", "venv", "--seed", "--python", version, str(env_dir)], f"uv venv --python {version}")
    else:
        raise EnvBuildError(f"Python {version} is needed for this instance but python{version} is not "
                            f"on PATH and uv is not installed; install it (e.g. `uv python install "
                            f"{version}`, pyenv, or apt-get install python{version}-venv).")


def _step(command: str, cwd: Path, env_dir: Path) -> None:
    env = {"PATH": f"{env_dir / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(env_dir),
           "VIRTUAL_ENV": str(env_dir), "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    _run(["bash", "-c", command], f"`{command}`", cwd=cwd, env=env)


def _run(argv: list[str], what: str, **kwargs) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", **kwargs)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip()[-800:]
        raise EnvBuildError(f"Environment build step {what} failed (exit {proc.returncode}):\n{tail}")
