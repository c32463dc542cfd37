"""How the tests run is not the patch's to change: the test infrastructure a grade restores, and
the checks it plants in the pristine test files (the XFAIL marks they hold, and the canaries, whose
rules live in `sandbox.canaries`).

`sandbox.grading` calls these around its test run; its module docstring says what each rule is
for ("How the tests run is not the patch's to change", the `xfail` guard). Split out of it so that
the grader's steps and verdict read on their own.
"""

from __future__ import annotations

import ast
import configparser
import importlib.machinery
import random
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox.base import Sandbox
from sandbox.canaries import SYSTEM_RNG, canaries_blocked, plant_canaries
from swe_rlvr.patches import patch_files

if TYPE_CHECKING:
    from swe_rlvr.config import SandboxConfig
    from swe_rlvr.instances import Instance

GIT = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false"
"""git inside the grading sandbox, with hooks and fsmonitor off."""

# --------------------------------------------------------------------------- the test infrastructure

PYTEST_FILES = ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml")
"""pytest's own configuration files: any change to one is reset."""
PYTEST_SECTIONS = {"setup.cfg": ("tool:pytest", "pytest"), "tox.ini": ("pytest",), "pyproject.toml": ()}
"""Shared configuration files and the sections pytest reads (pyproject.toml: `[tool.pytest...]`)."""
PYTEST_MODULES = frozenset({"pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "exceptiongroup",
                            "tomli", "colorama", "pygments", "attr", "attrs", "more_itertools",
                            "atomicwrites", "importlib_metadata", "zipp", "typing_extensions", "wcwidth"})
"""pytest and what it imports, across the versions SWE-bench's environments pin."""
SHADOWED = frozenset(sys.stdlib_module_names) | PYTEST_MODULES
TEST_DIR = re.compile(r"tests?|testing|tests?_\w*|\w*_tests?")
"""Directory names that hold tests: their `__init__.py` files are test infrastructure."""
SHADOWING, METADATA = "shadows a module Python or pytest imports", "package metadata (entry points)"
INSTALLED = "shadows an installed module (a pytest plugin pytest autoloads, or one the code imports)"
INSTALLED_MODULES = ("python -I -c \"import pkgutil; print('\\n'.join(sorted(set(m.name for m in "
                     "pkgutil.iter_modules()))))\"")
"""The top-level modules the test environment's Python can import, the repo aside (`-I`: no cwd, no
PYTHONPATH)."""


def reset_kind(path: str, inits: set[str]) -> str:
    """Why a file the patch touches is test infrastructure, by its path alone ("" if it is not)."""
    parts = path.split("/")
    name = parts[-1]
    if name == "conftest.py":
        return "conftest.py"
    if name in PYTEST_FILES:
        return "pytest configuration"
    if name in ("sitecustomize.py", "usercustomize.py") or name.endswith(".pth"):
        return "runs when Python starts"
    if name.endswith((".pyc", ".pyo")) or "__pycache__" in parts:
        return "compiled code that stands in for source"
    if name == ".gitattributes":
        return "changes how git writes the test files"
    return "a test directory's __init__.py" if path in inits else ""


def new_entry(path: str, search_dirs: tuple[str, ...]) -> tuple[str, str]:
    """(entry, why) when `path` lies in a package-metadata directory (the `*.dist-info` entry) or
    in a top-level module or package named like one Python or pytest imports, in a directory Python
    searches first ("shlex.py", "src/_pytest"); the entry is reset where the base lacks it."""
    parts = path.split("/")
    for i, part in enumerate(parts[:-1]):
        if part.lower().endswith((".dist-info", ".egg-info")):  # importlib.metadata ignores case
            return "/".join(parts[:i + 1]), METADATA
    for entry, name in top_level(path, search_dirs):
        if name in SHADOWED:
            return entry, SHADOWING
    return "", ""


def top_level(path: str, search_dirs: tuple[str, ...]) -> list[tuple[str, str]]:
    """(entry, module name) of the top-level module or package `path` lies in, for each directory
    Python searches first that holds it ("src/pkg", "pkg")."""
    found = []
    for folder in search_dirs:
        prefix = f"{folder}/" if folder else ""
        head, sep, _ = path[len(prefix):].partition("/") if path.startswith(prefix) else ("", "", "")
        name = head if sep else module_stem(head)
        if name:
            found.append((prefix + head, name))
    return found


def module_stem(filename: str) -> str:
    """"shlex.py" -> "shlex", "x.cpython-311-x86_64-linux-gnu.so" -> "x"; "" for a non-module."""
    for suffix in sorted(importlib.machinery.all_suffixes(), key=len, reverse=True):
        if filename.endswith(suffix):
            return filename[:-len(suffix)]
    return ""


def search_dirs(instance: Instance, inits: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """Where Python looks first when the tests run: the repo root (the cwd of `python -m pytest`),
    `src/` (the sandbox's PYTHONPATH), the test files' directories, and the directory pytest's
    default import mode puts first on `sys.path` for each test file: its basedir, the first
    directory up from the file that is no package (`inits`: the `__init__.py` files at the base
    and after the patch, since either can decide it)."""
    dirs = ["", "src"]
    for f in instance.test_files():
        folder = f.rpartition("/")[0]
        dirs.append(folder)
        while folder and f"{folder}/__init__.py" in inits:
            folder = folder.rpartition("/")[0]
        dirs.append(folder)
    return tuple(dict.fromkeys(dirs))


INIT_FILES = (f"{{ {GIT} ls-tree -r --name-only HEAD; {GIT} ls-files -co --exclude-standard; }} "
              "| grep -E '(^|/)__init__[.]py$' | sort -u")
"""The `__init__.py` files of the base commit and of the working copy after the patch."""


def test_dir_inits(instance: Instance) -> set[str]:
    """The `__init__.py` paths of every test directory on the test files' paths, from the first
    directory named like one (`tests`, `testing`, `test_x`, `x_tests`) down to the file."""
    inits: set[str] = set()
    for f in instance.test_files():
        dirs = f.split("/")[:-1]
        first = next((i for i, d in enumerate(dirs) if TEST_DIR.fullmatch(d)), len(dirs))
        inits.update("/".join(dirs[:i + 1] + ["__init__.py"]) for i in range(first, len(dirs)))
    return inits


def pytest_settings(name: str, text: str | None) -> object:
    """What pytest reads from the shared configuration file `name` holding `text` (None: no file):
    its pytest sections, or None. Text that does not parse gives a fresh object (equal to nothing).
    An ini file is read twice: by `iniconfig`, pytest's own parser (it splits lines where
    `str.splitlines` does, at `\r`, `\x0c`, `\x1c`...), and by `configparser` (older pytests read
    `setup.cfg` with it): a change either of them sees is a change."""
    if text is None:
        return None
    try:
        if name == "pyproject.toml":
            return tomllib.loads(text).get("tool", {}).get("pytest")
        read = (_iniconfig_sections(name, text), _configparser_sections(name, text))
        return read if any(read) else None
    except Exception:  # noqa: BLE001 - unreadable configuration counts as changed
        return object()


def _iniconfig_sections(name: str, text: str) -> dict | None:
    import iniconfig
    ini = iniconfig.IniConfig(name, data=text)
    return {s: dict(ini[s].items()) for s in PYTEST_SECTIONS[name] if s in ini} or None


def _configparser_sections(name: str, text: str) -> dict | None:
    parser = configparser.RawConfigParser(strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # configparser's documented idiom
    parser.read_string(text)
    return {s: dict(parser.items(s)) for s in PYTEST_SECTIONS[name] if parser.has_section(s)} or None


def pytest_section_changed(sb: Sandbox, path: str) -> bool:
    """Did the patch change what pytest reads from the shared configuration file `path`?"""
    name, quoted = path.rsplit("/", 1)[-1], shlex.quote(path)
    base = sb.execute(f"{GIT} show HEAD:{quoted} 2>/dev/null", timeout=60)
    now = sb.execute(f"cat -- {quoted} 2>/dev/null", timeout=60)
    return (pytest_settings(name, base.output if base.exit_code == 0 else None)
            != pytest_settings(name, now.output if now.exit_code == 0 else None))


def at_base(sb: Sandbox, paths: set[str]) -> set[str]:
    """Those of `paths` (files or directories) that the base commit has."""
    if not paths:
        return set()
    checks = [f"{GIT} cat-file -e HEAD:{shlex.quote(p)} 2>/dev/null && echo {shlex.quote(p)}"
              for p in sorted(paths)]
    return set(sb.execute("; ".join(checks) + "; true", timeout=60).output.splitlines()) & paths


def infrastructure_resets(sb: Sandbox, instance: Instance, model_patch: str) -> list[tuple[str, str]]:
    """(path, why) of every file or directory the patch touched that decides how the tests run,
    beside the test files (reset anyway); see the module docstring."""
    tests = set(instance.test_files())
    touched = [f for f in patch_files(model_patch) if f not in tests]
    inits = test_dir_inits(instance)
    resets = [(f, why) for f in touched if (why := reset_kind(f, inits))]
    resets += [(f, "pytest configuration") for f in touched
               if f.rsplit("/", 1)[-1] in PYTEST_SECTIONS and pytest_section_changed(sb, f)]
    dirs = search_dirs(instance, frozenset(sb.execute(INIT_FILES, timeout=60).output.split()))
    entries = {f: entry for f in touched if (entry := new_entry(f, dirs))[0]}
    tops = {f: top_level(f, dirs) for f in touched if f not in entries}
    present = at_base(sb, {entry for entry, _ in entries.values()} | {e for found in tops.values() for e, _ in found})
    for f, (top, why) in entries.items():
        if top not in present or why == METADATA:
            resets.append((top if top not in present else f, why))
    new = {f: [(e, n) for e, n in found if e not in present] for f, found in tops.items()}
    if any(new.values()):
        installed = set(sb.execute(INSTALLED_MODULES, timeout=60).output.split())
        resets += [(e, INSTALLED) for found in new.values() for e, n in found if n in installed]
    return list(dict.fromkeys(resets))


# --------------------------------------------------------------------------- pristine test files


@dataclass(frozen=True)
class Checks:
    """What the grader planted and read in the test files before the run."""

    canaries: dict[str, str]
    xfail_expected: frozenset[str]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class XfailMarks:
    """Where one test file expects XFAIL: everywhere, in these classes, in these functions."""

    module: bool
    classes: frozenset[str]
    functions: frozenset[str]


def plant_checks(sb: Sandbox, instance: Instance, cfg: SandboxConfig, rng: random.Random | None = None) -> Checks:
    """Read the pristine test files (base and test patch) and append the canaries to them."""
    texts = {f: read_text(sb, f) for f in graded_files(instance)}
    marks = {f: xfail_marks(text) for f, text in texts.items()}
    listed = instance.fail_to_pass + instance.pass_to_pass
    expected = frozenset(t for t in listed if xfail_expected(marks.get(t.split("::", 1)[0]), t))
    blocked, note = canaries_blocked(instance, cfg)
    if blocked:
        return Checks({}, expected, (note,) if note else ())
    files = [f for f, m in marks.items() if m is not None and not m.module
             and any(t.startswith(f"{f}::") and test_function(t).startswith("test") for t in listed)]
    parsed = {f: text for f, text in texts.items() if text is not None}  # every file in `files`
    return Checks(plant_canaries(sb, files, parsed, rng or SYSTEM_RNG), expected)


def graded_files(instance: Instance) -> list[str]:
    """The Python files that FAIL_TO_PASS / PASS_TO_PASS ids name, in order."""
    ids = instance.fail_to_pass + instance.pass_to_pass
    return [f for f in dict.fromkeys(t.split("::", 1)[0] for t in ids if "::" in t) if f.endswith(".py")]


def read_text(sb: Sandbox, path: str) -> str | None:
    result = sb.execute(f"cat -- {shlex.quote(path)} 2>/dev/null", timeout=60)
    return result.output if result.exit_code == 0 else None


def test_function(test_id: str) -> str:
    """"f.py::TestX::test_y[a::b]" -> "test_y"."""
    return test_id.split("[", 1)[0].rsplit("::", 1)[-1]


def xfail_marks(text: str | None) -> XfailMarks | None:
    """Where a test file's source expects XFAIL (see the module docstring); None if it does not parse."""
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, TypeError):
        return None
    aliases: set[str] = set()
    for stmt in tree.body:  # module-level names bound to an xfail mark (or to params that carry one)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value and _says_xfail(stmt.value, aliases):
            aliases |= {n.id for t in getattr(stmt, "targets", [getattr(stmt, "target", None)])
                        for n in ast.walk(t) if isinstance(n, ast.Name)}
    says = lambda node: _says_xfail(node, aliases)  # noqa: E731
    marked = lambda body: any(_assigns_pytestmark(s) and says(s.value) for s in body)  # noqa: E731
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    return XfailMarks(
        module=marked(tree.body),
        classes=frozenset(n.name for n in defs if isinstance(n, ast.ClassDef)
                          and (any(map(says, n.decorator_list)) or marked(n.body))),
        functions=frozenset(n.name for n in defs if not isinstance(n, ast.ClassDef)
                            and (any(map(says, n.decorator_list)) or any(map(says, n.body)))))


def _says_xfail(node: ast.AST, aliases: set[str]) -> bool:
    """Does `node` name an xfail: an identifier that contains "xfail" (`mark.xfail`, `pytest.xfail`,
    a helper such as scikit-learn's `_mark_xfail_checks`) or a module-level alias of one?"""
    return any(isinstance(n, ast.Attribute) and "xfail" in n.attr.lower()
               or isinstance(n, ast.Name) and ("xfail" in n.id.lower() or n.id in aliases) for n in ast.walk(node))


def _assigns_pytestmark(stmt: ast.stmt) -> bool:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    return any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets)


def xfail_expected(marks: XfailMarks | None, test_id: str) -> bool:
    """Does the pristine test file expect `test_id` to XFAIL?"""
    names = test_id.split("[", 1)[0].split("::")[1:]
    if marks is None or not names:
        return False
    return marks.module or any(c in marks.classes for c in names[:-1]) or names[-1] in marks.functions
