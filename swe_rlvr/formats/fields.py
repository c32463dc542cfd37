"""Checks of one field of a raw instance record, shared by every format: each returns the field's
value in `Instance`'s terms, or raises `BadField`, whose message completes "field 'x' ...".

Simplifications:
- `log_parser` is reduced to the output family that a parser must understand: SWE-bench's
  `parse_log_django` -> "django", `parse_log_sympy` -> "sympy", and every other (pytest-based)
  parser -> "pytest". The original name stays in `meta_json` under `log_parser`.
- Columns that no field takes are kept in `meta_json` (values that JSON cannot hold as strings).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from typing import Any

from swe_rlvr.instances import SPLITS, name_problem


class BadField(Exception):
    """A field of one record is wrong: `problem` completes "field 'x' ..."."""

    def __init__(self, name: str, problem: str):
        super().__init__(problem)
        self.name, self.problem = name, problem


def describe(value: Any) -> str:
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def text(raw: dict, name: str, required: bool = True, nonempty: bool = False) -> str:
    value = raw.get(name)
    if value is None:
        if required:
            raise BadField(name, "is missing; every record of this format needs it")
        return ""
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    if not isinstance(value, str):
        raise BadField(name, f"must be a string, got {describe(value)}")
    if nonempty and not value.strip():
        raise BadField(name, "is empty; give it a value")
    return value


def instance_id(raw: dict) -> str:
    ident = text(raw, "instance_id")
    problem = name_problem(ident)
    if problem:  # ids name directories: '../x' would put a report outside its run
        raise BadField("instance_id", f"{problem} (every record needs a unique id such as "
                                      f"'owner__repo-1234')")
    return ident


def repo(raw: dict) -> str:
    repo = text(raw, "repo", nonempty=True)
    if "/" not in repo.strip("/"):
        raise BadField("repo", f"must be 'owner/name', got {repo!r}")
    return repo


def tests(raw: dict, name: str, nonempty: bool) -> tuple[str, ...]:
    value = raw.get(name)
    expected = "must be a list of test ids or a JSON-encoded list"
    if value is None:
        raise BadField(name, f"is missing; it {expected[5:]}")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise BadField(name, f"{expected}, got a string that is not JSON: "
                                 f"{describe(value)}") from None
    if not isinstance(value, (list, tuple)):
        raise BadField(name, f"{expected}, got {describe(value)}")
    bad = [item for item in value if not isinstance(item, str) or not item.strip()]
    if bad:
        raise BadField(name, f"must hold non-empty test-id strings, got {describe(bad[0])}")
    if nonempty and not value:
        raise BadField(name, "is an empty list; an instance needs at least one failing test that "
                             "the fix makes pass")
    return tuple(value)


def patch(raw: dict, name: str, required: bool = True) -> str:
    patch = text(raw, name, required=required)
    if not patch.strip():
        if required:
            raise BadField(name, "is empty; it must be a unified diff")
        return ""
    if not re.search(r"^(diff --git |--- )", patch, re.MULTILINE) or "\n+++ " not in patch:
        raise BadField(name, "is not a unified diff: it has no 'diff --git' / '---' / '+++' file "
                             "header; store the output of `git diff`")
    return patch


def version(raw: dict) -> str:
    value = raw.get("version")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # some exports store "3.0" as a number
    return text(raw, "version", required=False)


def split(raw: dict) -> str:
    split = text(raw, "split", required=False)
    if split not in SPLITS:
        raise BadField("split", f"must be one of {', '.join(s for s in SPLITS if s)} or empty, "
                                f"got {split!r}")
    return split


_DIFFICULTY = {"<15 min fix": "easy", "15 min - 1 hour": "medium", "1-4 hours": "hard",
               ">4 hours": "hard", "easy": "easy", "medium": "medium", "hard": "hard", "": ""}


def difficulty(raw: dict) -> str:
    value = text(raw, "difficulty", required=False)
    if value not in _DIFFICULTY:
        raise BadField("difficulty", f"must be easy, medium, hard or a SWE-bench Verified bucket "
                                     f"('<15 min fix', ...), got {value!r}")
    return _DIFFICULTY[value]


def image(raw: dict) -> str:
    for name in ("image", "image_name", "docker_image"):
        if raw.get(name) is not None:
            return text(raw, name)
    return ""


def log_parser(raw: dict, repo: str) -> str:
    name = text(raw, "log_parser", required=False) or repo
    for family in ("django", "sympy"):
        if family in name:
            return family
    return "pytest"


def meta_json(raw: dict, used: set[str], extra: dict | None = None) -> str:
    meta = {k: v for k, v in raw.items() if k not in used and v is not None}
    meta.update(extra or {})
    return json.dumps(meta, sort_keys=True, default=str)


def strings(config: dict, name: str, split: bool,
            where: str = "install_config") -> tuple[str, ...]:
    """A list of strings; a lone string is one item (or, with `split`, whitespace-separated)."""
    value = config.get(name)
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split()) if split else ((value,) if value.strip() else ())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise BadField(f"{where}.{name}", f"must be a list of strings, got {describe(value)}")
