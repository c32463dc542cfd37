"""The wheel ships the configs: installed outside the source tree, `swe-rlvr quickstart` finds its
recipe as package data and `swe-rlvr config show` resolves the presets.

The wheel is built from a copy of the packages (the tree's build/ is left alone), installed with
`--no-deps` into a fresh venv, and that venv then reads this venv's site-packages for the
dependencies through a `.pth` line (no `.pth` file there runs, so this checkout's editable finder
stays out). Every command runs from an empty directory with no PYTHONPATH. About 5 s on 2 cores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.infra

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "configs", "swe_rlvr", "agent", "sandbox", "trainer",
           "tasks", "flows")


def _run(*argv: str | Path, cwd: Path, env: dict | None = None) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path, dict]:
    """(the venv's bin directory, an empty working directory, the environment to run in)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
         tmp / "dist", src, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("swe_rlvr-*.whl")
    _run(sys.executable, "-m", "venv", "--without-pip", tmp / "venv", cwd=tmp)
    python = tmp / "venv" / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel,
         cwd=tmp)
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                     cwd=tmp).strip())
    (site / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    (tmp / "elsewhere").mkdir()
    return tmp / "venv" / "bin", tmp / "elsewhere", env


def test_the_installed_package_is_the_wheels(installed):
    bin_dir, cwd, env = installed
    where = _run(bin_dir / "python", "-c", "import swe_rlvr, flows; print(swe_rlvr.__file__); "
                 "print(flows.__file__)", cwd=cwd, env=env)
    assert all(line.startswith(str(bin_dir.parent)) for line in where.split())


def test_quickstart_finds_its_config_as_package_data(installed):
    bin_dir, cwd, env = installed
    assert "--config" in _run(bin_dir / "swe-rlvr", "quickstart", "--help", cwd=cwd, env=env)
    found = Path(_run(bin_dir / "python", "-c", "from flows.cli import quickstart_config; "
                      "print(quickstart_config())", cwd=cwd, env=env).strip())
    assert found.parts[-3:] == ("swe_rlvr", "configs", "quickstart.yaml")
    assert found.is_relative_to(bin_dir.parent) and not found.is_symlink()


def test_config_show_resolves_a_preset_and_a_shipped_path(installed):
    bin_dir, cwd, env = installed
    shown = _run(bin_dir / "swe-rlvr", "config", "show", "--preset", "cpu-2core", cwd=cwd, env=env)
    assert any(line.split() == ["trainer.pack_tokens", "4096", "preset:cpu-2core"]
               for line in shown.splitlines())
    shown = _run(bin_dir / "swe-rlvr", "config", "show", "--config", "configs/quickstart.yaml",
                 "--changed", cwd=cwd, env=env)
    assert shown.splitlines()[0].endswith("swe_rlvr/configs/quickstart.yaml")
    assert any(line.split() == ["instances.limit", "4", "file"] for line in shown.splitlines())
