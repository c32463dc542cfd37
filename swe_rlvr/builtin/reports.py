"""Bug reports for generated instances: a short CI-failure note built from pytest's output.

The report names the function and file that changed and quotes the first failing test as pytest's
`--tb=short` shows it: the test's own failing line and the `E` lines under it. Frames inside the
project's sources are left out, because they would quote the buggy line itself; so are pytest's
`^^^^` position markers, absolute paths and object addresses, which differ from run to run.

Simplification: one fixed template, no LM-written prose; it never says how to fix the bug.
"""

from __future__ import annotations

import re

MAX_SOURCE_LINES, MAX_E_LINES, MAX_LINE_CHARS = 2, 6, 110
_HEADER = re.compile(r"^_{2,} (.+?) _{2,}$")
_LOCATION = re.compile(r"^(\S+\.py):\d+: in \S+")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def statement(qualname: str, file: str, failing: list[str] | tuple[str, ...], log: str,
              workdir: str = "") -> str:
    """The issue text: a title naming the function, the failure count, and the first failure."""
    first = sorted(failing)[0]
    count = "1 test fails:" if len(failing) == 1 else f"{len(failing)} tests fail, for example:"
    excerpt = "\n".join(failure_excerpt(log, first, workdir))
    return (f"`{qualname}()` in {file} gives wrong results\n\n"
            f"Since the last change to {file}, {count}\n\n{first}\n{excerpt}\n")


def failure_excerpt(log: str, node_id: str, workdir: str = "") -> list[str]:
    """The failing test line(s) and `E` lines of `node_id`'s `--tb=short` section of `log`."""
    body = _section(log, node_id)
    test_file = node_id.split("::", 1)[0]
    source, errors, in_test = [], [], False
    for line in body:
        if location := _LOCATION.match(line):
            in_test = location.group(1) == test_file
        elif line.startswith("E "):
            errors.append(_clean(line, workdir))
        elif in_test and line.strip() and line.strip(" ^~") and not errors:
            source.append(_clean(line, workdir))
    return source[-MAX_SOURCE_LINES:] + errors[:MAX_E_LINES]


def _section(log: str, node_id: str) -> list[str]:
    """The lines under `node_id`'s failure header (pytest titles it by name, not by file)."""
    title = node_id.split("::", 1)[1].replace("::", ".")
    test_file = node_id.split("::", 1)[0]
    sections: list[tuple[str, list[str]]] = []
    for line in log.splitlines():
        if header := _HEADER.match(line):
            sections.append((header.group(1), []))
        elif line.startswith("=") and sections:
            sections.append(("", []))   # "== short test summary ==" and the like end a section
        elif sections:
            sections[-1][1].append(line)
    for name, lines in sections:
        if name == title and any(ln.startswith(f"{test_file}:") for ln in lines):
            return lines
    raise ValueError(f"no `--tb=short` failure section for {node_id} in the pytest log; run "
                     f"pytest with --tb=short -rA.")


def _clean(line: str, workdir: str) -> str:
    if workdir:
        line = line.replace(workdir.rstrip("/") + "/", "").replace(workdir.rstrip("/"), ".")
    line = _ADDRESS.sub(" at 0x...", line.rstrip())
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS - 3] + "..."
