"""The child processes of `variant_build`, run inside a built-in project's tree (cwd):

- `python -m swe_rlvr.builtin.variant_probe harvest OUT [pytest args...]`: run the project's tests
  with a profile hook and write the literal-argument calls of its module-level functions to OUT
  (a JSON list of `[module, function, args repr, kwargs repr]`, first call first).
- `python -m swe_rlvr.builtin.variant_probe eval IN OUT`: call each `[module, function, args,
  kwargs]` of IN twice, each call under a 2 s timer and a 1 GiB address-space cap, and write each
  call's outcome to OUT: `["ok", result repr, args-after repr]`, `["raises", type name]`,
  `["timeout"]`, or null (not a literal, another kind of exit, or two calls that disagree).

Standard library and pytest only; nothing of swe_rlvr is imported here but `variants.is_literal`.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import inspect
import io
import json
import os
import resource
import signal
import sys
from types import FrameType

from swe_rlvr.builtin.variants import is_literal

CALL_SECONDS = 2.0
ADDRESS_SPACE = 1 << 30


def harvest(out: str, pytest_args: list[str]) -> int:
    import pytest

    root = os.getcwd() + os.sep
    calls: dict[tuple[str, str, str, str], None] = {}

    def hook(frame: FrameType, event: str, arg: object) -> None:
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(root) or code.co_qualname != code.co_name:
            return
        if f"{os.sep}tests{os.sep}" in code.co_filename[len(root) - 1:]:
            return
        fn = frame.f_globals.get(code.co_name)
        if getattr(fn, "__code__", None) is not code:
            return
        found = bound_call(fn, frame.f_locals)
        if found is not None:
            calls.setdefault((frame.f_globals["__name__"], code.co_name, *found), None)

    sys.setprofile(hook)
    try:
        code = pytest.main(["-q", "-p", "no:cacheprovider", *pytest_args])
    finally:
        sys.setprofile(None)
    with open(out, "w") as fh:
        json.dump([list(k) for k in calls], fh)
    return int(code)


@functools.cache
def _signature(fn: object) -> inspect.Signature:
    """Once per function: the profile hook sees every call of the suite."""
    return inspect.signature(fn)  # type: ignore[arg-type]


def bound_call(fn: object, values: dict) -> tuple[str, str] | None:
    """(args repr, kwargs repr) that call `fn` with the parameter `values` it started with; None if
    one is not a literal."""
    args: list = []
    kwargs: dict = {}
    for name, param in _signature(fn).parameters.items():
        value = values.get(name)
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            args.append(value)
        elif param.kind == param.VAR_POSITIONAL:
            args.extend(value or ())
        elif param.kind == param.KEYWORD_ONLY:
            kwargs[name] = value
        else:
            kwargs.update(value or {})
    if not (is_literal(tuple(args)) and is_literal(kwargs)):
        return None
    return repr(tuple(args)), repr(kwargs)


class _Timeout(BaseException):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout


def outcome(module: str, function: str, args_text: str, kwargs_text: str) -> list | None:
    args, kwargs = ast.literal_eval(args_text), ast.literal_eval(kwargs_text)
    try:
        fn = getattr(importlib.import_module(module), function)
    except Exception:  # noqa: BLE001 - the buggy tree may not import: no outcome
        return None
    signal.setitimer(signal.ITIMER_REAL, CALL_SECONDS)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            result = fn(*args, **kwargs)
    except _Timeout:
        return ["timeout"]
    except (RecursionError, MemoryError):
        return None
    except Exception as exc:  # noqa: BLE001 - the outcome is which exception
        return ["raises", type(exc).__name__]
    except BaseException:  # noqa: BLE001 - SystemExit and the like: no outcome a test can check
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if not (is_literal(result) and is_literal(args)):
        return None
    return ["ok", repr(result), repr(args)]


def evaluate(path_in: str, path_out: str) -> int:
    with open(path_in) as fh:
        jobs = json.load(fh)
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    signal.signal(signal.SIGALRM, _alarm)
    sys.setrecursionlimit(3000)
    results = []
    for job in jobs:
        first, second = outcome(*job), outcome(*job)
        results.append(first if first == second else None)
    with open(path_out, "w") as fh:
        json.dump(results, fh)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    if sys.argv[1] == "harvest":
        sys.exit(harvest(sys.argv[2], sys.argv[3:]))
    sys.exit(evaluate(sys.argv[2], sys.argv[3]))
