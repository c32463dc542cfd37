"""SWE-rebench records: SWE-bench's columns plus an `install_config` mapping (python, pre_install,
reqs_path, pip_packages, install, test_cmd) that becomes the `EnvSpec`, `meta` (kept in
`meta_json`) and an image under `image_name` or `docker_image`.

`install_config_from_recipe` turns a verified recipe (recipes.jsonl of the real dev set) into a
SWE-rebench `install_config`, so a plain record plus its recipe loads as a SWE-rebench record.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from swe_rlvr.formats import fields
from swe_rlvr.formats.fields import BadField, describe
from swe_rlvr.formats.swe_bench import SWE_BENCH_KEYS, common_fields
from swe_rlvr.instances import DEFAULT_TEST_CMD, EnvSpec, Instance


def from_swe_rebench(raw: dict) -> Instance:
    """A SWE-rebench record: SWE-bench fields plus `install_config` and `meta`."""
    config = _install_config(raw)
    meta: dict[str, Any] = raw["meta"] if isinstance(raw.get("meta"), dict) else {}
    if raw.get("meta") is not None and not meta:
        meta = {"meta": raw["meta"]}
    unmapped = {k: v for k, v in config.items() if k not in _ENV_KEYS and v is not None}
    extra = {**meta, **({"install_config": unmapped} if unmapped else {})}
    return Instance(
        **common_fields(raw, "swe-rebench"),
        base_commit=fields.text(raw, "base_commit", nonempty=True),
        patch=fields.patch(raw, "patch"), test_patch=fields.patch(raw, "test_patch"),
        env=_env_from_install_config(config, fields.text(raw, "eval_script", required=False)),
        meta_json=fields.meta_json(raw, SWE_BENCH_KEYS | {"install_config", "meta"}, extra),
    )


_ENV_KEYS = ("python", "pre_install", "reqs_path", "pip_packages", "install", "test_cmd")


def _install_config(raw: dict) -> dict:
    config = raw.get("install_config")
    if config is None:
        raise BadField("install_config", "is missing; a SWE-rebench record needs it (or load the "
                                         "file with format='swe-bench')")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError:
            raise BadField("install_config", "must be a mapping or a JSON-encoded mapping, got a "
                           f"string that is not JSON: {describe(config)}") from None
    if not isinstance(config, dict):
        raise BadField("install_config", f"must be a mapping with python, install, test_cmd, ..., "
                                         f"got {describe(config)}")
    return config


def _env_from_install_config(config: dict, eval_script: str) -> EnvSpec:
    def text(name: str, default: str) -> str:
        value = config.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise BadField(f"install_config.{name}", f"must be a string (quote versions such as "
                                                     f"'3.10'), got {describe(value)}")
        return value

    test_cmd = config.get("test_cmd")
    if isinstance(test_cmd, list) and all(isinstance(c, str) for c in test_cmd):
        config = {**config, "test_cmd": " && ".join(test_cmd)}
    return EnvSpec(
        python=text("python", EnvSpec.python), install=text("install", ""),
        test_cmd=text("test_cmd", DEFAULT_TEST_CMD) or DEFAULT_TEST_CMD,
        pre_install=fields.strings(config, "pre_install", split=False),
        reqs_path=fields.strings(config, "reqs_path", split=False),
        pip_packages=fields.strings(config, "pip_packages", split=True),
        eval_script=eval_script,
    )


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
                             f"{describe(recipe.get(name))}; fix the recipe.")
    pins = recipe.get("pinned_requirements") or []
    if not isinstance(pins, list) or not all(isinstance(p, str) for p in pins):
        raise ValueError(f"{who}: field 'pinned_requirements' must be a list of requirement "
                         f"strings, got {describe(pins)}.")
    env = recipe.get("install_env") or {}
    bad = [k for k in env if not _ENV_NAME.fullmatch(str(k)) or not isinstance(env[k], str)]
    if not isinstance(env, dict) or bad:
        raise ValueError(f"{who}: field 'install_env' must map variable names to string values, "
                         f"got {describe(env if not isinstance(env, dict) else bad[0])}.")
    prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in sorted(env.items()))
    return {"python": recipe["python"], "pip_packages": list(pins),
            "install": prefix + recipe["install_cmd"], "test_cmd": recipe["test_cmd"]}
