"""The `instances` task: load the configured source once per iteration into `instances.parquet`.

Iteration k of a training run takes the next `instances.limit` instances of the split (rotating
through it), so consecutive iterations see different instances and a rerun sees the same ones.
"""

from __future__ import annotations

from swe_rlvr.config import Config
from tasks import store
from tasks.stage import artifact, finished, iter_dir, stage_task


def select(instances: list, split: str, ids: tuple[str, ...], limit: int, offset: int) -> list:
    """The split's instances (or just `ids`), sorted by id, then `limit` of them from `offset`."""
    chosen = sorted((i for i in instances if not split or i.split == split),
                    key=lambda i: i.instance_id)
    if ids:
        wanted = set(ids)
        chosen = [i for i in chosen if i.instance_id in wanted]
    if not chosen:
        raise ValueError(f"No instances of split {split!r} in the configured source"
                         f"{' with the given ids' if ids else ''}; check instances.source, "
                         f"instances.train_split / eval.split and instances.ids.")
    if not limit or limit >= len(chosen):
        return chosen
    start = (offset * limit) % len(chosen)
    return (chosen + chosen)[start:start + limit]


def source_path(cfg: Config) -> str:
    """The source file whose content keys the cache ("" for the built-in suite)."""
    return "" if cfg.instances.source == "builtin" else cfg.instances.source


@stage_task("instances")
def instances(run_dir: str, iteration: int, cfg: Config, split: str, out: str = "instances",
              limit: int | None = None, rotate: bool = True) -> str:
    """Write the iteration's instances of `split` to `iter_<k>/<out>.parquet`; returns its URL.

    `rotate`: iteration k takes the k-th window of `limit` instances (training); otherwise
    always the first `limit` (evaluation, so every step is scored on the same instances).
    """
    limit = cfg.instances.limit if limit is None else limit
    offset = iteration if rotate else 0
    key, done = finished(run_dir, iteration, out, cfg=cfg.instances, split=split, limit=limit,
                         offset=offset, source_path=source_path(cfg))
    if done:
        return done
    from swe_rlvr.loaders import load_instances
    loaded = load_instances(cfg.instances.source, format=cfg.instances.format,
                            skip_invalid=cfg.instances.skip_invalid)
    chosen = select(loaded.instances, split, cfg.instances.ids, limit, offset)
    url = artifact(run_dir, iteration, f"{out}.parquet")
    with store.stage(iter_dir(run_dir, iteration), out, key) as st:
        sha = store.write_table(url, "instances", [i.to_row() for i in chosen])
        st.output("main", url, sha, rows=len(chosen), skipped=len(loaded.skipped))
    return url
