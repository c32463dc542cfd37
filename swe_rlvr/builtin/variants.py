"""Hidden variant tests of the built-in suite: the fixed function's behaviour at other inputs.

A fix that only recognises the visible test (`if text == "abc" and width == 5: return "abc"`)
passes FAIL_TO_PASS and is no fix. No test run can tell it from one, unless it is also asked at
inputs it has never seen. So each built-in instance may carry *variant cases*: calls of a function
the gold patch changes, at inputs near those its own test suite uses, with the outcome the fixed
code gives. The grader plants them as a test file with a random name after the patch is applied
(`sandbox.variants`); they never reach the policy's sandbox, its prompt or its guidance. A patch
that resolves the visible tests and fails a variant is graded `tampered`.

How the cases are made (`python -m swe_rlvr.builtin.variant_build`, writing `variants.jsonl`):
1. *Harvest*: run each project's whole suite on the clean (fixed) tree with a profile hook that
   records the arguments of every call of a module-level function (`variant_probe`), where they
   are literals (`ast.literal_eval(repr(x)) == x`).
2. *Perturb* (`perturbed_calls`): change one argument at a time (`perturb_value`): ints by one
   and more, strings cut, reversed, upper-cased, lists and tuples reversed, cut, grown. Inputs
   the suite itself uses are dropped, so every case is an input no visible test shows.
3. *Outcomes*: call the fixed and the buggy tree's function at each input (a fresh process for
   each tree, 2 s and 1 GiB a call): the return value and the arguments after the call, or the
   exception's type name. Cases whose fixed outcome is not a literal, or differs between two
   calls, or where the buggy code hangs, are dropped.
4. *Select* (`select_cases`): only instances where some case *tells the bug apart* (the buggy
   outcome differs) get variants: up to `MAX_TELLING` such cases, returns before raises, and
   `MAX_OTHERS` that do not, in harvest order (deterministic).

An instance without a row here has no variants; its grade says so. That holds for a gold patch
that changes only methods (no instance is built to call them), functions that no test calls with
literal arguments, and bugs no nearby input reveals.

Simplifications: only module-level functions; an honest fix that differs from the gold patch at
a perturbed input (a different exception type on a degenerate input, say) is graded `tampered`
too, which is why returns are preferred and raises kept only where they tell the bug apart.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

VARIANTS_PATH = Path(__file__).parent / "variants.jsonl"
MAX_TELLING, MAX_OTHERS = 4, 2
MAX_CALLS_PER_FUNCTION = 40
"""Distinct harvested calls of one function that are perturbed (in harvest order)."""
MAX_REPR = 400
"""Longest argument or outcome text kept: the cases stay small and readable."""


@dataclass(frozen=True)
class Call:
    """A call of `module.function` with literal arguments, as their `repr` texts."""

    module: str
    function: str
    args: str
    """`repr` of the positional arguments' tuple."""
    kwargs: str = "{}"

    def key(self) -> tuple[str, str, str, str]:
        return (self.module, self.function, self.args, self.kwargs)


@dataclass(frozen=True)
class Case:
    """One variant: `call` must give `outcome` (`["ok", result repr, args-after repr]` or
    `["raises", exception type name]`)."""

    call: Call
    outcome: tuple[str, ...]

    def to_json(self) -> dict:
        return {"module": self.call.module, "function": self.call.function, "args": self.call.args,
                "kwargs": self.call.kwargs, "outcome": list(self.outcome)}

    @staticmethod
    def from_json(row: dict) -> Case:
        return Case(Call(row["module"], row["function"], row["args"], row["kwargs"]), tuple(row["outcome"]))


def is_literal(value: object) -> bool:
    """`repr(value)` reads back (with `ast.literal_eval`) as an equal value, and is short."""
    try:
        text = repr(value)
        if len(text) > MAX_REPR:
            return False
        back = ast.literal_eval(text)
        return type(back) is type(value) and back == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def perturb_value(value: object) -> list[object]:
    """Values near `value` of the same type (none for None and other types)."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1, 2 * value + 3]
    if isinstance(value, float):
        return [value * 1.5, value + 0.25, -value]
    if isinstance(value, str):
        return [value + (value[:1] or "a"), value[::-1], value[1:], value.upper(), value + " "]
    if isinstance(value, (list, tuple)):
        items = list(value)
        near = [items[::-1], items[:-1], items + items[:1]]
        first = perturb_value(items[0]) if items else []
        if first:
            near.append([first[0], *items[1:]])
        return [type(value)(v) for v in near]
    if isinstance(value, dict) and value:
        return [dict(list(value.items())[:-1])]
    return []


def perturbed_calls(call: Call) -> list[Call]:
    """`call` with one argument (positional or keyword) changed by `perturb_value`, in order."""
    args, kwargs = ast.literal_eval(call.args), ast.literal_eval(call.kwargs)
    out: list[Call] = []
    for i, value in enumerate(args):
        out += [Call(call.module, call.function, repr(args[:i] + (near,) + args[i + 1:]), call.kwargs)
                for near in perturb_value(value) if is_literal(near)]
    for name, value in kwargs.items():
        out += [Call(call.module, call.function, call.args, repr({**kwargs, name: near}))
                for near in perturb_value(value) if is_literal(near)]
    return [c for c in out if len(c.args) <= MAX_REPR and len(c.kwargs) <= MAX_REPR]


def candidates(harvested: list[Call]) -> list[Call]:
    """The perturbed calls of the first `MAX_CALLS_PER_FUNCTION` harvested calls of each function,
    in order, without repeats and without any call the suite itself made."""
    seen = {c.key() for c in harvested}
    per_function: dict[tuple[str, str], int] = {}
    out = []
    for call in harvested:
        fn = (call.module, call.function)
        per_function[fn] = per_function.get(fn, 0) + 1
        if per_function[fn] > MAX_CALLS_PER_FUNCTION:
            continue
        for near in perturbed_calls(call):
            if near.key() not in seen:
                seen.add(near.key())
                out.append(near)
    return out


def usable(outcome: tuple[str, ...] | None) -> bool:
    """An outcome a test can check: a literal return or a named exception."""
    return bool(outcome) and outcome[0] in ("ok", "raises")  # type: ignore[index]


def select_cases(calls: list[Call], fixed: list[tuple[str, ...] | None],
                 buggy: list[tuple[str, ...] | None]) -> list[Case]:
    """The variants of one instance (see the module docstring, step 4); [] when no case tells the
    fixed code from the buggy code. `fixed[i]` and `buggy[i]` are the outcomes of `calls[i]`
    (None: unusable; `("timeout",)`: the call did not finish)."""
    telling, others = [], []
    for call, good, bad in zip(calls, fixed, buggy):
        if not usable(good) or bad is None or bad == ("timeout",):
            continue
        assert good is not None
        if bad != good:
            telling.append(Case(call, good))
        elif good[0] == "ok":
            others.append(Case(call, good))
    if not telling:
        return []
    telling.sort(key=lambda c: c.outcome[0] != "ok")  # stable: returns first, harvest order kept
    return telling[:MAX_TELLING] + others[:MAX_OTHERS]


def patch_sha(patch: str) -> str:
    """The gold patch's identity: variants belong to one exact fix of one instance."""
    return hashlib.sha256(patch.encode()).hexdigest()[:16]


@cache
def _rows(path: Path = VARIANTS_PATH) -> dict[str, dict]:
    if not path.exists():
        return {}
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {row["instance_id"]: row for row in rows}


def variants_of(instance_id: str, gold_patch: str) -> list[Case]:
    """The shipped variant cases of a built-in instance whose gold patch is `gold_patch` ([] when
    it has none, or when the record's gold patch is not the one they were made for)."""
    row = _rows().get(instance_id)
    if row is None or row["patch_sha"] != patch_sha(gold_patch):
        return []
    return [Case.from_json(c) for c in row["cases"]]
