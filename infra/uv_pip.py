"""`uv pip install` into the running Python's environment, under pip's own configuration.

    .venv/bin/python infra/uv_pip.py [--print-args] PIP_INSTALL_ARGS...

infra/install.sh (for infra/setup.sh and infra/vllm-cpu/setup.sh) installs with uv where uv can
be had: a fresh quickstart `.venv` took 143 s with uv against 234 s with pip (2 busy cores, most
of uv's time in writing .pyc files), and set-up is part of every quickstart's and every CI run's
wall time. uv does not read pip's configuration, so this script reads it (`pip config list`:
pip.conf files and PIP_* variables alike) and passes on what decides which files get installed:

| pip                  | uv                                   |
| -------------------- | ------------------------------------ |
| index-url            | --index-url                          |
| extra-index-url      | --extra-index-url (each)             |
| find-links           | --find-links (each)                  |
| constraint           | --constraint (each)                  |
| no-index             | --no-index                           |
| trusted-host         | --allow-insecure-host (each)         |
| cert                 | SSL_CERT_FILE (unless already set)   |

`--index-strategy unsafe-best-match` makes uv pick, as pip does, the best version over all
indexes and links; uv's default takes a package from the first index that has it, and on a
machine whose local index holds older releases it installed a different set (transformers 5.17
instead of 5.23). With it, the quickstart profile resolved to the same 206 packages as pip.
`--compile-bytecode` writes the .pyc files at install, as pip does, so that the first import of
torch or Prefect (in a quickstart, or in every test worker at once) does not pay for it.

Any other pip setting is not translated; infra/install.sh falls back to pip when this script fails.
`--print-args` prints the uv command instead of running it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

LIST_FLAGS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links",
              "constraint": "--constraint", "trusted-host": "--allow-insecure-host"}
"""pip settings holding whitespace-separated values, each passed as its own uv flag."""


def pip_settings(lines: Iterable[str]) -> dict[str, list[str]]:
    """`pip config list` output -> {setting: values}, every scope merged in the order listed.

    A line reads `scope.setting='value'` (`global.find-links='/opt/wheels'`,
    `:env:.cert='/etc/ca.pem'`); the value is a Python literal. A value seen twice is kept once.
    """
    settings: dict[str, list[str]] = {}
    for line in lines:
        key, sep, literal = line.strip().partition("=")
        if not sep:
            continue
        name = key.rsplit(".", 1)[-1]
        value = ast.literal_eval(literal)
        for v in str(value).split() if name in LIST_FLAGS else [str(value)]:
            if v not in settings.setdefault(name, []):
                settings[name].append(v)
    return settings


def uv_flags(settings: dict[str, list[str]]) -> list[str]:
    """uv's flags for the pip settings that choose what is installed (the module's table)."""
    flags = ["--index-strategy", "unsafe-best-match", "--compile-bytecode"]
    if "index-url" in settings:
        flags += ["--index-url", settings["index-url"][-1]]
    for name, flag in LIST_FLAGS.items():
        for value in settings.get(name, []):
            flags += [flag, value]
    if settings.get("no-index", ["false"])[-1].lower() in ("1", "true", "yes", "on"):
        flags.append("--no-index")
    return flags


def main(argv: list[str]) -> int:
    print_only = argv[:1] == ["--print-args"]
    args = argv[1:] if print_only else argv
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], check=True,
                            capture_output=True, text=True).stdout.splitlines()
    settings = pip_settings(listed)
    uv = Path(sys.executable).with_name("uv")
    command = [str(uv), "pip", "install", "--python", sys.executable, *uv_flags(settings), *args]
    if print_only:
        print(" ".join(command))
        return 0
    env = dict(os.environ)
    if "cert" in settings and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = settings["cert"][-1]
    return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
