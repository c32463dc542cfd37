"""The `instances` task: load the configured source once per iteration into `instances.parquet`.

Iteration k of a training run takes the next `instances.limit` instances of the split (rotating
through it), so consecutive iterations see different instances and a rerun sees the same ones.
The split is ordered by a stable hash of the instance id, not by the id itself, so every window
(and an evaluation's first `eval.limit`) mixes repositories and tiers instead of taking one
repository's instances first. With `orchestration.expert_share` < 1 the train split has two
parts: the first share in that order for the expert warm-up (`part="expert"`), the rest for RFT
and RL (`part="rl"`), so RL never trains on an instance the warm-up demonstrated.
"""

from __future__ import annotations

import hashlib

from swe_rlvr.config import Config, ConfigError
from swe_rlvr.instances import ALL, in_split, sharing_problem, split_problem
from tasks import store
from tasks.stage import artifact, finished, iter_dir, stage_task


def stable_order(instance_id: str) -> str:
    """Sort key: sha256 of the id (the same on every machine and run)."""
    return hashlib.sha256(instance_id.encode()).hexdigest()


PARTS = ("all", "expert", "rl")
EVAL_OUT = "eval_instances"
"""The artifact name of an evaluation's instances; every other `out` feeds training."""


def select(instances: list, split: str, ids: tuple[str, ...], limit: int, offset: int,
           tiers: tuple[str, ...] = (), part: str = "all", expert_share: float = 1.0,
           retired: frozenset[str] = frozenset(), train_ids: tuple[str, ...] = ()) -> list:
    """`window(pool(...), limit, offset)`."""
    return window(pool(instances, split, ids, tiers, part, expert_share, retired, train_ids),
                  limit, offset)


def pool(instances: list, split: str, ids: tuple[str, ...] = (), tiers: tuple[str, ...] = (),
         part: str = "all", expert_share: float = 1.0, retired: frozenset[str] = frozenset(),
         train_ids: tuple[str, ...] = ()) -> list:
    """The split's instances (or just `ids`; only `tiers` where given) in stable hash order, cut
    to `part` (`split_parts`), then to `train_ids` where given, without the curriculum's
    `retired` ids. `train_ids` come after the cut, so they cannot move an instance between the
    warm-up's part and RL's."""
    problem = split_problem(split, "The split")
    if problem:
        raise ValueError(problem)
    chosen = sorted((i for i in instances if in_split(i, split)),
                    key=lambda i: stable_order(i.instance_id))
    if ids:
        wanted = set(ids)
        chosen = [i for i in chosen if i.instance_id in wanted]
    if tiers:
        chosen = [i for i in chosen if i.difficulty in tiers]
    if not chosen:
        raise ValueError(f"No instances of split {split!r} in the configured source"
                         f"{' with the given ids' if ids else ''}"
                         f"{f' in tiers {list(tiers)}' if tiers else ''}; "
                         f"{_splits_hint(instances)}check instances.source, "
                         f"instances.train_split / eval.split, instances.ids and instances.tiers.")
    chosen = split_parts(chosen, expert_share)[part]
    if not chosen:
        raise ValueError(f"orchestration.expert_share={expert_share} leaves no {part!r} instances "
                         f"of split {split!r}; choose a share strictly between 0 and 1.")
    if train_ids:
        wanted = set(train_ids)
        outside = sorted(wanted - {i.instance_id for i in chosen})
        if outside:
            raise ValueError(f"instances.train_ids holds {len(outside)} id(s) outside the {part!r} "
                             f"part of split {split!r}: {', '.join(outside[:5])}; take them from "
                             f"that part (`swe-rlvr experiment ladder --mixed-window` does).")
        chosen = [i for i in chosen if i.instance_id in wanted]
    kept = [i for i in chosen if i.instance_id not in retired]
    if not kept:
        raise ValueError(f"The curriculum retired all {len(chosen)} instances of the pool (each "
                         f"solved at least algorithm.curriculum_max_rate of the time or never in "
                         f"algorithm.curriculum_min_tries attempts); raise curriculum_max_rate or "
                         f"curriculum_min_tries, add instances, or stop at fewer iterations.")
    return kept


def _splits_hint(instances: list) -> str:
    """What the source does hold, when a split found nothing."""
    held = sorted({i.split for i in instances} - {""})
    if not held:
        return (f"its records carry no split, so use split {ALL!r} (eval.split=all, or "
                f"instances.train_split=all with eval.share_train_instances=true); ")
    return f"it holds splits {', '.join(held)} (or use {ALL!r} for every instance); "


def check_sharing(cfg: Config) -> None:
    """Refuse training whose instances may be evaluated on too, unless the config allows it."""
    problem = sharing_problem(cfg.instances.train_split, cfg.eval.split,
                              cfg.eval.share_train_instances)
    if problem:
        raise ConfigError(problem)


def window(chosen: list, limit: int, offset: int) -> list:
    """`limit` instances of `chosen` from window `offset` (rotating); all for limit 0."""
    if not limit or limit >= len(chosen):
        return chosen
    start = (offset * limit) % len(chosen)
    return (chosen + chosen)[start:start + limit]


def split_parts(ordered: list, expert_share: float) -> dict[str, list]:
    """{"all", "expert": the first round(share * n), "rl": the rest} (share 1: both are all)."""
    if not 0.0 < expert_share <= 1.0:
        raise ValueError(f"orchestration.expert_share must be in (0, 1], got {expert_share}.")
    if expert_share == 1.0:
        return {"all": ordered, "expert": ordered, "rl": ordered}
    cut = round(expert_share * len(ordered))
    return {"all": ordered, "expert": ordered[:cut], "rl": ordered[cut:]}


def source_path(cfg: Config) -> str:
    """The source file whose content keys the cache ("" for the built-in suite)."""
    return "" if cfg.instances.source == "builtin" else cfg.instances.source


@stage_task("instances")
def instances(run_dir: str, iteration: int, cfg: Config, split: str, out: str = "instances",
              limit: int | None = None, rotate: bool = True, part: str = "all",
              curriculum_path: str | None = None) -> str:
    """Write the iteration's instances of `split` to `iter_<k>/<out>.parquet`; returns its URL.

    `rotate`: iteration k takes the k-th window of `limit` instances (training); otherwise
    always the first `limit` (evaluation, so every step is scored on the same instances).
    `part`: all, or the expert warm-up's or RL's part of the split (`split_parts`).
    `curriculum_path`: the iteration's CURRICULUM rows; their retired instances leave the pool.
    The manifest records the pool's size (`pool`) and how many the curriculum retired.
    """
    if out != EVAL_OUT:  # training draws these: never from the evaluation's instances unasked
        check_sharing(cfg)
    limit = cfg.instances.limit if limit is None else limit
    offset = iteration if rotate else 0
    share = cfg.orchestration.expert_share if part != "all" else 1.0
    extra = {"curriculum_path": curriculum_path} if curriculum_path else {}
    key, done = finished(run_dir, iteration, out, cfg=cfg.instances, split=split, limit=limit,
                         offset=offset, source_path=source_path(cfg), part=part, share=share,
                         **extra)
    if done:
        return done
    from swe_rlvr.loaders import load_instances
    loaded = load_instances(cfg.instances.source, format=cfg.instances.format,
                            skip_invalid=cfg.instances.skip_invalid)
    retired = frozenset(r["instance_id"] for r in store.read_rows(curriculum_path, "curriculum")
                        if r["retired"]) if curriculum_path else frozenset()
    train_ids = cfg.instances.train_ids if out != EVAL_OUT and part != "expert" else ()
    everyone = pool(loaded.instances, split, cfg.instances.ids, cfg.instances.tiers, part, share,
                    retired, train_ids)
    chosen = window(everyone, limit, offset)
    url = artifact(run_dir, iteration, f"{out}.parquet")
    with store.stage(iter_dir(run_dir, iteration), out, key) as st:
        sha = store.write_table(url, "instances", [i.to_row() for i in chosen])
        st.output("main", url, sha, rows=len(chosen), skipped=len(loaded.skipped),
                  pool=len(everyone), retired=len(retired))
    return url
