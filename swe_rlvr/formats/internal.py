"""Internal records: JSON lines in `Instance.to_row()` shape, as `export --out x.jsonl` writes them;
an unknown field or `env` key is refused with the list of valid ones."""

from __future__ import annotations

import dataclasses
from typing import Any

from swe_rlvr.formats import fields
from swe_rlvr.formats.fields import BadField, describe
from swe_rlvr.instances import DIFFICULTIES, SOURCES, SPLITS, EnvSpec, Instance

_ROW_OPTIONAL = ("source", "split", "difficulty", "version", "environment_setup_commit",
                 "hints_text", "created_at", "image", "log_parser", "meta_json")


def from_internal(raw: dict) -> Instance:
    """A row in `Instance.to_row()` shape (the `export --out x.jsonl` format)."""
    known = sorted(f.name for f in dataclasses.fields(Instance))
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise BadField(unknown[0], f"is not an instance field; valid fields: {', '.join(known)}")
    row: dict[str, Any] = {name: fields.text(raw, name) for name in _ROW_OPTIONAL if raw.get(name) is not None}
    row.update(instance_id=fields.instance_id(raw), repo=fields.repo(raw),
                                  base_commit=fields.text(raw, "base_commit", nonempty=True),
               problem_statement=fields.text(raw, "problem_statement", nonempty=True),
               patch=fields.patch(raw, "patch"),
               test_patch=fields.patch(raw, "test_patch", required=False),
               fail_to_pass=fields.tests(raw, "fail_to_pass", nonempty=True),
               pass_to_pass=fields.tests(raw, "pass_to_pass", nonempty=False),
               env=_env_from_row(raw.get("env")))
    _check_choice(row, "source", SOURCES)
    _check_choice(row, "split", SPLITS)
    _check_choice(row, "difficulty", DIFFICULTIES)
    return Instance(**row)


def _check_choice(row: dict, name: str, choices: tuple[str, ...]) -> None:
    if name in row and row[name] not in choices:
        raise BadField(name, f"must be one of {', '.join(repr(c) for c in choices)}, "
                             f"got {row[name]!r}")


def _env_from_row(env: Any) -> EnvSpec:
    if env is None:
        return EnvSpec()
    if not isinstance(env, dict):
        raise BadField("env", f"must be a mapping of EnvSpec fields, got {describe(env)}")
    defaults = EnvSpec()
    valid = [f.name for f in dataclasses.fields(EnvSpec)]
    values: dict[str, Any] = {}
    for key, value in env.items():
        if key not in valid:
            raise BadField(f"env.{key}", f"is not an EnvSpec field; valid fields: "
                                         f"{', '.join(valid)}")
        if value is None:
            continue
        if not isinstance(getattr(defaults, key), str):
            values[key] = fields.strings(env, key, split=False, where="env")
        elif isinstance(value, str):
            values[key] = value
        else:
            raise BadField(f"env.{key}", f"must be a string, got {describe(value)}")
    return EnvSpec(**values)
