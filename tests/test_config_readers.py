"""Every setting has a reader: a config field that no code reads is a knob that does nothing.

For each leaf field of the config tree, the test looks through the project's Python sources (the
packages pyproject.toml installs, less `swe_rlvr/config*.py` and the built-in suite's sample
projects; tests and benchmarks do not count) for code that reads it. A read of `section.field` is:

- `<anything>.section.field`, e.g. `cfg.algorithm.curriculum`, or `getattr(<...>.section, "field")`;
- `x.field` where `x` holds the section: assigned from `<anything>.section` (`t = cfg.trainer`) or a
  parameter annotated with the section's class (`cfg: TrainerConfig`);
- `x.field` where `x` is named like a config (`cfg`, `self.cfg`, `agent_cfg`, `config`): for a field
  name that two sections share (`seed`, `device`, `lr`), only in a module that names the section's
  class; never for a field named like a section (`trainer.engine` vs the `engine` section);
- the dotted key `"section.field"` as a whole string (e.g. a lookup in `flatten(cfg)`).

A read counts only where it can run: at module level, or inside a top-level function or class whose
name something else refers to (a call, an import, an attribute, a "module:name" registry string or
an entry point in pyproject.toml or prefect.yaml), or a dunder like a module's `__getattr__`.
Simplifications: no type inference, and one level of liveness (a function that only dead code
calls still counts).
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import functools
import re
import tomllib
import typing
from pathlib import Path

from swe_rlvr.config import Config

ROOT = Path(__file__).resolve().parents[1]
NOT_SOURCES = ("swe_rlvr/config", "swe_rlvr/builtin/projects/")
ENTRY_FILES = ("pyproject.toml", "prefect.yaml")
CONFIG_NAME = re.compile(r"^(cfg|config)$|_(cfg|config)$")

ALLOWED: dict[str, str] = {
    "preset": "read by load_config itself (swe_rlvr/config.py), which applies the preset's values "
              "before the sections are built; code reads those fields, never the preset's name",
}
"""Fields read only generically, each with the reason: keep this list short."""


@dataclasses.dataclass(frozen=True)
class Leaf:
    section: str      # "" for a top-level field
    name: str
    cls_name: str     # the section's class, e.g. "TrainerConfig" ("Config" at the top)

    @property
    def key(self) -> str:
        return f"{self.section}.{self.name}" if self.section else self.name


def leaves() -> list[Leaf]:
    out = []
    for top in dataclasses.fields(Config):
        tp = typing.get_type_hints(Config)[top.name]
        if dataclasses.is_dataclass(tp):
            out += [Leaf(top.name, f.name, tp.__name__) for f in dataclasses.fields(tp)]
        else:
            out.append(Leaf("", top.name, "Config"))
    return out


def sources() -> dict[str, ast.Module]:
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]["include"]
    paths = {p for pattern in packages for p in ROOT.glob(pattern.rstrip("*") + "/**/*.py")}
    found = {}
    for path in sorted(paths):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(NOT_SOURCES):
            found[rel] = ast.parse(path.read_text(), rel)
    return found


# --------------------------------------------------------------------------- reads


@dataclasses.dataclass(frozen=True)
class Read:
    """One `<base>.attr` (or getattr) in a module: the names around it that decide what it reads."""

    attr: str
    base: str          # the base's last name: `cfg` in `self.cfg.x`, `trainer` in `cfg.trainer.x`
    path: str
    top: str           # the enclosing top-level def or class ("" at module level)


def _last_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _reads(path: str, tree: ast.Module) -> list[Read]:
    out = []
    for top in tree.body:
        owner = top.name if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef,
                                             ast.ClassDef)) else ""
        for node in ast.walk(top):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                out.append(Read(node.attr, _last_name(node.value), path, owner))
            elif (isinstance(node, ast.Call) and _last_name(node.func) == "getattr"
                  and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                  and isinstance(node.args[1].value, str)):
                out.append(Read(node.args[1].value, _last_name(node.args[0]), path, owner))
    return out


def _aliases(tree: ast.Module, sections: dict[str, str]) -> dict[str, set[str]]:
    """section -> names that hold it in this module: `t = cfg.trainer`, `cfg: TrainerConfig`."""
    out: dict[str, set[str]] = collections.defaultdict(set)
    by_class = {cls: section for section, cls in sections.items()}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _last_name(node.value) in sections \
                and isinstance(node.value, ast.Attribute):
            out[node.value.attr].update(_last_name(t) for t in node.targets)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            annotation = ast.unparse(node.annotation)
            for cls, section in by_class.items():
                if re.search(rf"\b{cls}\b", annotation):
                    out[section].add(node.arg)
    return out


# --------------------------------------------------------------------------- liveness


def _references(trees: dict[str, ast.Module]) -> collections.Counter:
    """How often each name is referred to: names, attributes, imports and "module:name" strings."""
    refs: collections.Counter = collections.Counter()
    for tree in trees.values():
        for node in ast.walk(tree):
            refs.update(_referred(node))
    for name in ENTRY_FILES:
        refs.update(re.findall(r"[\w./]+:(\w+)", (ROOT / name).read_text()))
    return refs


def _referred(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.alias):
        return [node.name.rpartition(".")[2]]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.findall(r"^[\w.]+:(\w+)$", node.value)
    return []


def _live_tops(trees: dict[str, ast.Module]) -> set[tuple[str, str]]:
    """(path, name) of every top-level def or class that something outside it refers to."""
    refs = _references(trees)
    live = set()
    for path, tree in trees.items():
        for top in tree.body:
            if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inside = sum(n == top.name for node in ast.walk(top) for n in _referred(node))
                if refs[top.name] > inside or _is_dunder(top.name):  # Python calls a dunder
                    live.add((path, top.name))
    return live


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


# --------------------------------------------------------------------------- the finder


@functools.cache
def find_readers() -> dict[str, list[str]]:
    """Each leaf's key -> the modules that read it (live reads only)."""
    trees = sources()
    all_leaves = leaves()
    sections = {leaf.section: leaf.cls_name for leaf in all_leaves if leaf.section}
    shared = {n for n, count in collections.Counter(leaf.name for leaf in all_leaves).items()
              if count > 1}
    live = _live_tops(trees)
    strings = {node.value for tree in trees.values() for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    readers: dict[str, list[str]] = {leaf.key: [] for leaf in all_leaves}
    for path, tree in trees.items():
        aliases = _aliases(tree, sections)
        text = ast.unparse(tree)
        for read in _reads(path, tree):
            if read.top and (path, read.top) not in live:
                continue
            for leaf in all_leaves:
                if leaf.name == read.attr and _reads_leaf(read, leaf, aliases, text, sections,
                                                          shared):
                    readers[leaf.key].append(path)
    for leaf in all_leaves:
        if leaf.key in strings:
            readers[leaf.key].append("(dotted key string)")
    return {key: sorted(set(paths)) for key, paths in readers.items()}


def _reads_leaf(read: Read, leaf: Leaf, aliases: dict[str, set[str]], text: str,
                sections: dict[str, str], shared: set[str]) -> bool:
    if leaf.section and (read.base == leaf.section or read.base in aliases[leaf.section]):
        return True
    if not CONFIG_NAME.search(read.base) or leaf.name in sections:
        return False
    return leaf.name not in shared or re.search(rf"\b{leaf.cls_name}\b", text) is not None


def test_every_setting_has_a_reader():
    """A field nobody reads does nothing when a user sets it: wire it up, or remove it."""
    unread = [key for key, paths in find_readers().items() if not paths and key not in ALLOWED]
    assert unread == [], f"config fields with no reader outside swe_rlvr/config*.py: {unread}"


def test_the_allow_list_names_real_fields_that_really_have_no_reader():
    readers = find_readers()
    assert set(ALLOWED) <= set(readers)
    assert [key for key in ALLOWED if readers[key]] == [], "drop these from ALLOWED"


def test_the_finder_sees_reads_through_a_section_an_alias_and_a_section_object():
    readers = find_readers()
    assert "trainer/loops.py" in readers["guidance.mode"]          # cfg.guidance.mode
    assert "trainer/loops.py" in readers["trainer.rft_lr"]         # t = cfg.trainer; t.rft_lr
    assert "agent/loop.py" in readers["agent.wall_time_s"]         # self.cfg.wall_time_s
    assert "trainer/engine_torch.py" in readers["trainer.device"]  # cfg: TrainerConfig
    assert "trainer/engine_torch.py" not in readers["engine.device"]


def test_a_read_that_nothing_can_reach_does_not_count():
    """`dead` reads a field but nothing calls it, the way an unwired helper would."""
    tree = ast.parse("def dead(cfg):\n    return cfg.trainer.num_gpus\n\n"
                     "def live(cfg):\n    return cfg.trainer.lr\n\nlive(None)\n")
    assert _live_tops({"m.py": tree}) == {("m.py", "live")}
