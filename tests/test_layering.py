"""Rules of the code base's shape: the agent never imports the trainer, and no module is over 400
lines (a longer one holds more than one idea; split it along its seams)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "bench", "flows", "sandbox", "swe_rlvr", "tasks", "trainer", "tests")
MAX_LINES = 400


def modules(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (ROOT / pkg).rglob("*.py")
                  if "builtin/projects" not in p.as_posix())


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", modules("agent"), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_agent_does_not_import_the_trainer(path):
    assert not {n for n in imported(path) if n == "trainer" or n.startswith("trainer.")}


def test_no_module_is_over_400_lines():
    long = {p.relative_to(ROOT).as_posix(): n for p in modules(*PACKAGES)
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these along their seams: {long}"
