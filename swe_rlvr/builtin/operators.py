"""Mutation operators: each a pure function from one `ast` node to the single-token edits it allows.

An operator takes the node, the source's OP/NAME/NUMBER tokens and its lines, and returns
`(start, end, old, new)` edits: `start` and `end` are tokenize's (line, column) positions, `old`
is the exact text between them (None: whatever `not` spelling lies there, see `drop_not`) and
`new` its replacement. `mutations.candidates` turns the edits into `Mutation`s and drops any whose
text spans lines or is spelled unusually.

The first generation (`FIRST`, the easy tier): comparison boundaries (`<`/`<=`, `==`/`!=`,
`in`/`not in`, `is`/`is not`), arithmetic (`+`/`-`, `*` -> `//`, `//`/`/`, `+=`/`-=`),
`and`/`or`, `True`/`False` and small integers k -> k+1, k-1 (0 <= k <= 3), and a dropped `not`.
The grown suite adds (`GROWN`): a reversed comparison (`<` -> `>`), swapped call arguments
(`f(a, b)` -> `f(b, a)`), `min`/`max` and `any`/`all`, a one-sided slice turned around
(`s[:n]` -> `s[n:]`), a slice bound or `range` stop off by one (`s[:n]` -> `s[:n + 1]`), and
`break`/`continue`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

Edit = tuple  # (start, end, old, new)

_CMP = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
        ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.In: ("in", "not in"),
        ast.NotIn: ("not in", "in"), ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is")}
_FLIP = {ast.Lt: ("<", ">"), ast.LtE: ("<=", ">="), ast.Gt: (">", "<"), ast.GtE: (">=", "<=")}
_ARITH = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "//"),
          ast.FloorDiv: ("//", "/"), ast.Div: ("/", "//")}
_AUG = {ast.Add: ("+=", "-="), ast.Sub: ("-=", "+=")}
_BOOL = {ast.And: ("and", "or"), ast.Or: ("or", "and")}
_TWINS = {"min": "max", "max": "min", "any": "all", "all": "any"}


def compare(node: ast.AST, tokens: list, lines: list[str]) -> list[Edit]:
    """`a < b` -> `a <= b` and the other boundary swaps, one per operator of a chain."""
    if not isinstance(node, ast.Compare):
        return []
    return [(*_gap(left, right, tokens, lines), *_CMP[type(op)])
            for left, op, right in zip([node.left, *node.comparators], node.ops, node.comparators)]


def flip(node: ast.AST, tokens: list, lines: list[str]) -> list[Edit]:
    """`a < b` -> `a > b`: the comparison reversed, not just its boundary moved."""
    if not isinstance(node, ast.Compare):
        return []
    return [(*_gap(left, right, tokens, lines), *_FLIP[type(op)])
            for left, op, right in zip([node.left, *node.comparators], node.ops, node.comparators)
            if type(op) in _FLIP]


def arith(node: ast.AST, tokens: list, lines: list[str]) -> list[Edit]:
    """`a + b` -> `a - b` (not on string concatenations) and `x += 1` -> `x -= 1`."""
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH and not _stringy(node):
        return [(*_gap(node.left, node.right, tokens, lines), *_ARITH[type(node.op)])]
    if isinstance(node, ast.AugAssign) and type(node.op) in _AUG:
        return [(*_gap(node.target, node.value, tokens, lines), *_AUG[type(node.op)])]
    return []


def boolean(node: ast.AST, tokens: list, lines: list[str]) -> list[Edit]:
    """`a and b` -> `a or b`, once between each pair of operands."""
    if not isinstance(node, ast.BoolOp):
        return []
    old, new = _BOOL[type(node.op)]
    return [(*_gap(a, b, tokens, lines), old, new) for a, b in zip(node.values, node.values[1:])]


def drop_not(node: ast.AST, tokens: list, lines: list[str]) -> list[Edit]:
    """`not x` -> `x`: the keyword and the space after it go."""
    if not (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        return []
    start = _pos(lines, node.lineno, node.col_offset)
    after = next(t for t in tokens if t.start > start)
    return [(start, after.start, None, "")]


def constant(node: ast.AST, tokens: list, lines: list[str]) -> list[Edit]:
    """`True` <-> `False`; a small integer k (0..3) -> k+1 and k-1 (no `- -1`)."""
    if not isinstance(node, ast.Constant):
        return []
    start = _pos(lines, node.lineno, node.col_offset)
    end = _pos(lines, node.end_lineno, node.end_col_offset)
    if node.value is True or node.value is False:
        return [(start, end, str(node.value), str(not node.value))]
    if type(node.value) is not int or not 0 <= node.value <= 3:
        return []
    before = [t for t in tokens if t.end <= start][-1:]
    signed = bool(before) and before[0].string in ("-", "+")
    news = [node.value + 1] + ([node.value - 1] if node.value > 0 or not signed else [])
    return [(start, end, str(node.value), str(n)) for n in news]


def swap_arguments(node: ast.AST, tokens: list, lines: list[str]) -> list[Edit]:
    """`f(a, b)` -> `f(b, a)` for a call of exactly two positional arguments on one line."""
    if not (isinstance(node, ast.Call) and len(node.args) == 2 and not node.keywords):
        return []
    first, second = node.args
    if isinstance(first, ast.Starred) or isinstance(second, ast.Starred):
        return []
    if first.lineno != second.end_lineno:
        return []
    (row, a), (_, a_end) = _span(first, lines)
    (_, b), (_, b_end) = _span(second, lines)
    text = lines[row - 1]
    left, right = text[a:a_end], text[b:b_end]
    if left == right:
        return []
    return [((row, a), (row, b_end), text[a:b_end], right + text[a_end:b] + left)]


def twin_builtin(node: ast.AST, tokens: list, lines: list[str]) -> list[Edit]:
    """`min(...)` <-> `max(...)` and `any(...)` <-> `all(...)`."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in _TWINS):
        return []
    start, end = _span(node.func, lines)
    return [(start, end, node.func.id, _TWINS[node.func.id])]


def turn_slice(node: ast.AST, tokens: list, lines: list[str]) -> list[Edit]:
    """`s[:n]` -> `s[n:]` and `s[n:]` -> `s[:n]`: a one-sided slice keeps the other side."""
    if not (isinstance(node, ast.Slice) and node.step is None
            and (node.lower is None) != (node.upper is None) and node.lineno == node.end_lineno):
        return []
    start, end = _span(node, lines)
    text = lines[start[0] - 1][start[1]:end[1]]
    if text.count(":") != 1:
        return []
    new = text[1:] + ":" if text.startswith(":") else ":" + text[:-1]
    return [(start, end, text, new)]


def off_by_one(node: ast.AST, tokens: list, lines: list[str]) -> list[Edit]:
    """`s[:n]` -> `s[:n + 1]` and `s[:n - 1]`; `range(len(x))` -> `range(len(x) + 1)` and
    `range(len(x) - 1)`: a slice bound or range stop that is a name, attribute or call, moved by
    one (a literal bound is `constant`'s)."""
    if isinstance(node, ast.Slice):
        bounds = [b for b in (node.lower, node.upper) if b is not None]
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id == "range" and 1 <= len(node.args) <= 2 and not node.keywords):
        bounds = [node.args[-1]]
    else:
        return []
    edits = []
    for bound in bounds:
        simple = isinstance(bound, (ast.Name, ast.Attribute, ast.Call))
        if simple and bound.lineno == bound.end_lineno:
            start, end = _span(bound, lines)
            text = lines[start[0] - 1][start[1]:end[1]]
            edits += [(start, end, text, f"{text} + 1"), (start, end, text, f"{text} - 1")]
    return edits


def loop_jump(node: ast.AST, tokens: list, lines: list[str]) -> list[Edit]:
    """`break` <-> `continue`."""
    if isinstance(node, ast.Break):
        return [(*_span(node, lines), "break", "continue")]
    if isinstance(node, ast.Continue):
        return [(*_span(node, lines), "continue", "break")]
    return []


OPERATORS: dict[str, Callable[[ast.AST, list, list[str]], list[Edit]]] = {
    "cmp": compare, "arith": arith, "bool": boolean, "const": constant, "not": drop_not,
    "flip": flip, "swap": swap_arguments, "twin": twin_builtin, "slice": turn_slice,
    "bound": off_by_one, "loop": loop_jump}
"""Every operator by the name instances record in `meta.operator`."""
FIRST = ("cmp", "arith", "bool", "const", "not")
"""The first generation's operators: the easy tier's mutants."""
GROWN = ("flip", "swap", "twin", "slice", "bound", "loop")
"""The operators the grown suite adds."""


def _gap(left: ast.expr, right: ast.expr, tokens: list, lines: list[str]) -> tuple:
    """(start, end) of the operator tokens between two operands, parentheses skipped."""
    lo = _pos(lines, left.end_lineno, left.end_col_offset)
    hi = _pos(lines, right.lineno, right.col_offset)
    inner = [t for t in tokens if lo <= t.start and t.end <= hi and t.string not in "()"]
    return (inner[0].start, inner[-1].end) if inner else (lo, lo)


def _span(node: ast.expr | ast.stmt, lines: list[str]) -> tuple:
    """(start, end) of a node as tokenize positions."""
    return (_pos(lines, node.lineno, node.col_offset),
            _pos(lines, node.end_lineno, node.end_col_offset))


def _pos(lines: list[str], lineno: int | None, byte_col: int | None) -> tuple[int, int]:
    """ast's (line, UTF-8 byte offset) as tokenize's (line, character offset)."""
    if lineno is None or byte_col is None:  # typeshed's end positions are optional; parsed ones are set
        raise ValueError("an ast node without a source position")
    return lineno, len(lines[lineno - 1].encode()[:byte_col].decode())


def _stringy(node: ast.BinOp) -> bool:
    """`"a" + x` and f-string concatenations: swapping the `+` only raises TypeError."""
    def text(n: ast.AST) -> bool:
        return isinstance(n, ast.JoinedStr) or isinstance(n, ast.Constant) and type(n.value) is str
    return text(node.left) or text(node.right)
