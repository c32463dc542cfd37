"""`swe-rlvr sandbox sweep`: remove what dead runs left behind, each package sweeping its own.

A run killed by SIGKILL or the OOM killer leaves leaks of three kinds, and the package that made
each kind sweeps it and says in one line what it removed: working copies and their processes
(`sandbox.workspace`), labelled docker containers (`sandbox.docker_sweep`), and orphaned
ephemeral Prefect API servers (`flows.ephemeral`). This command composes them in the entry point,
the one place that may know every package. It names them as "module:function" strings, imported
when the command runs, as `swe_rlvr.cli.COMMAND_GROUPS` names the command groups: swe_rlvr itself
imports no other package of the project.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    sandbox = sub.add_parser("sandbox", help="sandbox maintenance")
    sandbox_sub = sandbox.add_subparsers(dest="sandbox_command", metavar="COMMAND")
    sandbox_sub.required = True
    sweep = sandbox_sub.add_parser("sweep", help="remove leaked working copies and processes")
    sweep.add_argument("--older-than", type=float, default=None,
                       help="also remove copies older than this many seconds, live owner or not")
    sweep.add_argument("--workdir", default=None, help="sandbox root (default: sandbox.workdir)")
    sweep.add_argument("--config", default=None)
    sweep.set_defaults(handler=sweep_command)


def sweep_command(args: argparse.Namespace) -> int:
    """Sweep the working copies, then the containers, then the Prefect servers; a line each."""
    from swe_rlvr.config import load_config
    workdir = args.workdir or load_config(args.config).sandbox.workdir
    print(_call("sandbox.cli:sweep_copies_report", workdir, args.older_than))
    print(_call("sandbox.cli:sweep_containers_report", args.older_than))
    print(_call("flows.ephemeral:sweep_servers_report"))
    return 0


def _call(target: str, *args: Any) -> Any:
    """Call the "module:function" `target`, imported now."""
    module_name, func_name = target.split(":")
    return getattr(importlib.import_module(module_name), func_name)(*args)
