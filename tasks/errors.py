"""Which failures a task retries: infrastructure ones, never a wrong config or a bad value.

A stage library signals a transient infrastructure problem (a sandbox that would not start, a
grading run that timed out, a lost connection) by raising an exception whose class is named
`InfraError` (wherever it is defined, so `sandbox`, `agent` and `trainer` need not import this
package) or one of Python's connection/timeout errors. Everything else, a `ConfigError`, a
`ValueError`, a missing file, is a bug or a bad input: retrying it would only repeat it.
"""

from __future__ import annotations

from typing import Any


class InfraError(RuntimeError):
    """A transient infrastructure failure: the stage may succeed when run again."""


_TRANSIENT = (ConnectionError, TimeoutError, InfraError)


def is_infra_error(exc: BaseException | None) -> bool:
    """True for InfraError (by class name anywhere in the MRO), connection and timeout errors."""
    if exc is None:
        return False
    if isinstance(exc, _TRANSIENT):
        return True
    return any(cls.__name__ == "InfraError" for cls in type(exc).__mro__)


def retry_on_infra(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect `retry_condition_fn`: continue to the retry policy only for infrastructure errors."""
    try:
        state.result(raise_on_failure=True)
    except Exception as exc:  # noqa: BLE001 - inspecting the failure is this function's job
        return is_infra_error(exc)
    return False
