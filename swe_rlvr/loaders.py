"""Load every SWE-bench-family format into `Instance`, and read/write `instances.parquet`.

Formats (picked by `format=`, or detected from the columns with "auto"):
- swe-bench (also Verified and Lite) and swe-gym: Hub columns; FAIL_TO_PASS / PASS_TO_PASS as
  JSON-encoded strings or real lists; optional `image`, `eval_script`, `log_parser`, `split`,
  `difficulty` (Verified's "<15 min fix" ... ">4 hours" become easy/medium/hard). The `EnvSpec`
  is SWE-bench's spec for the repo and version (`swe_rlvr.env_specs`; swebench is imported only
  when a file holds such a record).
- swe-rebench: the same columns plus an `install_config` mapping (python, pre_install, reqs_path,
  pip_packages, install, test_cmd) that becomes the `EnvSpec`, `meta` (kept in `meta_json`) and
  an image under `image_name` or `docker_image`.
- swe-smith: `patch` *introduces* the bug, so `Instance.patch` is its reverse (`reverse_patch`).
- internal: JSON lines in `Instance.to_row()` shape, as `export --out x.jsonl` writes them.

Files are a JSON list, JSON lines or Parquet, told apart by content (not by suffix), and opened
through fsspec so `s3://` paths work wherever the matching fsspec backend is installed.

Simplifications and assumptions:
- SWE-smith records name no upstream base commit. The SWE-smith harness checks out a branch
  named after the instance id in the mirror repo (`repo` = "swesmith/<owner>__<name>.<hash>")
  inside the repo's one image (`image_name`); `base_commit` therefore holds that branch name
  unless the record has its own `base_commit`. The bug patch and the upstream commit hash (the
  suffix of the mirror name) are kept in `meta_json` as `bug_patch` and `upstream_commit`, so a
  backend without the mirror can rebuild the buggy state. SWE-smith records need no test patch:
  their tests already live in the repository.
- `log_parser` is reduced to the output family that a parser must understand: SWE-bench's
  `parse_log_django` -> "django", `parse_log_sympy` -> "sympy", and every other (pytest-based)
  parser -> "pytest". The original name stays in `meta_json` under `log_parser`.
- The test command of a SWE-bench record is its spec's `test_cmd`, not parsed out of
  `eval_script`; the script is kept whole in `EnvSpec.eval_script` for the Docker backend.
- `install_config_from_recipe` turns a verified recipe (recipes.jsonl of the real dev set) into a
  SWE-rebench `install_config`, so a plain record plus its recipe loads as a SWE-rebench record.
- Columns that no field takes are kept in `meta_json` (values that JSON cannot hold as strings).
"""

from __future__ import annotations

import datetime as _dt
import importlib
import json
import re
import shlex
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from swe_rlvr.env_specs import swebench_env
from swe_rlvr.instances import (
    DEFAULT_TEST_CMD, SOURCES, SPLITS, EnvSpec, Instance, name_problem,
)
from swe_rlvr.patches import reverse_patch

FORMATS = ("auto", "swe-bench", "swe-gym", "swe-rebench", "swe-smith", "internal")
BUILTIN = "builtin"
_SKIP_HINT = "fix the record, or load with skip_invalid=True (CLI: --skip-invalid) to skip it"


class InstanceError(ValueError):
    """A record is malformed; the message names the instance (or row), the field and the fix."""

    def __init__(self, message: str, record: "InvalidRecord | None" = None):
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
        except _Bad as bad:
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


# --------------------------------------------------------------------------- field checks


class _Bad(Exception):
    """A field of one record is wrong: `problem` completes "field 'x' ..."."""

    def __init__(self, name: str, problem: str):
        super().__init__(problem)
        self.name, self.problem = name, problem


def _invalid(raw: dict, index: int, bad: _Bad) -> InvalidRecord:
    ident = raw.get("instance_id")
    ident = ident.strip() if isinstance(ident, str) else ""
    who = f"instance {ident!r}" if ident else f"row {index}"
    return InvalidRecord(index, ident, bad.name, f"{who}: field {bad.name!r} {bad.problem}")


def _check_unique(ident: str, index: int, seen: dict[str, int]) -> None:
    if ident in seen:
        raise _Bad("instance_id", f"repeats the id of row {seen[ident]}; instance ids must be "
                                  f"unique, so drop or rename one of them")
    seen[ident] = index


def _kind(value: Any) -> str:
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def _text(raw: dict, name: str, required: bool = True, nonempty: bool = False) -> str:
    value = raw.get(name)
    if value is None:
        if required:
            raise _Bad(name, "is missing; every record of this format needs it")
        return ""
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    if not isinstance(value, str):
        raise _Bad(name, f"must be a string, got {_kind(value)}")
    if nonempty and not value.strip():
        raise _Bad(name, "is empty; give it a value")
    return value


def _instance_id(raw: dict) -> str:
    ident = _text(raw, "instance_id")
    problem = name_problem(ident)
    if problem:  # ids name directories: '../x' would put a report outside its run
        raise _Bad("instance_id", f"{problem} (every record needs a unique id such as "
                                  f"'owner__repo-1234')")
    return ident


def _repo(raw: dict) -> str:
    repo = _text(raw, "repo", nonempty=True)
    if "/" not in repo.strip("/"):
        raise _Bad("repo", f"must be 'owner/name', got {repo!r}")
    return repo


def _tests(raw: dict, name: str, nonempty: bool) -> tuple[str, ...]:
    value = raw.get(name)
    expected = "must be a list of test ids or a JSON-encoded list"
    if value is None:
        raise _Bad(name, f"is missing; it {expected[5:]}")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise _Bad(name, f"{expected}, got a string that is not JSON: {_kind(value)}") from None
    if not isinstance(value, (list, tuple)):
        raise _Bad(name, f"{expected}, got {_kind(value)}")
    bad = [item for item in value if not isinstance(item, str) or not item.strip()]
    if bad:
        raise _Bad(name, f"must hold non-empty test-id strings, got {_kind(bad[0])}")
    if nonempty and not value:
        raise _Bad(name, "is an empty list; an instance needs at least one failing test that "
                         "the fix makes pass")
    return tuple(value)


def _patch(raw: dict, name: str, required: bool = True) -> str:
    patch = _text(raw, name, required=required)
    if not patch.strip():
        if required:
            raise _Bad(name, "is empty; it must be a unified diff")
        return ""
    if not re.search(r"^(diff --git |--- )", patch, re.MULTILINE) or "\n+++ " not in patch:
        raise _Bad(name, "is not a unified diff: it has no 'diff --git' / '---' / '+++' file "
                         "header; store the output of `git diff`")
    return patch


def _version(raw: dict) -> str:
    value = raw.get("version")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # some exports store "3.0" as a number
    return _text(raw, "version", required=False)


def _split(raw: dict) -> str:
    split = _text(raw, "split", required=False)
    if split not in SPLITS:
        raise _Bad("split", f"must be one of {', '.join(s for s in SPLITS if s)} or empty, "
                            f"got {split!r}")
    return split


_DIFFICULTY = {"<15 min fix": "easy", "15 min - 1 hour": "medium", "1-4 hours": "hard",
               ">4 hours": "hard", "easy": "easy", "medium": "medium", "hard": "hard", "": ""}


def _difficulty(raw: dict) -> str:
    value = _text(raw, "difficulty", required=False)
    if value not in _DIFFICULTY:
        raise _Bad("difficulty", f"must be easy, medium, hard or a SWE-bench Verified bucket "
                                 f"('<15 min fix', ...), got {value!r}")
    return _DIFFICULTY[value]


def _image(raw: dict) -> str:
    for name in ("image", "image_name", "docker_image"):
        if raw.get(name) is not None:
            return _text(raw, name)
    return ""


def _log_parser(raw: dict, repo: str) -> str:
    name = _text(raw, "log_parser", required=False) or repo
    for family in ("django", "sympy"):
        if family in name:
            return family
    return "pytest"


def _meta_json(raw: dict, used: set[str], extra: dict | None = None) -> str:
    meta = {k: v for k, v in raw.items() if k not in used and v is not None}
    meta.update(extra or {})
    return json.dumps(meta, sort_keys=True, default=str)


# --------------------------------------------------------------------------- formats


_SWE_BENCH_KEYS = {
    "instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch",
    "FAIL_TO_PASS", "PASS_TO_PASS", "hints_text", "created_at", "version",
    "environment_setup_commit", "split", "difficulty", "image", "image_name", "docker_image",
    "eval_script",
}


def _common(raw: dict, source: str) -> dict:
    """The fields that SWE-bench, SWE-Gym, SWE-rebench and SWE-smith share."""
    ident, repo = _instance_id(raw), _repo(raw)
    return dict(
        instance_id=ident, repo=repo,
        problem_statement=_text(raw, "problem_statement", nonempty=True),
        fail_to_pass=_tests(raw, "FAIL_TO_PASS", nonempty=True),
        pass_to_pass=_tests(raw, "PASS_TO_PASS", nonempty=False),
        source=source, split=_split(raw), difficulty=_difficulty(raw), version=_version(raw),
        environment_setup_commit=_text(raw, "environment_setup_commit", required=False),
        hints_text=_text(raw, "hints_text", required=False),
        created_at=_text(raw, "created_at", required=False),
        image=_image(raw), log_parser=_log_parser(raw, repo),
    )


def from_swe_bench(raw: dict, source: str = "swe-bench") -> Instance:
    """A SWE-bench / Verified / Lite / SWE-Gym record; its environment is SWE-bench's spec."""
    common = _common(raw, source)
    return Instance(
        **common, base_commit=_text(raw, "base_commit", nonempty=True),
        patch=_patch(raw, "patch"), test_patch=_patch(raw, "test_patch"),
        env=_spec_env(raw, common), meta_json=_meta_json(raw, _SWE_BENCH_KEYS),
    )


def _spec_env(raw: dict, common: dict) -> EnvSpec:
    return swebench_env(common["repo"], common["version"], image=common["image"],
                        eval_script=_text(raw, "eval_script", required=False))


def from_swe_rebench(raw: dict) -> Instance:
    """A SWE-rebench record: SWE-bench fields plus `install_config` and `meta`."""
    config = _install_config(raw)
    meta = raw.get("meta") if isinstance(raw.get("meta"), dict) else {}
    if raw.get("meta") is not None and not meta:
        meta = {"meta": raw["meta"]}
    unmapped = {k: v for k, v in config.items() if k not in _ENV_KEYS and v is not None}
    extra = {**meta, **({"install_config": unmapped} if unmapped else {})}
    return Instance(
        **_common(raw, "swe-rebench"), base_commit=_text(raw, "base_commit", nonempty=True),
        patch=_patch(raw, "patch"), test_patch=_patch(raw, "test_patch"),
        env=_env_from_install_config(config, _text(raw, "eval_script", required=False)),
        meta_json=_meta_json(raw, _SWE_BENCH_KEYS | {"install_config", "meta"}, extra),
    )


_ENV_KEYS = ("python", "pre_install", "reqs_path", "pip_packages", "install", "test_cmd")


def _install_config(raw: dict) -> dict:
    config = raw.get("install_config")
    if config is None:
        raise _Bad("install_config", "is missing; a SWE-rebench record needs it (or load the "
                                     "file with format='swe-bench')")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError:
            raise _Bad("install_config", f"must be a mapping or a JSON-encoded mapping, got a "
                                         f"string that is not JSON: {_kind(config)}") from None
    if not isinstance(config, dict):
        raise _Bad("install_config", f"must be a mapping with python, install, test_cmd, ..., "
                                     f"got {_kind(config)}")
    return config


def _env_from_install_config(config: dict, eval_script: str) -> EnvSpec:
    def text(name: str, default: str) -> str:
        value = config.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise _Bad(f"install_config.{name}", f"must be a string (quote versions such as "
                                                 f"'3.10'), got {_kind(value)}")
        return value

    test_cmd = config.get("test_cmd")
    if isinstance(test_cmd, list) and all(isinstance(c, str) for c in test_cmd):
        config = {**config, "test_cmd": " && ".join(test_cmd)}
    return EnvSpec(
        python=text("python", EnvSpec.python), install=text("install", ""),
        test_cmd=text("test_cmd", DEFAULT_TEST_CMD) or DEFAULT_TEST_CMD,
        pre_install=_strings(config, "pre_install", split=False),
        reqs_path=_strings(config, "reqs_path", split=False),
        pip_packages=_strings(config, "pip_packages", split=True),
        eval_script=eval_script,
    )


def _strings(config: dict, name: str, split: bool,
             where: str = "install_config") -> tuple[str, ...]:
    """A list of strings; a lone string is one item (or, with `split`, whitespace-separated)."""
    value = config.get(name)
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split()) if split else ((value,) if value.strip() else ())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise _Bad(f"{where}.{name}", f"must be a list of strings, got {_kind(value)}")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def install_config_from_recipe(recipe: dict) -> dict:
    """A verified recipe (python, pinned_requirements, install_cmd, install_env, test_cmd) as a
    SWE-rebench `install_config`. install_config has no field for variables, so `install_env`
    becomes a shell prefix of the install command (`VAR=value pip install -e .`); the value is
    then part of the command, and of the environment's cache key."""
    who = f"recipe {recipe.get('instance_id', '')!r}"
    for name in ("python", "install_cmd", "test_cmd"):
        if not isinstance(recipe.get(name), str) or not recipe[name].strip():
            raise ValueError(f"{who}: field {name!r} must be a non-empty string, got "
                             f"{_kind(recipe.get(name))}; fix the recipe.")
    pins = recipe.get("pinned_requirements") or []
    if not isinstance(pins, list) or not all(isinstance(p, str) for p in pins):
        raise ValueError(f"{who}: field 'pinned_requirements' must be a list of requirement "
                         f"strings, got {_kind(pins)}.")
    env = recipe.get("install_env") or {}
    bad = [k for k in env if not _ENV_NAME.fullmatch(str(k)) or not isinstance(env[k], str)]
    if not isinstance(env, dict) or bad:
        raise ValueError(f"{who}: field 'install_env' must map variable names to string values, "
                         f"got {_kind(env if not isinstance(env, dict) else bad[0])}.")
    prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in sorted(env.items()))
    return {"python": recipe["python"], "pip_packages": list(pins),
            "install": prefix + recipe["install_cmd"], "test_cmd": recipe["test_cmd"]}


_MIRROR_COMMIT = re.compile(r"\.([0-9a-f]{7,40})$")


def from_swe_smith(raw: dict) -> Instance:
    """A SWE-smith record: `patch` introduces the bug, so the gold fix is its reverse."""
    common, bug = _common(raw, "swe-smith"), _patch(raw, "patch")
    try:
        fix = reverse_patch(bug)
    except ValueError as exc:
        raise _Bad("patch", f"cannot be reversed into a fix: {exc}") from None
    upstream = _MIRROR_COMMIT.search(common["repo"])
    extra = {"bug_patch": bug, "upstream_commit": upstream.group(1) if upstream else ""}
    return Instance(
        **common, base_commit=_text(raw, "base_commit", required=False) or common["instance_id"],
        patch=fix, test_patch=_patch(raw, "test_patch", required=False),
        env=_spec_env(raw, common),
        meta_json=_meta_json(raw, _SWE_BENCH_KEYS | {"base_commit"}, extra),
    )


_ROW_OPTIONAL = ("source", "split", "difficulty", "version", "environment_setup_commit",
                 "hints_text", "created_at", "image", "log_parser", "meta_json")


def from_internal(raw: dict) -> Instance:
    """A row in `Instance.to_row()` shape (the `export --out x.jsonl` format)."""
    known = sorted(f.name for f in fields(Instance))
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise _Bad(unknown[0], f"is not an instance field; valid fields: {', '.join(known)}")
    row = {name: _text(raw, name) for name in _ROW_OPTIONAL if raw.get(name) is not None}
    row.update(instance_id=_instance_id(raw), repo=_repo(raw),
               base_commit=_text(raw, "base_commit", nonempty=True),
               problem_statement=_text(raw, "problem_statement", nonempty=True),
               patch=_patch(raw, "patch"), test_patch=_patch(raw, "test_patch", required=False),
               fail_to_pass=_tests(raw, "fail_to_pass", nonempty=True),
               pass_to_pass=_tests(raw, "pass_to_pass", nonempty=False),
               env=_env_from_row(raw.get("env")))
    _check_choice(row, "source", SOURCES)
    _check_choice(row, "split", SPLITS)
    _check_choice(row, "difficulty", ("", "easy", "medium", "hard"))
    return Instance(**row)


def _check_choice(row: dict, name: str, choices: tuple[str, ...]) -> None:
    if name in row and row[name] not in choices:
        raise _Bad(name, f"must be one of {', '.join(repr(c) for c in choices)}, got {row[name]!r}")


def _env_from_row(env: Any) -> EnvSpec:
    if env is None:
        return EnvSpec()
    if not isinstance(env, dict):
        raise _Bad("env", f"must be a mapping of EnvSpec fields, got {_kind(env)}")
    defaults = EnvSpec()
    valid = [f.name for f in fields(EnvSpec)]
    values = {}
    for key, value in env.items():
        if key not in valid:
            raise _Bad(f"env.{key}", f"is not an EnvSpec field; valid fields: {', '.join(valid)}")
        if value is None:
            continue
        if not isinstance(getattr(defaults, key), str):
            values[key] = _strings(env, key, split=False, where="env")
        elif isinstance(value, str):
            values[key] = value
        else:
            raise _Bad(f"env.{key}", f"must be a string, got {_kind(value)}")
    return EnvSpec(**values)


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


def select(instances: list[Instance], split: str = "", ids: tuple[str, ...] = ()) -> list[Instance]:
    """The instances of one split (all when "") and, if given, only these ids."""
    wanted = set(ids)
    return [i for i in instances if (not split or i.split == split)
            and (not wanted or i.instance_id in wanted)]

