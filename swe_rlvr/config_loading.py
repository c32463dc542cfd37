"""Reading a config: YAML files, dotted overrides, and the checks every value passes on the way in.

`from_dict` builds any config dataclass from a mapping: an unknown key, a wrong type, a value
outside a choice field's `Literal` or a number outside its `RANGES` entry raises `ConfigError`
naming the key and the fix. `to_dict` and `flatten` turn a config back into plain data.

An optional key (`str | None`, e.g. sandbox.workdir) is None when absent. A file writes None as
`null` (or `~`), an override as `key=null` or `key=` (empty); "" reads as None too, which is how
configs and stored deployment parameters wrote "absent" before these keys were optional.

The shipped configs are package data (`CONFIG_DIR`, which in a checkout links to the repository's
`configs/`), so a path written `configs/<name>.yaml` that is missing here (a wheel install, or a
command run outside the checkout) reads the shipped file (`find_config`).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from swe_rlvr.config_ranges import RANGES

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
"""The shipped configs, `configs/presets/` among them (package data; a link to the repository's
`configs/` in a checkout)."""


class ConfigError(ValueError):
    """A config value or key is wrong; the message names the key and the fix."""


def check_range(key: str, value: Any, default: Any) -> None:
    """Refuse a number outside `RANGES[key]`, naming the key, the value, the range and the fix."""
    allowed = RANGES.get(key)
    if allowed is None or type(value) not in (int, float) or value in allowed:
        return
    raise ConfigError(f"Config key {key!r} is {value!r}, outside its range ({allowed}); set it "
                      f"within the range, e.g. {key}={default!r} (the default).")


def check_choice(key: str, value: Any, choices: tuple) -> Any:
    """`value` if it is one of `choices` (a Literal's values); else a ConfigError naming the key,
    the value and the choices, e.g. "guidance.mode='strp' is not one of: keep, strip, pairs"."""
    if any(type(value) is type(c) and value == c for c in choices):
        return value
    near = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise ConfigError(f"{key}={value!r} is not one of: {_listing(choices)}{hint}.")


def _listing(choices: tuple) -> str:
    return ", ".join(str(c) if c != "" else '""' for c in choices)


def with_overrides(data: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """A copy of the raw mapping `data` with dotted `key=value` overrides set on top."""
    data = copy.deepcopy(data)
    for item in overrides:
        key, value = parse_override(item)
        _set_dotted(data, key, value)
    return data


def find_config(path: str | Path) -> Path:
    """`path`; or, when it is `configs/<name>.yaml` and missing here, the shipped file of that name
    (a wheel install, or a command run outside the checkout)."""
    given = Path(path)
    if given.exists() or given.is_absolute() or given.parts[:1] != ("configs",):
        return given
    shipped = CONFIG_DIR.joinpath(*given.parts[1:])
    return shipped if shipped.is_file() else given


def read_yaml(path: str | Path) -> dict:
    """The mapping a YAML config file holds (a file of nothing is {})."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        shipped = ", ".join(f"configs/{p.name}" for p in sorted(CONFIG_DIR.glob("*.yaml")))
        raise ConfigError(f"Cannot read config file {str(path)!r}: {exc.strerror}. Pass an "
                          f"existing YAML file, e.g. one of the shipped {shipped}.") from exc
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"Config file {str(path)!r} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"Config file {str(path)!r} must hold a mapping of sections, "
                          f"got {type(data).__name__}.")
    return data


def parse_override(item: str) -> tuple[str, Any]:
    """`a.b=1` -> ("a.b", 1). Values parse as YAML scalars, so `true`, `0.3` and `[a, b]` work;
    `a.b=null` gives None and `a.b=` gives "" (either sets an optional key to None)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
        raise ConfigError(f"Bad override {item!r}; write it as section.key=value, "
                          f"e.g. algorithm.clip_high=0.3.")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"Bad override {item!r}: the value is not a YAML scalar ({exc}).") from exc
    return key.strip(), value


def _set_dotted(data: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:  # a missing section, or one left empty (`algorithm:`) in the YAML
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"Bad override {key!r}: {part!r} is a value, not a section.")
        node = child
    node[parts[-1]] = value


def deep_merge(base: dict, top: dict) -> dict:
    """`top` over `base`, section by section; an empty section in `top` keeps `base`'s."""
    out = dict(base)
    for key, value in top.items():
        if value is None and isinstance(out.get(key), dict):
            continue  # an empty section (`algorithm:`) keeps the preset's values
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def from_dict(cls: type, data: dict, prefix: str = "") -> Any:
    """Build dataclass `cls` from a mapping, checking every key and type."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'} must be a mapping of keys, "
                          f"got {type(data).__name__}.")
    hints = typing.get_type_hints(cls)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in defaults:
            where = prefix.rstrip(".") or "the top level"
            raise ConfigError(f"Unknown config key {prefix + str(key)!r} in {where}; "
                              f"valid keys: {', '.join(defaults)}.")
        kwargs[key] = _coerce(hints[key], value, f"{prefix}{key}")
        check_range(f"{prefix}{key}", kwargs[key], defaults[key])
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, key: str) -> Any:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_dict(tp, value if value is not None else {}, key + ".")
    origin = typing.get_origin(tp)
    if origin is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise _type_error(key, "a list", value)
        (item_tp, *_rest) = typing.get_args(tp)
        return tuple(_coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is typing.Literal:
        return check_choice(key, value, typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return _union(typing.get_args(tp), value, key)
    return _scalar(tp, value, key)


def _union(arms: tuple, value: Any, key: str) -> Any:
    """The first arm that takes `value` (e.g. trainer.compile: bool | Literal["auto"]). An optional
    key (an arm of None) takes null or "" as None, and anything else as its other arm does."""
    if type(None) in arms:
        if value is None or value == "":
            return None
        arms = tuple(arm for arm in arms if arm is not type(None))
        if len(arms) == 1:  # its errors, e.g. a choice's list of values
            return _coerce(arms[0], value, key)
    listed = any(typing.get_origin(arm) is tuple for arm in arms)
    for arm in arms:
        try:
            return _coerce(arm, value, key)
        except ConfigError:
            if listed and (typing.get_origin(arm) is tuple) == isinstance(value, (list, tuple)):
                raise  # one value or a list of them (`preset`): the error of the arm of its shape
    words = [w for arm in arms for w in _WORDS.get(arm, typing.get_args(arm))]
    raise _type_error(key, f"{', '.join(words[:-1])} or {words[-1]}", value)


_WORDS: dict[Any, tuple[str, ...]] = {bool: ("true", "false"), int: ("an integer",),
                                      float: ("a number",), str: ("a string",)}


def _scalar(tp: type, value: Any, key: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _type_error(key, "true or false", value)
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _type_error(key, "an integer", value)
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads `1e-6` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise _type_error(key, "a number", value)
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise _type_error(key, "a string", value)
    return value


def _type_error(key: str, expected: str, value: Any) -> ConfigError:
    return ConfigError(f"Config key {key!r} must be {expected}, got {value!r} "
                       f"({type(value).__name__}).")


def to_dict(cfg: Any) -> dict:
    """The config as plain YAML-able data (tuples become lists)."""
    def plain(v: Any) -> Any:
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v
    return plain(dataclasses.asdict(cfg))


def flatten(cfg: Any) -> dict[str, Any]:
    """Dotted keys -> values, for MLflow params."""
    out: dict[str, Any] = {}
    def walk(node: dict, prefix: str) -> None:
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                out[f"{prefix}{k}"] = v
    walk(to_dict(cfg), "")
    return out
