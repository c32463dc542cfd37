"""Per-instance Python environments for the local backend (SWE-rebench `install_config` style).

`ensure_env` returns the environment whose `bin/` comes first on the sandbox's PATH:
- a spec with a `build_error` (no SWE-bench spec for a plain record's repo/version, a conda-only
  spec) raises it as `EnvBuildError`, an infrastructure failure: such an instance never runs in
  a default environment;
- fast path: when the spec asks only for the running interpreter's Python version and packages it
  already has (the built-in suite: `pip_packages=("pytest",)`, no install), the running
  interpreter's environment is reused and nothing is built. That environment holds this
  project's own packages too, so pytest there loads only the plugins of the spec's packages
  (`PYTEST_DISABLE_PLUGIN_AUTOLOAD`, `PYTEST_PLUGINS`): another project's plugins are not the
  instance's environment (one that reorders or reseeds tests would change grades), and loading
  anyio's, xdist's and pytest-timeout's doubled the CPU time of every test run there (0.65 CPU-s
  against 0.31 for a built-in test file). The built-in suite's expected outcomes were computed
  with autoloading off as well (`swe_rlvr.builtin.outcomes`);
- otherwise a virtualenv is built under `SandboxConfig.env_cache`, keyed by a hash of the spec and
  of the Python it was built with (and of the repo and base commit when requirement files or an
  install command read the checkout), under a file lock, and reused by every later sandbox.

A Python the machine lacks is an `EnvBuildError` naming it; with `sandbox.python_fallback` the
nearest installed one is used instead (`sandbox.pythons`), and `PythonEnv.notes` says so.

The build follows SWE-bench's order: requirement files, `pip_packages`, `pre_install`, then the
repo's own `install`, with the pip that the interpreter's `ensurepip` bundles (never upgraded:
3.9.18 bundles 23.0.1, 3.11.7 23.2.1). Those pips still fall back to `setup.py develop` for
`pip install -e .` of a project whose pinned setuptools has no PEP 660 hook (astroid and pylint
pin setuptools~=62.6); pip 25.3 and later refuse it.

The repo's own `install` runs in a private copy of the base (`<env>/src`), so an editable install
points there; the working copy (and its `src/`) go first on PYTHONPATH so the agent's edits are
what the tests import. What the install generates in the tree and git ignores (setuptools_scm's
`_version.py`, `*.egg-info`, in-place extension builds) is saved in `<env>/generated`, which every
working copy gets as an overlay layer above the shared base (or copied over it): the tests then
see the same tree as after SWE-bench's in-place install, and `diff()` never shows those files.

Builds see the host's pip settings (`PIP_SETTINGS`: index, mirror, wheel folder, certificate),
so a cluster without PyPI builds from its own mirror or a wheelhouse (`PIP_NO_INDEX=1
PIP_FIND_LINKS=<dir>`) and the pip defaults are not the only way out.

Simplifications:
- Builds run on the host with network access and without the command sandbox: their commands come
  from the dataset, not from the agent. `apt`/`apt-get` lines of `pre_install` are skipped with a
  logged note (the Docker backend runs them).
- Files the install generates that git does *not* ignore, and tracked files it rewrites, are not
  carried into working copies: they would show up in `diff()` as the agent's changes.
- Repos whose compiled extensions must be rebuilt after an edit need the Docker backend.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox import pythons
from sandbox.base import SandboxError
from sandbox.workspace import git, sandbox_root
from swe_rlvr import env_specs

if TYPE_CHECKING:
    from swe_rlvr.config import SandboxConfig
    from swe_rlvr.instances import EnvSpec, Instance

log = logging.getLogger(__name__)

LAYOUT = 2
"""Bumped when what a built environment holds changes (2: the `generated` layer), so that envs
cached by older code are rebuilt rather than reused."""


class EnvBuildError(SandboxError):
    """Building an instance environment failed: an infrastructure failure, never a wrong patch."""


@dataclass(frozen=True)
class PythonEnv:
    bin_dir: str
    """Directory put first on PATH (holds `python`, `pip`, `pytest`)."""
    repo_on_path: bool = False
    """Put the working copy (and its src/) first on PYTHONPATH (the repo was installed)."""
    layer: str = ""
    """Directory of the install's generated, git-ignored files, laid over the base checkout in
    every working copy ("" = none)."""
    notes: tuple[str, ...] = ()
    """Warnings for every report graded in this environment (a stand-in Python)."""
    pytest_plugins: tuple[str, ...] | None = None
    """The only pytest plugins to load (modules; None: whatever the environment registers)."""

    def env_vars(self, workdir: str) -> tuple[tuple[str, str], ...]:
        out = [("VIRTUAL_ENV", str(Path(self.bin_dir).parent))]
        if self.repo_on_path:
            out.append(("PYTHONPATH", f"{workdir}:{workdir}/src"))
        if self.pytest_plugins is not None:
            out.append(("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1"))
            if self.pytest_plugins:
                out.append(("PYTEST_PLUGINS", ",".join(self.pytest_plugins)))
        return tuple(out)


def check_buildable(instance: Instance) -> None:
    """Raise the spec's `build_error`: the local backend cannot build this environment."""
    if instance.env.build_error:
        raise EnvBuildError(f"{instance.instance_id}: {instance.env.build_error}")


def ensure_env(instance: Instance, cfg: SandboxConfig, base: Path) -> PythonEnv:
    """The environment for `instance`, reusing the running interpreter when that suffices."""
    check_buildable(instance)
    if satisfied_by_running(instance.env):
        return PythonEnv(bin_dir=str(Path(sys.executable).parent),
                         pytest_plugins=plugins_of(instance.env.pip_packages))
    return build_env(instance, cfg, base)


@functools.lru_cache(maxsize=256)
def plugins_of(requirements: tuple[str, ...]) -> tuple[str, ...]:
    """The pytest plugin modules (entry points `pytest11`) that the installed distributions named
    by `requirements` register, sorted."""
    if not requirements:
        return ()
    from packaging.requirements import Requirement
    modules: set[str] = set()
    for requirement in requirements:
        try:
            dist = metadata.distribution(Requirement(requirement).name)
        except metadata.PackageNotFoundError:
            continue
        modules.update(ep.module for ep in dist.entry_points if ep.group == "pytest11")
    return tuple(sorted(modules))


@functools.lru_cache(maxsize=256)
def satisfied_by_running(spec: EnvSpec) -> bool:
    """True when the spec needs nothing the running interpreter lacks."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if spec.build_error or (spec.python and spec.python != running):
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


def env_key(instance: Instance, python: str = "", install_env: tuple[tuple[str, str], ...] = ()) -> str:
    """Hash of what the environment is built from: the spec, the Python actually used (a
    stand-in differs from `spec.python`), the install's variables, and the checkout if read."""
    spec = instance.env
    parts = {"python": python or spec.python, "pre_install": spec.pre_install,
             "reqs": spec.reqs_path, "pip": spec.pip_packages, "install": spec.install,
             "origin": spec.origin, "install_env": install_env, "layout": LAYOUT}
    if spec.reqs_path or spec.install or spec.pre_install:
        parts.update(repo=instance.repo, commit=instance.base_commit)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def build_env(instance: Instance, cfg: SandboxConfig, base: Path) -> PythonEnv:
    """Build (once, under a lock) and return the cached virtualenv for the instance's spec."""
    spec = instance.env
    python, version, notes = choose_python(spec.python, cfg.python_fallback)
    install_env = install_variables(instance, base)
    cache = Path(cfg.env_cache) if cfg.env_cache else sandbox_root(cfg.workdir) / "envs"
    key = env_key(instance, version, install_env)
    env_dir = cache / f"{instance.repo.replace('/', '__')}-py{version}-{key}"
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    with _locked(env_dir.parent / f"{env_dir.name}.lock"):
        if not (env_dir / ".ready").exists():
            shutil.rmtree(env_dir, ignore_errors=True)
            try:
                _build(spec, python, env_dir, base, dict(install_env))
            except EnvBuildError:
                shutil.rmtree(env_dir, ignore_errors=True)
                raise
            (env_dir / ".ready").write_text("ok")
    layer = env_dir / "generated"
    return PythonEnv(bin_dir=str(env_dir / "bin"), repo_on_path=bool(spec.install),
                     layer=str(layer) if layer.is_dir() and any(layer.iterdir()) else "",
                     notes=notes)


def choose_python(wanted: str, fallback: bool) -> tuple[str, str, tuple[str, ...]]:
    """(interpreter, its "major.minor", notes) for a spec asking for Python `wanted`."""
    found = pythons.find_python(wanted)
    if found:
        return found, wanted, ()
    fix = (f"install Python {wanted} (e.g. `pyenv install {wanted}`, `uv python install "
           f"{wanted}`, or apt-get install python{wanted}-venv), or use the Docker backend "
           f"(sandbox.backend=docker) with the instance's image")
    if not fallback:
        raise EnvBuildError(f"Python {wanted} is needed for this instance but no python{wanted} "
                            f"that runs is on PATH, in pyenv or in uv's Pythons; {fix}. Or set "
                            f"sandbox.python_fallback=true to build it with the nearest "
                            f"installed Python.")
    nearest = pythons.nearest_python(wanted, pythons.installed_versions())
    stand_in = pythons.find_python(nearest) if nearest else None
    if not nearest or not stand_in:
        raise EnvBuildError(f"Python {wanted} is needed for this instance, and no Python of "
                            f"the same major version is installed to stand in for it; {fix}.")
    note = (f"Python {wanted} is not installed; this environment was built with Python {nearest} "
            f"instead (sandbox.python_fallback=true), so results may differ from the official "
            f"harness. To fix: {fix}.")
    return stand_in, nearest, (note,)


def install_variables(instance: Instance, base: Path) -> tuple[tuple[str, str], ...]:
    """Variables for the install step: every install (SWE-bench's spec or the record's own
    install_config) gets the record's version as the setuptools_scm version, since the repo
    store's clones are shallow and tagless (`env_specs.scm_pretend_env`)."""
    if not instance.env.install:
        return ()
    return env_specs.scm_pretend_env(base, instance.version)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(spec: EnvSpec, python: str, env_dir: Path, base: Path, install_env: dict[str, str]) -> None:
    with_pip = bool(spec.reqs_path or spec.pip_packages or spec.install)
    _run([python, "-m", "venv", *([] if with_pip else ["--without-pip"]), str(env_dir)],
         f"creating a virtualenv with {python}")
    src = env_dir / "src"
    subprocess.run(["cp", "-a", f"{base}/.", str(src)], check=True)
    for req in _requirement_files(spec, src, env_dir):
        _step(f"python -m pip install -r {shlex.quote(req)}", src, env_dir)
    if spec.pip_packages:
        _step("python -m pip install " + " ".join(map(shlex.quote, spec.pip_packages)), src, env_dir)
    kept = [line for line in spec.pre_install if not _system_package_line(line)]
    for line in sorted(set(spec.pre_install) - set(kept)):
        log.warning("environment %s: skipped `%s` (system packages need the Docker backend)",
                    env_dir.name, line)
    if kept:  # one script, as SWE-bench runs them: a variable one line sets, the next one reads
        _step("\n".join(["set -euo pipefail", *kept]), src, env_dir)
    if spec.install:
        _step(spec.install, src, env_dir, install_env)
    save_generated(src, env_dir / "generated")


def _system_package_line(line: str) -> bool:
    return line.split()[:1] in (["apt"], ["apt-get"], ["sudo"])


def _requirement_files(spec: EnvSpec, src: Path, env_dir: Path) -> list[str]:
    """Requirement files to `pip install -r`: every `reqs_path` of an install_config; for a
    SWE-bench spec, the first candidate that exists, cleaned as SWE-bench cleans it."""
    if spec.origin != env_specs.SWEBENCH or not spec.reqs_path:
        return list(spec.reqs_path)
    found = env_specs.requirements_text(src, spec.reqs_path)
    if found is None:
        raise EnvBuildError(f"None of the requirement files SWE-bench's spec names "
                            f"({', '.join(spec.reqs_path)}) exists at the base commit; check the "
                            f"instance's base_commit, or give it an install_config.")
    target = env_dir / env_specs.REQUIREMENTS_FILE
    target.write_text(found[1])
    return [str(target)]


def save_generated(src: Path, layer: Path) -> None:
    """Copy what git ignores and does not track in `src` (the install's outputs) into `layer`,
    at the same relative paths, keeping the parents' modes and times."""
    layer.mkdir()
    listed = git("ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory",
                 cwd=src).stdout
    for rel in filter(None, (item.rstrip("/") for item in listed.split("\0"))):
        origin, dest = src / rel, layer / rel
        for parent in reversed(Path(rel).parents[:-1]):
            if not (layer / parent).exists():
                (layer / parent).mkdir()
                shutil.copystat(src / parent, layer / parent)
        if origin.is_dir() and not origin.is_symlink():
            shutil.copytree(origin, dest, symlinks=True)
        else:
            shutil.copy2(origin, dest, follow_symlinks=False)


PIP_SETTINGS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX",
                "PIP_TRUSTED_HOST", "PIP_CERT", "PIP_CONFIG_FILE")
"""The host's pip variables an environment build keeps: where packages come from, not what."""


def _step(command: str, cwd: Path, env_dir: Path, extra: dict[str, str] | None = None) -> None:
    env = {"PATH": f"{env_dir / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(env_dir),
           "VIRTUAL_ENV": str(env_dir), "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
           **{k: os.environ[k] for k in PIP_SETTINGS if k in os.environ}, **(extra or {})}
    _run(["bash", "-c", command], f"`{command}`", cwd=cwd, env=env)


def _run(argv: list[str], what: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", cwd=cwd, env=env)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip()[-800:]
        raise EnvBuildError(f"Environment build step {what} failed (exit {proc.returncode}):\n{tail}")
