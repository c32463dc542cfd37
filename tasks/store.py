"""Reading and writing the iteration's artifacts, atomically, with completion manifests.

Every stage writes its outputs under `<run_dir>/iter_<k>/` (any fsspec URL). An output appears
only complete: a Parquet file is written to a temporary name and moved into place, a checkpoint
directory is filled as `<name>.partial` and renamed. Last of all the stage writes its manifest,
`_stages/<stage>.json`, holding the key of the inputs it was computed from, the outputs with their
content hashes, its wall time, the process's peak resident set while it ran and the work spans
it recorded (`swe_rlvr.spans`). A finished stage gives the memory it freed back to the OS
(`swe_rlvr.memory.release`), so the next one starts from what is still in use. A stage whose
manifest exists with the same input key is done, so a crashed flow resumes with nothing lost or
done twice even without Prefect's cache store. The finished stage is announced in the run's log
(`tasks.runlog`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from swe_rlvr import artifacts, memory, spans
from tasks.runlog import announce

SUCCESS = "_SUCCESS"
_HASH_CHUNK = 1 << 20


def fs_and_path(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of `url` and the path inside it."""
    fs, path = fsspec.core.url_to_fs(str(url))
    return fs, path


def local_dir(url: str) -> Path | None:
    """The absolute local path of `url`; None where it lies on a remote filesystem."""
    fs, path = fs_and_path(url)
    return Path(path).resolve() if "file" in fs.protocol else None


def local_copy(url: str) -> str:
    """A local path holding `url`'s file or directory: its own on a local filesystem, else a
    download into a fresh temporary directory."""
    fs, path = fs_and_path(url)
    if "file" in fs.protocol:
        return path
    dst = Path(tempfile.mkdtemp(prefix="swe-rlvr-")) / path.rsplit("/", 1)[-1]
    fs.get(path, str(dst), recursive=True)
    return str(dst)


def join(*parts: str) -> str:
    """Join URL parts with '/' (fsspec paths use '/' on every filesystem)."""
    head, *rest = [str(p) for p in parts]
    return "/".join([head.rstrip("/")] + [p.strip("/") for p in rest])


def exists(url: str) -> bool:
    fs, path = fs_and_path(url)
    return fs.exists(path)


def read_table(url: str, name: str) -> pa.Table:
    """Read a Parquet artifact and refuse it unless its schema stamp is `name`'s current one."""
    fs, path = fs_and_path(url)
    if not fs.exists(path):
        raise FileNotFoundError(f"Artifact {url!r} does not exist; run the stage that writes "
                                f"{name} first (or resume the run).")
    with fs.open(path, "rb") as fh:
        return artifacts.check(name, pq.read_table(fh))


def read_rows(url: str, name: str) -> list[dict]:
    return read_table(url, name).to_pylist()


def write_table(url: str, name: str, rows: list[dict]) -> str:
    """Write rows as the versioned `name` table, atomically; returns the content hash."""
    tbl = artifacts.table(name, rows)
    fs, path = fs_and_path(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with fs.open(tmp, "wb") as fh:
        pq.write_table(tbl, fh)
    fs.mv(tmp, path)
    return content_hash(url)


def write_json(url: str, data: dict) -> None:
    fs, path = fs_and_path(url)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with fs.open(tmp, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    fs.mv(tmp, path)


def read_json(url: str) -> dict | None:
    fs, path = fs_and_path(url)
    if not fs.exists(path):
        return None
    with fs.open(path, "r") as fh:
        return json.load(fh)


def content_hash(url: str) -> str:
    """sha256 of a file; of a directory, its `_SUCCESS` hash or else a hash of every file in it."""
    fs, path = fs_and_path(url)
    if fs.isdir(path):
        marker = read_json(join(url, SUCCESS))
        if marker and marker.get("sha256"):
            return marker["sha256"]
        return _dir_hash(fs, path)
    digest = hashlib.sha256()
    with fs.open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _dir_hash(fs: Any, path: str) -> str:
    digest = hashlib.sha256()
    for name in sorted(fs.find(path)):
        rel = name[len(path):].lstrip("/")
        if rel == SUCCESS or rel.split("/")[-1].startswith("."):
            continue
        digest.update(rel.encode() + b"\0")
        with fs.open(name, "rb") as fh:
            while chunk := fh.read(_HASH_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def seal_dir(url: str, **extra: Any) -> str:
    """Write the directory's `_SUCCESS` marker (its content hash and `extra`); returns the hash."""
    fs, path = fs_and_path(url)
    sha = _dir_hash(fs, path)
    write_json(join(url, SUCCESS), {"sha256": sha, **extra})
    return sha


def is_sealed(url: str) -> bool:
    return exists(join(url, SUCCESS))


def publish_dir(partial: str, final: str) -> None:
    """Move a finished `partial` directory to `final` (replacing an unsealed leftover)."""
    fs, src = fs_and_path(partial)
    _, dst = fs_and_path(final)
    if fs.exists(dst):
        fs.rm(dst, recursive=True)
    fs.mv(src, dst, recursive=True)


def fresh_dir(url: str) -> str:
    """An empty directory at `url` (an earlier crashed attempt's leftovers are removed)."""
    fs, path = fs_and_path(url)
    if fs.exists(path):
        fs.rm(path, recursive=True)
    fs.makedirs(path, exist_ok=True)
    return url


# --------------------------------------------------------------------------- stage manifests


@dataclass
class Stage:
    """One stage's bookkeeping inside `iter_dir`: its manifest, outputs and wall time."""

    iter_dir: str
    name: str
    input_key: str
    outputs: dict[str, dict] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def manifest_url(self) -> str:
        return join(self.iter_dir, "_stages", f"{self.name}.json")

    def manifest(self) -> dict | None:
        """The manifest of a finished run of this stage on the same inputs, else None."""
        data = read_json(self.manifest_url)
        if not data or data.get("input_key") != self.input_key:
            return None
        if not all(exists(out["url"]) for out in data.get("outputs", {}).values()):
            return None
        return data

    def output(self, name: str, url: str, sha256: str, **info: Any) -> str:
        self.outputs[name] = {"url": url, "sha256": sha256, **info}
        return url


@contextmanager
def stage(iter_dir: str, name: str, input_key: str) -> Iterator[Stage]:
    """Run a stage body and write its manifest last; `running` marks it while it runs."""
    st = Stage(iter_dir, name, input_key)
    running = join(iter_dir, "_stages", f"{name}.running")
    write_json(running, {"input_key": input_key, "started_at": time.time()})
    start, before, cpu_before = time.perf_counter(), spans.totals(), spans.cpu_seconds()
    try:
        with spans.rss_window() as rss:
            yield st
            memory.release()
        wall = time.perf_counter() - start
        work = {k: dataclasses.asdict(v) for k, v in spans.delta(before, spans.totals()).items()}
        cpu, machine = (b - a for a, b in zip(cpu_before, spans.cpu_seconds()))
        manifest = {"stage": name, "input_key": input_key, "outputs": st.outputs, "wall_s": wall,
                    "peak_rss_mb": rss.peak_mb, "cpu_s": cpu, "machine_cpu_s": machine,
                    "spans": work, "finished_at": time.time(), **st.info}
        write_json(st.manifest_url, manifest)
        announce(manifest)
    finally:
        fs, path = fs_and_path(running)
        fs.rm(path)


def stage_manifests(iter_dir: str) -> dict[str, dict]:
    """Every finished stage's manifest in `iter_dir`, by stage name."""
    fs, path = fs_and_path(join(iter_dir, "_stages"))
    if not fs.exists(path):
        return {}
    out = {}
    for name in sorted(fs.glob(f"{path}/*.json")):
        data = read_json(fs.unstrip_protocol(name))
        if data:
            out[data["stage"]] = data
    return out
