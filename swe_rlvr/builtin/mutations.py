"""Generated easy instances: single-token bugs injected into the built-in projects, SWE-smith style.

The method follows SWE-smith's "procedural modification" strategy (Yang et al., 2025): take a
working repository, change one thing in one function, and keep the change only if the project's
own tests notice it. Here:

1. Enumerate candidates with `ast` inside the function and method bodies of every non-test source
   file of the clean upstream project: comparison swaps (`<`/`<=`, `>`/`>=`, `==`/`!=`,
   `in`/`not in`, `is`/`is not`), arithmetic swaps (`+`/`-`, `*` -> `//`, `//`/`/`, and `+=`/`-=`),
   `and`/`or`, `True`/`False`, small integers k -> k+1 and k -> k-1 (0 <= k <= 3), and dropping a
   unary `not`. Each edit replaces the token's exact text on one line; the rest of the file stays
   byte-identical.
2. Run the whole test suite of the mutated tree; keep the mutant if nothing errors at collection,
   1 to 8 tests fail and every other test passes. The failing tests are FAIL_TO_PASS; PASS_TO_PASS
   are the other tests of their files (SWE-bench semantics). A kept mutant is re-run under a
   second hash seed and dropped if its outcome changes, so grading is not flaky.
3. Keep at most 4 mutants per function, spread over its lines, and only in functions that
   `grep -n -A 25 "def NAME" FILE` shows whole enough: the name is defined once in its file and
   the bug lies at most 25 lines below the `def`.
4. Split by function, never by mutant: a sha256 of `project/file/function` sends about a quarter
   of the functions to `test`, so no function has mutants on both sides.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

KINDS = ("cmp", "arith", "bool", "const", "not")
MAX_PER_FUNCTION = 4
MAX_LINES_BELOW_DEF = 25
MIN_FAILING, MAX_FAILING = 1, 8
TEST_SHARE_BUCKETS = 4  # 1 bucket of 4 -> about 25% of the functions go to `test`

_CMP = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
        ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.In: ("in", "not in"),
        ast.NotIn: ("not in", "in"), ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is")}
_ARITH = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "//"),
          ast.FloorDiv: ("//", "/"), ast.Div: ("/", "//")}
_AUG = {ast.Add: ("+=", "-="), ast.Sub: ("-=", "+=")}
_BOOL = {ast.And: ("and", "or"), ast.Or: ("or", "and")}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.JoinedStr)


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


def candidates(source: str, file: str) -> list[Mutation]:
    """Every single-token mutation inside the function bodies of `source`, sorted."""
    tree, tokens = ast.parse(source), _tokens(source)
    lines = source.splitlines(keepends=True)
    found = {m for func, node in _body_nodes(tree, "")
             for m in _mutations(node, func, file, tokens, lines)}
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


def _mutations(node: ast.AST, func: _Function, file: str, tokens: list,
               lines: list[str]) -> list[Mutation]:
    """The mutations of one node: (token span, old, new, kind) made into `Mutation`s."""
    edits: list[tuple[tuple, tuple, str, str, str]] = []
    if isinstance(node, ast.Compare):
        for left, op, right in zip([node.left, *node.comparators], node.ops, node.comparators):
            old, new = _CMP[type(op)]
            edits += [(*_gap(left, right, tokens, lines), old, new, "cmp")]
    elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH and not _stringy(node):
        edits += [(*_gap(node.left, node.right, tokens, lines), *_ARITH[type(node.op)], "arith")]
    elif isinstance(node, ast.AugAssign) and type(node.op) in _AUG:
        edits += [(*_gap(node.target, node.value, tokens, lines), *_AUG[type(node.op)], "arith")]
    elif isinstance(node, ast.BoolOp):
        old, new = _BOOL[type(node.op)]
        edits += [(*_gap(a, b, tokens, lines), old, new, "bool")
                  for a, b in zip(node.values, node.values[1:])]
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        start = _pos(lines, node.lineno, node.col_offset)
        after = next(t for t in tokens if t.start > start)
        edits += [(start, after.start, None, "", "not")]
    elif isinstance(node, ast.Constant):
        edits += _constant_edits(node, tokens, lines)
    return [m for edit in edits if (m := _mutation(edit, func, file, lines))]


def _constant_edits(node: ast.Constant, tokens: list, lines: list[str]) -> list[tuple]:
    start = _pos(lines, node.lineno, node.col_offset)
    end = _pos(lines, node.end_lineno, node.end_col_offset)
    if node.value is True or node.value is False:
        return [(start, end, str(node.value), str(not node.value), "const")]
    if type(node.value) is not int or not 0 <= node.value <= 3:
        return []
    before = [t for t in tokens if t.end <= start][-1:]
    signed = bool(before) and before[0].string in ("-", "+")   # no `- -1`
    news = [node.value + 1] + ([node.value - 1] if node.value > 0 or not signed else [])
    return [(start, end, str(node.value), str(n), "const") for n in news]


def _gap(left: ast.AST, right: ast.AST, tokens: list, lines: list[str]) -> tuple:
    """(start, end) of the operator tokens between two operands, parentheses skipped."""
    lo = _pos(lines, left.end_lineno, left.end_col_offset)
    hi = _pos(lines, right.lineno, right.col_offset)
    inner = [t for t in tokens if lo <= t.start and t.end <= hi and t.string not in "()"]
    return (inner[0].start, inner[-1].end) if inner else (lo, lo)


def _mutation(edit: tuple, func: _Function, file: str, lines: list[str]) -> Mutation | None:
    (row, col), (end_row, end_col), old, new, kind = edit
    text = lines[row - 1][col:end_col] if row == end_row else ""
    if old is None:   # `not`: whatever text lies between the keyword and its operand
        old = text if text.startswith("not") and text[3:].strip() == "" else ""
    if not old or text != old:
        return None   # spans lines, or the source spells it unusually (`not  in`)
    return Mutation(file, row, col, end_col, old, new, kind, func.name, func.qualname,
                    func.def_line)


def _pos(lines: list[str], lineno: int, byte_col: int) -> tuple[int, int]:
    """ast's (line, UTF-8 byte offset) as tokenize's (line, character offset)."""
    return lineno, len(lines[lineno - 1].encode()[:byte_col].decode())


def _stringy(node: ast.BinOp) -> bool:
    """`"a" + x` and f-string concatenations: swapping the `+` only raises TypeError."""
    def text(n: ast.AST) -> bool:
        return isinstance(n, ast.JoinedStr) or isinstance(n, ast.Constant) and type(n.value) is str
    return text(node.left) or text(node.right)


def greppable(mutations: list[Mutation], source: str) -> list[Mutation]:
    """Those whose function `grep -n -A 25 "def NAME"` finds once and shows down to the bug."""
    names = [n.name for n in ast.walk(ast.parse(source))
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return [m for m in mutations
            if names.count(m.function) == 1 and m.line - m.def_line <= MAX_LINES_BELOW_DEF]


def spread(mutations: list[Mutation], k: int = MAX_PER_FUNCTION) -> list[Mutation]:
    """At most `k` per function: sorted by position, then evenly spaced (first and last for 2)."""
    chosen: list[Mutation] = []
    for function in sorted({(m.file, m.function) for m in mutations}):
        own = sorted(m for m in mutations if (m.file, m.function) == function)
        picks = sorted({round(i * (len(own) - 1) / max(k - 1, 1)) for i in range(min(k, len(own)))})
        chosen += [own[i] for i in picks]
    return sorted(chosen)


def split_of(project: str, file: str, function: str) -> str:
    """`test` for about a quarter of the functions, by a stable hash of `project/file/function`."""
    digest = hashlib.sha256(f"{project}/{file}/{function}".encode()).hexdigest()
    return "test" if int(digest, 16) % TEST_SHARE_BUCKETS == 0 else "train"


def source_files(project_dir: Path) -> list[str]:
    """The project's non-test Python files, relative and sorted."""
    return sorted(str(p.relative_to(project_dir)) for p in project_dir.rglob("*.py")
                  if "tests" not in p.relative_to(project_dir).parts and p.name != "conftest.py")


def project_candidates(project_dir: Path) -> list[Mutation]:
    """The greppable candidates of every source file of a project."""
    found: list[Mutation] = []
    for file in source_files(project_dir):
        source = (project_dir / file).read_text()
        found += greppable(candidates(source, file), source)
    return found
