"""The ladder's committable results: one small `seed-<n>.json` per seed, and the report from them.

A ladder runs one seed per session on machines whose run directories do not survive, so each
(arm, seed) result (`tasks.ladder_report.seed_result`) is also merged into a file that can be
committed, and `write_committed_report` regenerates the report from those files alone:

    {"format": 1, "seed": 0,
     "hardware": {"device": "cpu", "cpu": "<model name>", "flags": ["avx2"], "gpu": null},
     "arms": {"base": {<portable row>, "commit": "<sha>", "dirty": false, "config": "...",
                       "overrides": [...], "eval_split": "test", "eval_instances": 40,
                       "eval_runs": 1, "hardware": {...}, "finished": "<UTC ISO time>"}},
     "notes": []}

- A portable row is the result without machine paths: the policy directory is dropped and the
  run directory becomes the run's name; any other absolute path is refused.
- The arms of one file must share the evaluation protocol (split, instance count, runs, the
  instance ids themselves) and the device, because the paired dapo − warmup claim compares the
  same instances under the same protocol; so must the seeds pooled in a report.
- A seed evaluated on a GPU (hardware.device "cuda") is reported beside the CPU seeds, in its own
  section, and never pooled with them.
- An arm already in the file with the same MLflow run is left as it is: its provenance (commit,
  config, time) is the invocation that produced it, not a later one that resumed past it.
- A warm-up shared across seeds (`swe-rlvr experiment ladder --shared-warmup`) is part of the
  protocol: its checkpoint's digest (`shared_warmup`; null when each seed trained its own) must
  match across the arms of a file and the seeds of a report, which states it.
- A seed's own warm-up trained earlier (`--warmup-checkpoint`, `flows.ladder_options`) is not
  part of the protocol (each seed still has its own): its warmup arm records the checkpoint's
  digest and the commit that trained it (`warmup_trained`), and the report says so.
- `notes` are written by hand and kept by every merge.
Simplification: `dirty` records uncommitted changes to tracked files only, outside the results
folder (the ladder writes its seed files there itself); the commit is "unknown" where git is
missing or the code is not a checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from swe_rlvr.config import Config, ConfigError
from swe_rlvr.precision import cpu_info

FORMAT = 1
ROOT = Path(__file__).resolve().parents[1]
PROTOCOL = ("eval_split", "eval_instances", "eval_runs", "instances", "hardware.device",
            "shared_warmup")
"""What every arm of a file, and every seed pooled in a report, must share."""
FIXES = {"eval_split": "eval.split", "eval_instances": "eval.limit / instances.ids / "
         "instances.tiers", "eval_runs": "eval.runs", "instances": "the instances source",
         "hardware.device": "engine.device",
         "shared_warmup": "--shared-warmup (the same checkpoint, or none for every seed)"}
"""Protocol field -> the setting that changes it (for the error's fix)."""
Results = dict[str, list[dict]]


def portable(row: dict) -> dict:
    """One (arm, seed) result without machine paths: no `policy`, and `run_dir` as the run's name
    (what `tasks.ladder_report` shows in its per-seed table)."""
    name = row.get("run_name") or str(row["run_dir"]).rstrip("/").rsplit("/", 1)[-1]
    out = {**{k: v for k, v in row.items() if k != "policy"}, "run_dir": name, "run_name": name}
    for key, value in _strings(out):
        if value.startswith(("/", "~")) or "://" in value or value[1:3] == ":\\":
            raise ValueError(f"Result field {key!r} of arm {row.get('arm')!r} holds the machine "
                             f"path {value!r}; add it to what tasks.ladder_results.portable drops.")
    return out


def _strings(value, key: str = "") -> list[tuple[str, str]]:
    """(dotted key, string) of every string anywhere in `value`."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(v, f"{key}.{k}".lstrip("."))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v, key)]
    return [(key, value)] if isinstance(value, str) else []


# --------------------------------------------------------------------------- provenance


def hardware(device_setting: str) -> dict:
    """The device a setting such as engine.device resolves to here, the CPU and the GPU."""
    from swe_rlvr.precision import pick_device
    device = pick_device(device_setting, "engine.device").type
    info = Path("/proc/cpuinfo")
    cpu, flags = cpu_info(info.read_text() if info.exists() else "")
    gpu = None
    if device == "cuda":
        import torch
        gpu = torch.cuda.get_device_name(0)
    return {"device": device, "cpu": cpu, "flags": flags, "gpu": gpu}


def git_state(root: Path = ROOT, outputs: Path | None = None) -> tuple[str, bool]:
    """(HEAD's sha as `tasks.tracking.git_commit` gives it, "unknown" where it gives none;
    whether tracked files have uncommitted changes). Changes under `outputs` (the ladder's results
    folder, which its own earlier invocations write) do not count: a seed's result file written
    an hour before is not a change to the code that produces the next one."""
    from tasks.tracking import git_commit
    spec, top = ["."], Path(root).resolve()
    if outputs is not None and (out := Path(outputs).resolve()).is_relative_to(top):
        spec.append(f":(exclude){out.relative_to(top)}")
    try:
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no",
                                     "--", *spec], cwd=root, capture_output=True, text=True,
                                    check=True, timeout=30).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        dirty = False
    return git_commit(root) or "unknown", dirty


def ladder_meta(cfg: Config, config: str | None, overrides: Sequence[str], instances: int,
                shared_warmup: str | None = None, mixed_window: int = 0,
                results_dir: Path | None = None, window_per_iteration: int = 0) -> dict:
    """What produced the arms of one ladder invocation: commit, config, overrides, evaluation
    protocol (`instances`: how many the evaluation grades), hardware, and the digest of the
    warm-up shared across seeds (None: each seed trains its own). `results_dir`: where the seed
    files go, left out of the dirty check (`git_state`). `window_per_iteration` is recorded where
    it is set (files written before it existed stay byte for byte the same)."""
    commit, dirty = git_state(outputs=results_dir)
    return {"commit": commit, "dirty": dirty, "config": _relative(config),
            "overrides": list(overrides), "eval_split": cfg.eval.split,
            "eval_instances": instances, "eval_runs": cfg.eval.runs,
            "hardware": hardware(cfg.engine.device),
            "shared_warmup": checkpoint_digest(shared_warmup) if shared_warmup else None,
            "mixed_window": mixed_window,
            **({"window_per_iteration": window_per_iteration} if window_per_iteration else {})}


def checkpoint_digest(path: str) -> str:
    """sha256 of a checkpoint's weight files (*.safetensors, *.bin), in name order: which
    warm-up a seed started from, without its path."""
    import hashlib
    digest = hashlib.sha256()
    files = sorted(p for p in Path(path).iterdir() if p.suffix in (".safetensors", ".bin"))
    if not files:
        raise ConfigError(f"{path} holds no *.safetensors or *.bin weights to digest.")
    for file in files:
        digest.update(file.name.encode())
        with file.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _relative(config: str | None) -> str | None:
    path = Path(config).resolve() if config else None
    return str(path.relative_to(ROOT)) if path and path.is_relative_to(ROOT) else config


def finished_at(result_path: Path) -> str:
    """When a result file was written, as a UTC ISO time."""
    return datetime.fromtimestamp(result_path.stat().st_mtime, UTC).isoformat(
        timespec="seconds")


# --------------------------------------------------------------------------- seed files


def update_seed_file(path: Path, row: dict, meta: dict) -> dict:
    """Merge one (arm, seed) result and its `ladder_meta` (plus `finished`: `finished_at` of its
    result file) into the seed file at `path`, atomically; returns the file's content. Refuses an
    arm whose protocol differs from the arms already there. The same run met again keeps its
    entry, except for a training curve that has changed (completed with its tallies)."""
    path = Path(path)
    seed = {"format": FORMAT, "seed": row["seed"], "hardware": meta["hardware"], "arms": {},
            "notes": []}
    if path.exists():
        seed = _read(path)
    if seed["seed"] != row["seed"]:
        raise ConfigError(f"{path} holds seed {seed['seed']}, not seed {row['seed']} of arm "
                          f"{row['arm']!r}; name seed files seed-<n>.json after their seed.")
    kept = seed["arms"].get(row["arm"])
    if kept and kept.get("mlflow_run_id") == row["mlflow_run_id"]:
        training = row.get("training")
        if training is None or training == kept.get("training"):
            return seed
        # the same run's curve, completed since with its per-instance tallies (`complete`): it
        # alone is replaced, the arm keeps the provenance of the invocation that ran it
        seed["arms"][row["arm"]] = {**kept, "training": training}
        _write(path, seed)
        return seed
    arm = {**portable(row), **meta}
    others = {k: v for k, v in seed["arms"].items() if k != row["arm"]}
    for name, other in others.items():
        check_protocol(other, arm, f"arm {name!r} of {path}", f"arm {row['arm']!r}")
    seed["arms"] = {**others, row["arm"]: arm}
    _write(path, seed)
    return seed


def protocol(entry: dict) -> dict:
    """The PROTOCOL fields of one arm's entry."""
    return {"eval_split": entry["eval_split"], "eval_instances": entry["eval_instances"],
            "eval_runs": entry["eval_runs"], "instances": sorted(entry["instances"]),
            "hardware.device": entry["hardware"]["device"],
            "shared_warmup": entry.get("shared_warmup")}


def check_protocol(old: dict, new: dict, old_name: str, new_name: str) -> None:
    """Refuse `new` unless it shares `old`'s evaluation protocol and device, naming the field."""
    a, b = protocol(old), protocol(new)
    for field in PROTOCOL:
        if a[field] != b[field]:
            shown = (f"{len(b[field])} instance ids against {len(a[field])}, "
                     f"{len(set(a[field]) & set(b[field]))} in common" if field == "instances"
                     else f"{b[field]!r} against {a[field]!r}")
            raise ConfigError(f"{new_name} differs from {old_name} in {field} ({shown}): the "
                              f"paired comparisons need the same instances and protocol. Set "
                              f"{FIXES[field]} as {old_name} had it, or write to another "
                              f"--results-dir.")


def _read(path: Path) -> dict:
    seed = json.loads(path.read_text())
    if seed.get("format") != FORMAT:
        raise ConfigError(f"{path} has format {seed.get('format')!r}; this swe-rlvr reads format "
                          f"{FORMAT}: regenerate it with the swe-rlvr that wrote it.")
    return seed


def _write(path: Path, seed: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(seed, indent=1, sort_keys=True) + "\n")
    os.replace(temp, path)


def load_results(folder: Path, order: Sequence[str] = ()) -> tuple[Results, Results]:
    """(CPU results, GPU results) of every seed-*.json in `folder`: {arm: rows sorted by seed},
    arms in `order` first, then the rest by name. Refuses seeds pooled under different
    protocols."""
    return _split(_seed_files(Path(folder)), order)


def _seed_files(folder: Path) -> list[dict]:
    files = sorted(folder.glob("seed-*.json"))
    if not files:
        raise ConfigError(f"{folder} holds no seed-*.json; pass the folder that "
                          f"`swe-rlvr experiment ladder --results-dir` wrote (e.g. docs/ladder).")
    return sorted((_read(f) for f in files), key=lambda s: s["seed"])


def _split(seeds: list[dict], order: Sequence[str]) -> tuple[Results, Results]:
    cpu = [s for s in seeds if s["hardware"]["device"] != "cuda"]
    gpu = [s for s in seeds if s["hardware"]["device"] == "cuda"]
    return _by_arm(cpu, order), _by_arm(gpu, order)


def _by_arm(seeds: list[dict], order: Sequence[str]) -> Results:
    rows = [(name, arm) for s in seeds for name, arm in s["arms"].items()]
    for name, arm in rows[1:]:
        check_protocol(rows[0][1], arm, f"arm {rows[0][0]!r} seed {rows[0][1]['seed']}",
                       f"arm {name!r} seed {arm['seed']}")
    rank = {n: i for i, n in enumerate(order)}
    names = sorted({n for n, _ in rows}, key=lambda n: (rank.get(n, len(rank)), n))
    return {n: [arm for m, arm in rows if m == n] for n in names}


# --------------------------------------------------------------------------- the report


def write_committed_report(folder: Path, out_md: Path, order: Sequence[str] = ()) -> str:
    """Regenerate the report from the files in `folder` alone (its seed files, and its
    sequential design when it has one, `tasks.ladder_design`): `out_md` and, beside it,
    `<stem>.png` (pass@1 per iteration) and `<stem>-curves.png`; returns the markdown. GPU seeds
    get their own section after the CPU seeds' report."""
    from tasks import ladder_design
    from tasks.ladder_report import write_curves, write_plot, write_report
    folder, out_md = Path(folder), Path(out_md)
    seeds = _seed_files(folder)
    cpu, gpu = _split(seeds, order)
    out_md.parent.mkdir(parents=True, exist_ok=True)
    plot, curves = out_md.with_suffix(".png"), out_md.with_name(f"{out_md.stem}-curves.png")
    text = write_report(out_md, cpu, _header(folder, out_md, seeds, cpu, gpu, plot.name),
                        ladder_design.load(folder))
    text = text.replace("](curves.png)", f"]({curves.name})") + _gpu_section(gpu)
    out_md.write_text(text)
    write_plot(plot, cpu)
    write_curves(curves, cpu)
    return text


def _header(folder: Path, out_md: Path, seeds: list[dict], cpu: Results, gpu: Results,
            plot: str) -> list[str]:
    ref = _relative(str(folder))
    return ["# swe-rlvr learning ladder: committed results", "",
            f"Regenerated from `{ref}/seed-*.json` alone by `swe-rlvr experiment report {ref} "
            f"--out {_relative(str(out_md))}`; the run directories are not kept.", "",
            f"- seeds: CPU {_seed_list(cpu) or 'none'}; GPU {_seed_list(gpu) or 'none'} (GPU "
            f"seeds have their own section at the end, never pooled with the CPU seeds)",
            f"- evaluation, CPU seeds: {_protocol_text(cpu)}; GPU seeds: {_protocol_text(gpu)}",
            "- hardware:", *(f"  - seed {s['seed']}: {_hardware_text(s)}" for s in seeds),
            "- arms (commit, config and overrides that produced each seed):",
            *_provenance(cpu, gpu),
            *(["- notes:"] + [f"  - seed {s['seed']}: {n}" for s in seeds for n in s["notes"]]
              if any(s["notes"] for s in seeds) else []),
            "", f"![pass@1 per iteration]({plot})"]


def _seed_list(results: Results) -> str:
    return ", ".join(map(str, sorted({r["seed"] for rows in results.values() for r in rows})))


def _protocol_text(results: Results) -> str:
    first = next((rows[0] for rows in results.values()), None)
    if first is None:
        return "none"
    shared = first.get("shared_warmup")
    warmup = (f"one warm-up shared by every seed (checkpoint sha256 `{shared[:12]}`): the seeds "
              f"vary the RL and evaluation sampling, and the warm-up's own variance is not "
              f"measured" if shared else "each seed trains its own warm-up")
    return (f"split `{first['eval_split']}`, {first['eval_instances']} instances x "
            f"{first['eval_runs']} run(s) per arm and seed; {warmup}")


def _hardware_text(seed: dict) -> str:
    """The distinct hardware of a seed's arms (the file's own when it has no arm yet)."""
    found = [a["hardware"] for a in seed["arms"].values()] or [seed["hardware"]]
    return "; ".join(dict.fromkeys(
        f"{h['device']}, {h['gpu']} (host CPU {h['cpu']})" if h["gpu"]
        else f"{h['device']}, {h['cpu']} (bf16-relevant flags: {', '.join(h['flags']) or 'none'})"
        for h in found))


def _provenance(*groups: Results) -> list[str]:
    """One line per arm and (commit, config, overrides), with the seeds it produced."""
    made: dict[tuple, list[int]] = {}
    for results in groups:
        for name, rows in results.items():
            for r in rows:
                trained = r.get("warmup_trained")         # --warmup-checkpoint
                earlier = (f"; its warm-up was trained earlier, at commit `{trained['commit']}` "
                           f"(checkpoint sha256 `{trained['digest'][:12]}`), by the same recipe"
                           if trained else "")
                key = (name, r["commit"], r["dirty"], r["config"], " ".join(r["overrides"]),
                       earlier)
                made.setdefault(key, []).append(r["seed"])
    return [f"  - `{name}` seed(s) {', '.join(map(str, seeds))}: commit `{commit}`"
            f"{' with uncommitted changes' if dirty else ''}, config `{config}`, overrides "
            f"`{overrides or '(none)'}`{earlier}" for (name, commit, dirty, config, overrides,
                                                   earlier), seeds in made.items()]


def _gpu_section(gpu: Results) -> str:
    if not gpu:
        return ""
    from tasks.ladder_report import comparison_table, table
    from tasks.ladder_stats import comparison_rows
    pairs = comparison_rows(gpu)
    lines = ["", "## GPU seeds", "", f"Seed(s) {_seed_list(gpu)}, evaluated on a GPU "
             f"({_protocol_text(gpu)}): reported beside the CPU seeds above and never pooled with "
             f"them, since precision and kernels differ.", "", *table(gpu), "",
             *(comparison_table(pairs) if pairs else ["No two arms to compare on a GPU seed."])]
    return "\n".join(lines) + "\n"
