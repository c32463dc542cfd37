"""`swe-rlvr config show`: the resolved config, each value with the layer that set it.

    swe-rlvr config show --config configs/quickstart.yaml
    swe-rlvr config show --preset cpu-2core
    swe-rlvr config show --config configs/nebius-dapo.yaml --preset gpu-1x trainer.num_gpus=8
    swe-rlvr config show --preset nebius --preset gpu-1x --changed   # the non-defaults only

A source is `default`, `preset:<name>`, `file` or `override` (a KEY=VALUE, or --preset itself).
Values print as YAML scalars, so a line's key and value can be passed back as an override.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    from swe_rlvr.config_presets import PRESETS
    group = sub.add_parser("config", help="inspect configs: presets, files and overrides resolved")
    commands = group.add_subparsers(dest="config_command", metavar="COMMAND")
    commands.required = True
    show = commands.add_parser("show", help="print the resolved config, each value's source")
    show.add_argument("--config", default=None, help="YAML config (e.g. configs/quickstart.yaml)")
    show.add_argument("--preset", action="append", default=[], metavar="NAME",
                      help=f"apply preset NAME after the ones the config names (repeatable): "
                           f"{', '.join(PRESETS)}")
    show.add_argument("--changed", action="store_true", help="only the values that are not defaults")
    show.add_argument("--json", action="store_true", help="print {key: {value, source}} as JSON")
    show.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                      help="dotted overrides, e.g. algorithm.clip_high=0.3")
    show.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    from swe_rlvr.config import explain_config, find_config, flatten
    cfg, sources = explain_config(args.config, args.overrides, args.preset)
    values = flatten(cfg)
    keys = [k for k in values if not (args.changed and sources[k] == "default")]
    if args.json:
        print(json.dumps({k: {"value": values[k], "source": sources[k]} for k in keys}, indent=1))
        return 0
    if args.config:
        print(f"# {find_config(args.config)}")
    print(table([(k, text(values[k]), sources[k]) for k in keys]))
    return 0


def table(rows: list[tuple[str, str, str]]) -> str:
    """Key, value and source columns, left-aligned."""
    rows = [("key", "value", "source"), *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    return "\n".join(f"{k.ljust(widths[0])}  {v.ljust(widths[1])}  {s}" for k, v, s in rows)


def text(value: Any) -> str:
    """A value as a YAML scalar: null, true, [a, b], "" for the empty string."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(text(v) for v in value) + "]"
    return '""' if value == "" else str(value)
