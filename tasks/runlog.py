"""The run's log: one line per stage that finished or was reused, said once, from its manifest.

`announce` writes `manifest_line` of a stage's manifest to the Prefect run log (`run_logger`), so
the UI shows the same facts the manifest records. `tasks.store` announces a stage when it writes
its manifest, and `tasks.stage` when it reuses one; this module sits below both.
"""

from __future__ import annotations

import logging

LOGGER = "tasks.stage"
"""The logger outside a Prefect run: the stages' own name, which their lines have always had."""


def run_logger() -> logging.Logger | logging.LoggerAdapter:
    """Prefect's logger of the current task or flow run (its lines show in the UI), else this
    `LOGGER` (a task called as `task.fn(...)`, a library call outside any flow)."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(LOGGER)


def manifest_line(manifest: dict) -> str:
    """One line of what a stage did: each output (its rows or sealed directory, where it lies),
    wall time and peak RSS, e.g. `rollouts: main 16 rows -> runs/a/iter_0/rollouts.parquet; ...`."""
    outputs = "; ".join(f"{name} {_size(out)}-> {out['url']}"
                        for name, out in manifest.get("outputs", {}).items())
    return (f"{manifest['stage']}: {outputs or 'no outputs'}; {manifest.get('wall_s', 0.0):.1f} s, "
            f"peak RSS {manifest.get('peak_rss_mb', 0.0):.0f} MB")


def _size(output: dict) -> str:
    return f"{output['rows']} rows " if "rows" in output else ""


def announce(manifest: dict, reused: bool = False) -> None:
    """Log `manifest_line` of a stage that just finished (or was reused from an earlier run)."""
    run_logger().info(("reused " if reused else "") + manifest_line(manifest))
