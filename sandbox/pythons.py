"""Python interpreters on this machine, found by version, for building instance environments.

An interpreter counts only if it runs: pyenv's shims sit first on PATH and exist for every
installed version, but a shim for a version that is not selected (`pyenv global`) exits 127
("command not found"), so each candidate is tried with `-c "import venv"` and the next one is
used when it fails. Candidates, in order: `python<version>` on PATH, pyenv's
`versions/<version>.*`, and uv's managed Pythons (`uv python install <version>`).

`nearest_python` picks a stand-in for a missing version (used only with
`sandbox.python_fallback`): the same major version, the closest minor, the older one on a tie. An
older interpreter is the safer stand-in: an instance's pinned dependencies were published for the
Pythons of its time, and old pins often have no wheels for newer Pythons.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

_MINOR = re.compile(r"python(\d+\.\d+)$")


def find_python(version: str) -> str | None:
    """An interpreter for `version` ("3.9") that actually runs, or None."""
    return _find(version, os.environ.get("PATH", ""), str(_pyenv_root()), str(_uv_root()))


@functools.lru_cache(maxsize=64)
def _find(version: str, path: str, pyenv_root: str, uv_root: str) -> str | None:
    candidates = [shutil.which(f"python{version}", path=path)]
    candidates += sorted(str(p) for p in Path(pyenv_root).glob(f"versions/{version}.*/bin/python{version}"))
    candidates += sorted(str(p) for p in Path(uv_root).glob(f"cpython-{version}.*/bin/python{version}"))
    for candidate in filter(None, candidates):
        if _runs(candidate):
            return candidate
    return None


def _runs(python: str) -> bool:
    try:
        proc = subprocess.run([python, "-c", "import venv"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def installed_versions() -> list[str]:
    """Every "major.minor" with an interpreter that runs, oldest first."""
    names: set[str] = set()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        names.update(p.name for p in _glob(Path(directory or "."), "python[0-9]*.[0-9]*"))
    names.update(p.name for p in _glob(_pyenv_root(), "versions/*/bin/python[0-9]*.[0-9]*"))
    names.update(p.name for p in _glob(_uv_root(), "cpython-*/bin/python[0-9]*.[0-9]*"))
    versions = {m.group(1) for m in map(_MINOR.match, names) if m}
    return sorted((v for v in versions if find_python(v)), key=_as_tuple)


def nearest_python(wanted: str, available: list[str]) -> str | None:
    """The available version closest to `wanted` in the same major version (the older on a tie);
    None when no version of that major is available or `wanted` is not "major.minor"."""
    try:
        major, minor = _as_tuple(wanted)
    except ValueError:
        return None
    same_major = [v for v in available if _as_tuple(v)[0] == major]
    if not same_major:
        return None
    return min(same_major, key=lambda v: (abs(_as_tuple(v)[1] - minor), _as_tuple(v)[1]))


def _as_tuple(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def _glob(root: Path, pattern: str) -> list[Path]:
    try:
        return list(root.glob(pattern))
    except OSError:
        return []


def _pyenv_root() -> Path:
    return Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))


def _uv_root() -> Path:
    data = os.environ.get("XDG_DATA_HOME", str(Path.home() / ".local" / "share"))
    return Path(os.environ.get("UV_PYTHON_INSTALL_DIR", Path(data) / "uv" / "python"))
