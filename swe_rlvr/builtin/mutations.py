"""Generated instances: single-token bugs injected into the built-in projects, SWE-smith style.

The method follows SWE-smith's "procedural modification" strategy (Yang et al., 2025): take a
working repository, change one thing in one function, and keep the change only if the project's
own tests notice it. Here:

1. Enumerate candidates with `ast` inside the function and method bodies of every non-test source
   file of the clean upstream project, with the operators of `operators.py` (comparison, arithmetic
   and boolean swaps, changed constants, a dropped `not`; and for the grown suite reversed
   comparisons, swapped arguments, `min`/`max`, turned slices, bounds off by one,
   `break`/`continue`). Each edit replaces the token's exact text on one line; the rest of the
   file stays byte-identical.
2. Run the whole test suite of the mutated tree; keep the mutant if nothing errors at collection,
   1 to 8 tests fail and every other test passes. The failing tests are FAIL_TO_PASS; PASS_TO_PASS
   are the other tests of their files (SWE-bench semantics). A kept mutant is re-run under a
   second hash seed and dropped if its outcome changes, so grading is not flaky.
3. Two tiers (`Tier`). `easy`: the first four projects (`FIRST_PROJECTS`) with the first
   operators, at most 4 mutants per function. `generated`: every project with every operator, at
   most 6 per function (spread over its lines; all of them when there are no more), none that
   `easy` took and none whose bug report reads like one of `easy`'s. Only functions that
   `grep -n -A 25 "def NAME" FILE` shows whole enough are mutated: the name is defined once in
   its file and the bug lies at most 25 lines below the `def`. A mutant whose bug report quotes
   the fixed line is dropped.
4. Split by function, never by mutant (`split_of`): every function of a held-out project
   (`HOLDOUT_PROJECTS`) is `test`; elsewhere a sha256 of `project/file/function` sends about a
   quarter of the functions to `test`. So no function has mutants on both sides, in either tier,
   and no train instance touches a held-out project. Train and test share projects and files.

Simplifications against SWE-smith: no LM-written rewrites or combined bugs, only these operator
swaps; the issue text is a templated CI-failure report (`reports.py`), not an LM-written issue;
`test_patch` is empty because the failing tests already exist in the repository, as in
SWE-smith; string concatenations (`"a" + x`) and code inside f-strings are not mutated, because
those mutants only raise `TypeError` or are hard to place exactly.
"""

from __future__ import annotations

import ast
import hashlib
import io
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from swe_rlvr.builtin.operators import FIRST, GROWN, OPERATORS

MAX_PER_FUNCTION = 4
GENERATED_PER_FUNCTION = 6
MAX_LINES_BELOW_DEF = 25
MIN_FAILING, MAX_FAILING = 1, 8
TEST_SHARE_BUCKETS = 4  # 1 bucket of 4 -> about 25% of the functions go to `test`
HOLDOUT_PROJECTS = ("datekit",)
"""Projects whose every generated instance is `test`: no train instance touches them."""
FIRST_PROJECTS = ("iniconf", "ledger", "semverkit", "texttable")
"""The projects of the first generation, whose mutants make the easy tier."""
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.JoinedStr)


@dataclass(frozen=True)
class Tier:
    """A tier of generated instances: ids `swe-rlvr__<project>-<prefix>NNN`, the operators whose
    mutants it takes and at most how many of them per function."""

    name: str
    prefix: str
    operators: tuple[str, ...]
    max_per_function: int
    whole_when_fewer: bool
    """`spread`'s choice for a function with fewer mutants than `max_per_function`."""


EASY = Tier("easy", "m", FIRST, MAX_PER_FUNCTION, whole_when_fewer=False)
GENERATED = Tier("generated", "g", FIRST + GROWN, GENERATED_PER_FUNCTION, whole_when_fewer=True)


def tiers_of(project: str) -> tuple[Tier, ...]:
    """A first-generation project's mutants go to `easy` first, and those it did not take to
    `generated`; every other project's go to `generated` only."""
    return (EASY, GENERATED) if project in FIRST_PROJECTS else (GENERATED,)


@dataclass(frozen=True, order=True)
class Mutation:
    """Replace `old` by `new` at columns [col, end_col) of 1-based `line` of `file`."""

    file: str
    line: int
    col: int
    end_col: int
    old: str
    new: str
    operator: str
    function: str
    qualname: str
    def_line: int

    def apply(self, source: str) -> str:
        """`source` with this one edit; every other byte unchanged."""
        lines = source.splitlines(keepends=True)
        text = lines[self.line - 1]
        if text[self.col:self.end_col] != self.old:
            raise ValueError(f"{self.file}:{self.line}: expected {self.old!r} at column "
                             f"{self.col}, found {text[self.col:self.end_col]!r}; the source "
                             f"changed.")
        lines[self.line - 1] = text[:self.col] + self.new + text[self.end_col:]
        return "".join(lines)


@dataclass(frozen=True)
class _Function:
    name: str
    qualname: str
    def_line: int


def candidates(source: str, file: str, operators: tuple[str, ...] = FIRST) -> list[Mutation]:
    """Every single-token mutation of `operators` inside the function bodies of `source`, sorted."""
    tree, tokens = ast.parse(source), _tokens(source)
    lines = source.splitlines(keepends=True)
    found = {m for func, node in _body_nodes(tree, "")
             for m in _mutations(node, func, file, tokens, lines, operators)}
    return sorted(found)


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type in (tokenize.OP, tokenize.NAME, tokenize.NUMBER)]


def _body_nodes(tree: ast.AST, prefix: str) -> Iterator[tuple[_Function, ast.AST]]:
    """(innermost function, node) for every node in a function body; defs nest, classes prefix."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            yield from _body_nodes(node, f"{prefix}{node.name}.")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = _Function(node.name, prefix + node.name, node.lineno)
            for stmt in node.body:
                yield from _walk(stmt, func)
            yield from _body_nodes(node, f"{prefix}{node.name}.")


def _walk(node: ast.AST, func: _Function) -> Iterator[tuple[_Function, ast.AST]]:
    """`node` and its descendants, not entering nested defs, classes or f-strings."""
    if isinstance(node, _SCOPES):
        return
    yield func, node
    for child in ast.iter_child_nodes(node):
        yield from _walk(child, func)


def _mutations(node: ast.AST, func: _Function, file: str, tokens: list, lines: list[str],
               operators: tuple[str, ...]) -> list[Mutation]:
    """The edits of `operators` (`operators.OPERATORS`) on one node, made into `Mutation`s."""
    return [m for name in operators for edit in OPERATORS[name](node, tokens, lines)
            if (m := _mutation((*edit, name), func, file, lines))]


def _mutation(edit: tuple, func: _Function, file: str, lines: list[str]) -> Mutation | None:
    (row, col), (end_row, end_col), old, new, kind = edit
    text = lines[row - 1][col:end_col] if row == end_row else ""
    if old is None:   # `not`: whatever text lies between the keyword and its operand
        old = text if text.startswith("not") and text[3:].strip() == "" else ""
    if not old or text != old:
        return None   # spans lines, or the source spells it unusually (`not  in`)
    return Mutation(file, row, col, end_col, old, new, kind, func.name, func.qualname,
                    func.def_line)


def greppable(mutations: list[Mutation], source: str) -> list[Mutation]:
    """Those whose function `grep -n -A 25 "def NAME"` finds once and shows down to the bug."""
    names = [n.name for n in ast.walk(ast.parse(source))
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return [m for m in mutations
            if names.count(m.function) == 1 and m.line - m.def_line <= MAX_LINES_BELOW_DEF]


def spread(mutations: list[Mutation], k: int = MAX_PER_FUNCTION,
           whole_when_fewer: bool = False) -> list[Mutation]:
    """At most `k` per function: sorted by position, then evenly spaced (first and last for 2).

    A function with fewer than `k` keeps indices round(i * (n - 1) / (k - 1)) for i < n, which
    skips some (1 of 2 and 2 of 3 for k = 4): the easy tier was built so and stays so.
    `whole_when_fewer` (the generated tier) keeps all of them instead."""
    chosen: list[Mutation] = []
    for function in sorted({(m.file, m.function) for m in mutations}):
        own = sorted(m for m in mutations if (m.file, m.function) == function)
        if whole_when_fewer and len(own) <= k:
            chosen += own
            continue
        picks = sorted({round(i * (len(own) - 1) / max(k - 1, 1)) for i in range(min(k, len(own)))})
        chosen += [own[i] for i in picks]
    return sorted(chosen)


def split_of(project: str, file: str, function: str) -> str:
    """`test` for every function of a `HOLDOUT_PROJECTS` project; elsewhere for about a quarter of
    the functions, by a stable hash of `project/file/function`."""
    if project in HOLDOUT_PROJECTS:
        return "test"
    digest = hashlib.sha256(f"{project}/{file}/{function}".encode()).hexdigest()
    return "test" if int(digest, 16) % TEST_SHARE_BUCKETS == 0 else "train"


def source_files(project_dir: Path) -> list[str]:
    """The project's non-test Python files, relative and sorted."""
    return sorted(str(p.relative_to(project_dir)) for p in project_dir.rglob("*.py")
                  if "tests" not in p.relative_to(project_dir).parts and p.name != "conftest.py")


def project_candidates(project_dir: Path, operators: tuple[str, ...] = FIRST) -> list[Mutation]:
    """The greppable candidates of `operators` in every source file of a project."""
    found: list[Mutation] = []
    for file in source_files(project_dir):
        source = (project_dir / file).read_text()
        found += greppable(candidates(source, file, operators), source)
    return found
