"""What tracing an iteration's episodes costs (`tasks.traces`), against the stages that made them.

The episodes' MLflow traces (every evaluation episode and tracking.trace_train_episodes of each
training stage) are logged after a timed run, from its run directory, into a scratch SQLite store,
as a training run logs them. Per traced stage: the seconds the run waits while the traces are
built, the CPU seconds of their export (MLflow exports on a background thread), and both together
as a share of the wall time of the stages that made and graded those episodes, as if the export
had taken its CPU from them (on a machine whose cores the stages keep busy, an upper bound;
target <= 2%). Every trace is then searched for, so the time counts only traces that landed.
`bench.iteration` prints this table after its own.
"""

from __future__ import annotations

import time
from pathlib import Path


def tracing_rows(cfg, run_dir: str, manifests: dict, tmp: Path) -> list[dict]:
    """Per traced stage: the traces logged, the seconds the run waits while they are built, the
    CPU seconds of their export (MLflow's background thread), and both together as a share of the
    wall time of the stages that made and graded those episodes (as if the export had taken its
    CPU from them: on a machine whose cores the stage keeps busy, an upper bound)."""
    import dataclasses

    import mlflow

    from tasks import tracking
    from tasks.traces import STAGES, flush, log_step_traces
    from tasks.tracking_store import client, use_store
    cfg = dataclasses.replace(cfg, orchestration=dataclasses.replace(
        cfg.orchestration, run_root=str(tmp / "tracing")), tracking=dataclasses.replace(
        cfg.tracking, traces=True, log_artifacts=False, log_checkpoints=False))
    run_id = tracking.open_run(cfg, run_dir)
    mlc, rows = client(cfg), []
    use_store(cfg)
    experiment = mlc.get_run(run_id).info.experiment_id
    for flow, step in (("iteration", 0), ("evaluation", 1)):
        for stage, (made, graded) in STAGES.items():   # the stages that made and graded them
            ms = manifests.get(flow, {})
            if made not in ms:
                continue
            wall, cpu = time.perf_counter(), time.process_time()
            logged = log_step_traces(cfg, mlc, run_id, run_dir, step, (stage,)).get(stage, 0)
            build_s = time.perf_counter() - wall
            cpu = time.process_time()
            flush()
            export_cpu_s = time.process_time() - cpu
            found = mlflow.search_traces(locations=[experiment], run_id=run_id,
                                         filter_string=f"tags.stage = '{stage}'",
                                         return_type="list", include_spans=False,
                                         max_results=100000)   # each stage is traced once here
            if len(found) != logged:
                raise SystemExit(f"bench: {logged} {stage} traces logged, {len(found)} found")
            stage_s = sum(ms[n]["wall_s"] for n in (made, graded) if n in ms)
            rows.append({"stage": stage, "traces": logged, "build_s": build_s,
                         "export_cpu_s": export_cpu_s, "stage_wall_s": stage_s,
                         "share": (build_s + export_cpu_s) / stage_s if stage_s else 0.0})
    return rows


def print_tracing(rows: list[dict]) -> None:
    print(f"\n{'traces of':18} {'traces':>7} {'build_s':>8} {'export_cpu_s':>12} {'stage_s':>8} "
          f"{'share':>7}")
    for r in rows:
        print(f"{r['stage']:18} {r['traces']:7d} {r['build_s']:8.2f} {r['export_cpu_s']:12.2f} "
              f"{r['stage_wall_s']:8.1f} {100 * r['share']:6.1f}%   (target <= 2%)")
