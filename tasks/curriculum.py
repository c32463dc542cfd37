"""The `curriculum` task: iteration k's instance history, from iteration k-1's (Nebius).

`iter_<k>/curriculum.parquet` holds every instance attempted so far with its unguided attempts,
successes and whether it is retired (`swe_rlvr.curriculum`); the `instances` task leaves the
retired ones out of iteration k's pool. Off (`algorithm.curriculum: false`) it writes nothing and
returns "".
"""

from __future__ import annotations

import logging

from swe_rlvr.artifacts import outcomes
from swe_rlvr.config import Config
from tasks import store
from tasks.stage import artifact, finished, iter_dir, stage_task

log = logging.getLogger(__name__)


@stage_task("curriculum")
def curriculum(run_dir: str, iteration: int, cfg: Config) -> str:
    """Write `iter_<k>/curriculum.parquet` (when the curriculum is on); returns its URL or ""."""
    algo = cfg.algorithm
    if not algo.curriculum:
        return ""
    inputs = {name: artifact(run_dir, iteration - 1, f"{name}.parquet")
              for name in ("curriculum", "rollouts", "validations")} if iteration > 0 else {}
    key, done = finished(run_dir, iteration, "curriculum", max_rate=algo.curriculum_max_rate,
                         min_tries=algo.curriculum_min_tries, **inputs)
    if done:
        return done
    from swe_rlvr.curriculum import accumulate, from_rows, to_rows

    def rows(name: str) -> list[dict]:
        url = inputs.get(name, "")
        return store.read_rows(url, name) if url and store.exists(url) else []

    history = accumulate(from_rows(rows("curriculum")), outcomes(rows("rollouts"), rows("validations")))
    out = to_rows(history, algo.curriculum_max_rate, algo.curriculum_min_tries)
    url = artifact(run_dir, iteration, "curriculum.parquet")
    with store.stage(iter_dir(run_dir, iteration), "curriculum", key) as st:
        retired = sum(bool(r["retired"]) for r in out)
        st.output("main", url, store.write_table(url, "curriculum", out), rows=len(out),
                  retired=retired)
    log.info("curriculum i%d: %d instances seen, %d retired", iteration, len(out), retired)
    return url
