"""How the tests run is not the patch's to change: the test infrastructure a grade restores, and
the checks it plants in the pristine test files (the XFAIL marks they hold, and the canaries).

`sandbox.grading` calls these around its test run; its module docstring says what each rule is
for ("How the tests run is not the patch's to change", the `xfail` guard). Split out of it so that
the grader's steps and verdict read on their own.
"""

from __future__ import annotations

import ast
import configparser
import hashlib
import importlib.machinery
import random
import re
import secrets
import shlex
import sys
import tomllib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox import reference
from sandbox.base import Sandbox, SandboxError
from sandbox.logparse import FAILED, OK, PASSED, SKIPPED, JunitIndex, junit_key
from swe_rlvr.patches import patch_files

if TYPE_CHECKING:
    from sandbox.suite_run import SuiteRun
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
        if part.endswith((".dist-info", ".egg-info")):
            return "/".join(parts[:i + 1]), METADATA
    for folder in search_dirs:
        prefix = f"{folder}/" if folder else ""
        head, sep, _ = path[len(prefix):].partition("/") if path.startswith(prefix) else ("", "", "")
        if (head if sep else module_stem(head)) in SHADOWED:
            return prefix + head, SHADOWING
    return "", ""


def module_stem(filename: str) -> str:
    """"shlex.py" -> "shlex", "x.cpython-311-x86_64-linux-gnu.so" -> "x"; "" for a non-module."""
    for suffix in sorted(importlib.machinery.all_suffixes(), key=len, reverse=True):
        if filename.endswith(suffix):
            return filename[:-len(suffix)]
    return ""


def search_dirs(instance: Instance) -> tuple[str, ...]:
    """Where Python looks first when the tests run: the repo root (the cwd of `python -m pytest`),
    `src/` (the sandbox's PYTHONPATH), and the test files' directories (pytest's rootdir insertion)."""
    return tuple(dict.fromkeys(["", "src", *(f.rpartition("/")[0] for f in instance.test_files())]))


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
    its pytest sections, or None. Text that does not parse gives a fresh object (equal to nothing)."""
    if text is None:
        return None
    try:
        if name == "pyproject.toml":
            return tomllib.loads(text).get("tool", {}).get("pytest")
        parser = configparser.RawConfigParser(strict=False)
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # configparser's documented idiom
        parser.read_string(text)
        return {s: dict(parser.items(s)) for s in PYTEST_SECTIONS[name] if parser.has_section(s)} or None
    except Exception:  # noqa: BLE001 - unreadable configuration counts as changed
        return object()


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
    entries = {f: entry for f in touched if (entry := new_entry(f, search_dirs(instance)))[0]}
    present = at_base(sb, {entry for entry, _ in entries.values()})
    for f, (top, why) in entries.items():
        if top not in present or why == METADATA:
            resets.append((top if top not in present else f, why))
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
    return Checks(plant_canaries(sb, files, parsed, rng or _RNG), expected)


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


# --------------------------------------------------------------------------- canaries

STOPPING = ("-x", "--exitfirst", "--maxfail", "-k", "-m", "--lf", "--last-failed", "--sw", "--stepwise",
            "--stepwise-skip", "--deselect")
"""pytest options with which a failing canary could cut the run short, or canaries be deselected."""
SHORT_WITH_VALUE = "kmprcoWn"
CANARY_WORDS = (
    ("parse", "merge", "split", "render", "load", "format", "resolve", "count", "sort", "strip", "group"),
    ("keeps", "drops", "handles", "returns", "accepts", "preserves", "skips", "collects", "orders"),
    ("empty", "nested", "unicode", "trailing", "duplicate", "default", "mixed", "single", "quoted"),
    ("values", "items", "keys", "lines", "names", "entries", "fields", "parts", "tokens", "rows"))
_RNG = random.SystemRandom()


def canaries_blocked(instance: Instance, cfg: SandboxConfig) -> tuple[bool, str]:
    """(no canaries for this run, the note that says why where it is not the configuration's choice)."""
    if not (cfg.canaries and reference.is_pytest(instance)):
        return True, ""
    if instance.env.eval_script and cfg.backend == "docker":
        return True, "no canary tests: the eval script resets the test files itself"
    option = stopping_option(instance.env.test_cmd)
    if option:
        return True, f"no canary tests: the test command stops or selects tests ({option})"
    return False, ""


def stopping_option(test_cmd: str) -> str:
    """The first option of `STOPPING` among pytest's arguments in `test_cmd` ("" if none)."""
    words = shlex.split(test_cmd)
    start = next((i + 1 for i, w in enumerate(words) if w.rsplit("/", 1)[-1] in ("pytest", "py.test")), len(words))
    for word in words[start:]:
        if word.split("=", 1)[0] in STOPPING:
            return word
        if word.startswith("-") and not word.startswith("--"):
            for char in word[1:]:
                if char in "xkm":
                    return word
                if char in SHORT_WITH_VALUE:
                    break
    return ""


def canary_rng(instance: Instance, episode_id: str) -> random.Random:
    """The canaries' random source for grading one episode: seeded by the instance's gold and test
    patches (the answer the policy is looking for, so nothing it sees predicts the draw) and the
    episode id. The same episode graded again gets the same canaries, so a rerun or a resumed run
    writes the same logs; another episode gets others."""
    seed = "\0".join(("swe-rlvr canaries", instance.patch, instance.test_patch, episode_id))
    return random.Random(int.from_bytes(hashlib.sha256(seed.encode()).digest(), "big"))


def plant_canaries(sb: Sandbox, files: list[str], texts: dict[str, str], rng: random.Random) -> dict[str, str]:
    """Append a passing and a failing canary to each of `files`; {test id: expected status}."""
    canaries, script = {}, ["set -e"]
    for f in files:
        code = "\n"
        for expected in rng.sample([PASSED, FAILED], 2):
            name = canary_name(texts[f] + code, rng)
            code += canary_source(name, expected == PASSED, rng)
            canaries[f"{f}::{name}"] = expected
        end = f"EOF_{secrets.token_hex(8)}"
        script.append(f"cat >> {shlex.quote(f)} <<'{end}'\n{code}{end}")
    if canaries and sb.execute("\n".join(script), timeout=120).exit_code != 0:
        raise SandboxError(f"Appending canary tests to {', '.join(files)} failed; "
                           f"sandbox.canaries=false grades without them")
    return canaries


def canary_name(taken: str, rng: random.Random) -> str:
    """An ordinary-looking test name that `taken` (the file) does not contain."""
    while True:
        name = "test_" + "_".join(rng.choice(words) for words in CANARY_WORDS)
        if name not in taken:
            return name


def canary_source(name: str, passes: bool, rng: random.Random) -> str:
    """A small test on builtins with random values; the failing one fails on a plain assertion."""
    a, b, c = rng.sample(CANARY_WORDS[3], 3)
    kind = rng.randrange(3)
    if kind == 0:
        values = [rng.randint(1, 99) for _ in range(rng.randint(2, 5))]
        total = sum(values) + (0 if passes else rng.randint(1, 9))
        body = f"    values = {values}\n    assert sum(values) == {total}\n"
    elif kind == 1:
        order = [a, b, c] if passes else [a, c, b]
        body = f"    parts = {f'{a},{b},{c}'!r}.split(',')\n    assert parts == {order!r}\n"
    else:
        table = {k: rng.randint(0, 9) for k in (a, b, c)}
        body = f"    table = {table!r}\n    assert sorted(table) == {sorted(table, reverse=not passes)!r}\n"
    return f"\n\ndef {name}():\n{body}"


def canary_verdict(run: SuiteRun, parsed: dict[str, str], index: JunitIndex | None) -> str:
    """What the canaries say is wrong with the run ("" if nothing); see the module docstring."""
    complete = run.exit_code in (0, 1) and not run.timed_out
    keys = {junit_key(t) for t in run.canaries}
    problems = []
    for test_id, expected in run.canaries.items():
        file = test_id.split("::", 1)[0]
        others = [s for t, s in parsed.items() if t.startswith(f"{file}::") and t not in run.canaries]
        problems.append(_canary_problem(test_id, expected, [parsed[test_id]] if test_id in parsed else [],
                                        others, complete, "log"))
        if index is not None:
            module = junit_key(test_id)[0]
            others = [s for k, found in index.items() if k not in keys
                      and (k[0] == module or k[0].startswith(f"{module}.")) for s in found]
            problems.append(_canary_problem(test_id, expected, index.get(junit_key(test_id), []),
                                            others, complete, "junit report"))
    return "; ".join(p for p in problems if p)


def _canary_problem(test_id: str, expected: str, got: list[str], others: list[str], complete: bool,
                    source: str) -> str:
    must = "pass" if expected == PASSED else "fail"
    if not got:
        return (f"canary {test_id} (must {must}) is missing from the {source}, though other tests of "
                f"its file reported" if complete and others else "")
    wrong = [s for s in got if s != expected and not _explained(s, expected, others)]
    return f"canary {test_id} (must {must}) reported {wrong[0]} in the {source}" if wrong else ""


def _explained(status: str, expected: str, others: list[str]) -> bool:
    """A canary's unexpected status that the rest of its file shares is no sign of tampering: an
    autouse fixture erroring for every test, a skipped module. Passing the wrong way never is."""
    if status in OK:
        return False
    if status == SKIPPED and expected == FAILED:
        return all(s == SKIPPED for s in others)
    return status in others
