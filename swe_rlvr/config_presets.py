"""Presets, and the layers a config is resolved from, each value with the layer that set it.

A preset is a named bundle of values in a YAML file, `configs/presets/<name>.yaml` (shipped as
package data). The paper presets (`nebius`, `agent-rlvr`) set a method; the hardware presets
(`cpu-2core`, `gpu-1x`) set how it runs: engine precision, threads and batch, the trainer's
memory and speed switches, the sandbox backend, concurrency. A config names one or a list:

    preset: nebius                # one
    preset: [nebius, gpu-1x]      # applied in order, so gpu-1x wins where both set a key

A config resolves in layers, each over the ones before: the dataclass defaults, each preset in
order, the file's own values, then the dotted overrides (an override `preset=...` replaces the
file's list). `swe-rlvr config show` names each value's layer: `default`, `preset:<name>`,
`file` or `override`. A preset file sets values only, as a config file does, and names no preset
itself: one level, so the order is the one the config wrote.
"""

from __future__ import annotations

import copy
import difflib
import functools
import typing
from pathlib import Path
from typing import Any

from swe_rlvr.config_choices import Preset
from swe_rlvr.config_loading import (
    CONFIG_DIR,
    ConfigError,
    deep_merge,
    find_config,
    read_yaml,
    with_overrides,
)

PRESET_DIR = CONFIG_DIR / "presets"
"""One file per preset, named after it."""

PRESETS: tuple[str, ...] = typing.get_args(Preset)
"""The presets' names, in the Literal's order (tests/test_presets.py checks each has its file)."""

Layer = tuple[str, dict]
"""(source, the raw values it sets): `preset:<name>`, `file` or `override`."""


def preset_names(value: Any) -> list[str]:
    """The names a `preset` value holds: none (None or ""), one name, or a list of names."""
    if value is None or value == "":
        return []
    names = list(value) if isinstance(value, (list, tuple)) else [value]
    for name in names:
        if not isinstance(name, str) or name not in PRESETS:
            near = difflib.get_close_matches(str(name), PRESETS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"Unknown preset {name!r}; choose one of: {', '.join(PRESETS)}{hint}, "
                              f"or a list of them applied in order, e.g. preset: [nebius, gpu-1x].")
    return names


def preset_path(name: str) -> Path:
    """The file of preset `name`."""
    return PRESET_DIR / f"{preset_names(name)[0]}.yaml"


def preset_values(name: str) -> dict:
    """The raw values preset `name` sets (a fresh copy)."""
    return copy.deepcopy(_read_preset(name))


@functools.cache
def _read_preset(name: str) -> dict:
    path = preset_path(name)
    values = read_yaml(path)
    if "preset" in values:
        raise ConfigError(f"Preset file {str(path)!r} names presets itself; a preset sets values "
                          f"only. Name the presets in the config, e.g. preset: [nebius, {name}].")
    return values


def resolve(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
            presets: list[str] | tuple[str, ...] = ()) -> tuple[dict, list[Layer]]:
    """The raw values of a config (its presets, then its file, then `overrides`), and its layers in
    the order applied. `presets` follow the ones the file or an override names."""
    file = read_yaml(find_config(path)) if path else {}
    data = with_overrides(file, overrides)
    names = preset_names(data.get("preset")) + preset_names(list(presets))
    top = with_overrides({}, overrides)
    if presets:
        data["preset"] = top["preset"] = names
    layers = [(f"preset:{name}", preset_values(name)) for name in names]
    base: dict = functools.reduce(deep_merge, (values for _, values in layers), {})
    return deep_merge(base, data), [*layers, ("file", file), ("override", top)]


def sources(layers: list[Layer]) -> dict[str, str]:
    """Each dotted key any layer sets -> the source of the last layer that sets it. A section left
    empty (`algorithm:`) shows as its own key, which no value of the config has."""
    out: dict[str, str] = {}
    for source, values in layers:
        for key in _leaves(values, ""):
            out[key] = source
    return out


def _leaves(node: dict, prefix: str) -> list[str]:
    keys = []
    for key, value in node.items():
        if isinstance(value, dict):
            keys += _leaves(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys
