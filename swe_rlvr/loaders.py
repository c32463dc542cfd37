"""Load every SWE-bench-family format into `Instance`, and read/write `instances.parquet`.

Formats (picked by `format=`, or detected from the columns with "auto"), one module each in
`swe_rlvr.formats`, whose docstrings name each format's simplifications and assumptions:
- swe-bench (also Verified and Lite) and swe-gym (`formats.swe_bench`): Hub columns; the `EnvSpec`
  is SWE-bench's spec for the repo and version (`swe_rlvr.env_specs`; swebench is imported only
  when a file holds such a record).
- swe-rebench (`formats.swe_rebench`): the same columns plus an `install_config` mapping that
  becomes the `EnvSpec`; `install_config_from_recipe` turns a verified recipe into one.
- swe-smith (`formats.swe_smith`): `patch` *introduces* the bug, so `Instance.patch` is its reverse.
- internal (`formats.internal`): JSON lines in `Instance.to_row()` shape, as `export --out x.jsonl`
  writes them.
The field checks every format shares are `swe_rlvr.formats.fields`.

Files are a JSON list, JSON lines or Parquet, told apart by content (not by suffix), and opened
through fsspec so `s3://` paths work wherever the matching fsspec backend is installed.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from swe_rlvr.formats.fields import BadField
from swe_rlvr.formats.internal import from_internal
from swe_rlvr.formats.swe_bench import from_swe_bench
from swe_rlvr.formats.swe_rebench import from_swe_rebench
from swe_rlvr.formats.swe_smith import from_swe_smith
from swe_rlvr.instances import Instance, in_split

FORMATS = ("auto", "swe-bench", "swe-gym", "swe-rebench", "swe-smith", "internal")
BUILTIN = "builtin"
_SKIP_HINT = "fix the record, or load with skip_invalid=True (CLI: --skip-invalid) to skip it"


class InstanceError(ValueError):
    """A record is malformed; the message names the instance (or row), the field and the fix."""

    def __init__(self, message: str, record: InvalidRecord | None = None):
        super().__init__(message)
        self.record = record


class InstanceFileError(ValueError):
    """An instance file cannot be read at all; the message names the path."""


@dataclass(frozen=True)
class InvalidRecord:
    """One record that failed validation."""

    index: int
    """Row number in the file, from 0."""
    instance_id: str
    """The record's id when it has a usable one, else ""."""
    field: str
    """The offending field, named as the source format names it."""
    message: str


@dataclass
class LoadResult:
    instances: list[Instance]
    skipped: list[InvalidRecord] = field(default_factory=list)
    format: str = ""
    """The format the records were read as (after auto-detection)."""
    path: str = ""


# --------------------------------------------------------------------------- reading files


def load_instances(path: str | Path, format: str = "auto",
                   skip_invalid: bool = False) -> LoadResult:
    """Read a SWE-bench-family file (or "builtin") into validated instances."""
    path = str(path)
    if format not in FORMATS:
        raise ValueError(f"Unknown instance format {format!r}; "
                         f"choose one of: {', '.join(FORMATS)}.")
    mapper: Callable[[dict], Instance]
    if path == BUILTIN:
        records, fmt, mapper = _builtin_records(), BUILTIN, from_internal
    else:
        records = read_records(path)
        fmt = detect_format(records) if format == "auto" else format
        mapper = _MAPPERS[fmt]
    result = LoadResult(instances=[], format=fmt, path=path)
    seen: dict[str, int] = {}
    for index, raw in enumerate(records):
        try:
            instance = mapper(raw)
            _check_unique(instance.instance_id, index, seen)
        except BadField as bad:
            invalid = _invalid(raw, index, bad)
            if not skip_invalid:
                message = f"{invalid.message} (in {path}; {_SKIP_HINT})"
                raise InstanceError(message, invalid) from None
            result.skipped.append(invalid)
            continue
        result.instances.append(instance)
    return result


def read_records(path: str) -> list[dict]:
    """The raw records of a JSON list, JSON-lines or Parquet file."""
    data = _read_bytes(path)
    if data[:4] == b"PAR1":
        records = _parquet_records(path, data)
    else:
        records = _json_records(path, data)
    for index, raw in enumerate(records):
        if not isinstance(raw, dict):
            raise InstanceFileError(f"{path}: record {index} is a {type(raw).__name__}, not an "
                                    f"object with fields; each record must be a JSON object.")
    if not records:
        raise InstanceFileError(f"{path} holds no records; pass a file with at least one instance.")
    return records


def _read_bytes(path: str) -> bytes:
    import fsspec

    try:
        with fsspec.open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"Instance file {path!r} does not exist; pass a JSON, JSONL or "
                                f"Parquet file of instances, or 'builtin'.") from None
    except (OSError, ValueError) as exc:
        raise InstanceFileError(f"Cannot read instance file {path!r}: {exc}") from exc


def _parquet_records(path: str, data: bytes) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(pa.BufferReader(data)).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        raise InstanceFileError(f"Instance file {path!r} is not a readable Parquet file: {exc}. "
                                f"Re-export it, or pass the JSON/JSONL original.") from exc


def _json_records(path: str, data: bytes) -> list:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InstanceFileError(f"Instance file {path!r} is neither Parquet nor UTF-8 JSON "
                                f"({exc}); pass a JSON list, JSON lines or Parquet.") from exc
    if text.lstrip().startswith("["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise InstanceFileError(f"Instance file {path!r} is not valid JSON: {exc}.") from exc
    return _json_lines(path, text)


def _json_lines(path: str, text: str) -> list:
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InstanceFileError(f"Instance file {path!r}, line {number}, is not JSON ({exc}); "
                                    f"write one JSON object per line, or a JSON list.") from exc
    return records


def detect_format(records: list[dict]) -> str:
    """Guess the format from the union of the records' columns."""
    keys = set().union(*(raw.keys() for raw in records))
    if "install_config" in keys:
        return "swe-rebench"
    if "env" in keys or "fail_to_pass" in keys:
        return "internal"
    if "image_name" in keys and "test_patch" not in keys:
        return "swe-smith"
    return "swe-bench"


def _builtin_records() -> list[dict]:
    """The built-in suite's instances as internal rows, so they pass the same checks."""
    try:
        builtin = importlib.import_module("swe_rlvr.builtin")
    except ModuleNotFoundError as exc:
        if exc.name and "swe_rlvr.builtin".startswith(exc.name):
            raise InstanceFileError("The built-in suite (swe_rlvr.builtin) is not part of this "
                                    "installation; pass an instance file instead.") from None
        raise
    return [instance.to_row() for instance in builtin.load_builtin()]


# --------------------------------------------------------------------------- records


def _invalid(raw: dict, index: int, bad: BadField) -> InvalidRecord:
    ident = raw.get("instance_id")
    ident = ident.strip() if isinstance(ident, str) else ""
    who = f"instance {ident!r}" if ident else f"row {index}"
    return InvalidRecord(index, ident, bad.name, f"{who}: field {bad.name!r} {bad.problem}")


def _check_unique(ident: str, index: int, seen: dict[str, int]) -> None:
    if ident in seen:
        raise BadField("instance_id", f"repeats the id of row {seen[ident]}; instance ids must be "
                                      f"unique, so drop or rename one of them")
    seen[ident] = index


_MAPPERS: dict[str, Callable[[dict], Instance]] = {
    "swe-bench": from_swe_bench,
    "swe-gym": lambda raw: from_swe_bench(raw, source="swe-gym"),
    "swe-rebench": from_swe_rebench,
    "swe-smith": from_swe_smith,
    "internal": from_internal,
}


# --------------------------------------------------------------------------- instances.parquet


def write_instances(path: str | Path, instances: list[Instance]) -> str:
    """Write `instances.parquet` (or internal JSON lines when the path ends in .jsonl)."""
    import fsspec

    path = str(path)
    rows = [instance.to_row() for instance in instances]
    if path.endswith(".jsonl"):
        with fsspec.open(path, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        return path
    import pyarrow.parquet as pq

    from swe_rlvr.artifacts import table

    with fsspec.open(path, "wb") as handle:
        pq.write_table(table("instances", rows), handle)
    return path


def read_instances(path: str | Path) -> list[Instance]:
    """Read an `instances.parquet` written by `write_instances`, checking its schema version."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from swe_rlvr.artifacts import check

    data = _read_bytes(str(path))
    try:
        tbl = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        raise InstanceFileError(f"{str(path)!r} is not a readable instances.parquet: {exc}. "
                                f"Write it with `swe-rlvr instances export`.") from exc
    return [Instance.from_row(row) for row in check("instances", tbl).to_pylist()]


def select(instances: list[Instance], split: str | None = None,
           ids: tuple[str, ...] = ()) -> list[Instance]:
    """The instances of one split (every one for None or "all") and, if given, only these ids."""
    wanted = set(ids)
    return [i for i in instances if (not split or in_split(i, split))
            and (not wanted or i.instance_id in wanted)]
