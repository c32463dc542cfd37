"""Rules of the code base's shape: the layer contracts hold (import-linter, `[tool.importlinter]`
in pyproject.toml), and no module is over 400 lines (a longer one holds more than one idea; split
it along its seams)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "bench", "flows", "sandbox", "swe_rlvr", "tasks", "trainer", "tests")
LAYERED = ("agent", "flows", "sandbox", "swe_rlvr", "tasks", "trainer")
"""import-linter's root packages."""
MAX_LINES = 400


def modules(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py")
                  if "builtin/projects" not in p.as_posix())


def lint_imports(root: Path, *args: str) -> subprocess.CompletedProcess:
    """`lint-imports` of this environment on `root`'s pyproject.toml, run in `root` (its packages
    come first on the path); no cache, so parallel runs share nothing. Wide lines: a contract's
    name stays on one line."""
    script = Path(sys.executable).with_name("lint-imports")
    if not script.exists():
        pytest.skip(f"import-linter is not installed in {sys.prefix}: pip install -e '.[dev]'")
    env = {**os.environ, "COLUMNS": "400"}
    return subprocess.run([str(script), "--no-cache", "--no-logo", *args, "pyproject.toml"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_the_layer_contracts_hold():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.fixture
def copy(tmp_path) -> Path:
    """The layered packages and pyproject.toml, copied to `tmp_path`."""
    for pkg in LAYERED:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


@pytest.mark.parametrize("module, line, contract, chain", [
    ("trainer/losses.py", "import flows", "trainer imports no Prefect, MLflow, tasks or flows",
     "trainer.losses -> flows"),
    ("tasks/store.py", "import tasks.stage", "the modules of each package import each other "
     "without cycles", "No cycles are allowed in tasks"),
], ids=["forbidden-import", "cycle"])
def test_a_breach_fails_the_check_naming_its_contract(copy, module, line, contract, chain):
    """One import that breaks a rule (the trainer importing a flow; the store importing the stage
    module above it, a cycle) is enough to fail `lint-imports`, and the report names the contract
    and the import."""
    path = copy / module
    path.write_text(path.read_text() + f"\n{line}  # the breach\n")
    done = lint_imports(copy)
    assert done.returncode != 0
    broken = [ln for ln in done.stdout.splitlines() if " BROKEN" in ln]
    assert any(ln.startswith(contract) for ln in broken), done.stdout
    assert chain in done.stdout


def test_no_module_is_over_400_lines():
    long = {p.relative_to(ROOT).as_posix(): n for p in modules(*PACKAGES)
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these along their seams: {long}"
