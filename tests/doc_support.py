"""The runnable command blocks of the documentation, and how a test runs one.

A fenced `bash` block is runnable when the line directly before its fence is the comment

    <!-- doctest: run -->
    <!-- doctest: run append="orchestration.iterations=1 engine.name=scripted:weak" -->

The `append` words go at the end of every `swe-rlvr` command of the block that takes config
overrides (`train`, `quickstart`, `grade`, `experiment ladder`, ...; not `instances` or `model`):
they make a command that takes half an hour in the docs take seconds in a test. `{tiny_model}` in them stands for a
tiny random model built by the test session and `{tmp}` for the block's temp directory.

A block runs as one bash script (`set -euo pipefail`) in a temp directory of its own, with the
repository's `configs/` linked in and a copy of `docs/ladder/`, so the docs' relative paths
(`--config configs/quickstart.yaml`, `runs/...`) mean what they say and nothing is written into
the checkout. A command that fails fails the block, naming the file and line of its fence.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!--\s*doctest:\s*run(?P<options>.*?)-->\s*$")
APPEND = re.compile(r'^\s*append="(?P<words>[^"]*)"\s*$')
FLOW_COMMANDS = {"train", "rft", "evaluate", "quickstart", "serve", "deploy"}
"""`swe-rlvr` commands that run whole Prefect flows: their blocks belong to the e2e tier."""
OPERATORS = {"&&", "||", ";", "|", "&"}
HYGIENE = ("sandbox.workdir={tmp}/work",)
"""Put before a block's own `append` on commands that take overrides: working copies in the
block's temp directory, not the machine's shared one."""


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    """1-based line of the opening fence."""
    commands: tuple[str, ...]
    """The block's logical lines (continuations joined), comments kept as written."""
    append: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path}:{self.line}"

    @property
    def runs_flow(self) -> bool:
        return any(_runs_flow(_words(c)) for c in self.commands)


class BlockFailed(AssertionError):
    """A documented command block exited non-zero."""


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def collect(path: Path) -> list[Block]:
    """The runnable blocks of one Markdown file; a marker not followed by a bash fence is an error.
    Markers inside other fenced blocks (a page showing the convention) are text, not markers."""
    lines = path.read_text().splitlines()
    blocks, fenced = [], False
    for i, text in enumerate(lines):
        if text.strip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else MARKER.match(text.strip())
        if not match:
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```bash":
            raise ValueError(f"{path}:{i + 1}: a doctest marker must stand directly before a ```bash fence")
        options = match.group("options").strip()
        append = APPEND.match(options) if options else None
        if options and not append:
            raise ValueError(f'{path}:{i + 1}: unknown doctest options {options!r}; use append="..."')
        end = next((j for j in range(i + 2, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"{path}:{i + 2}: the ```bash fence is never closed")
        blocks.append(Block(path, i + 2, tuple(_logical(lines[i + 2:end])),
                            tuple(append.group("words").split()) if append else ()))
    return blocks


def _logical(lines: list[str]) -> list[str]:
    """Lines with their backslash continuations joined."""
    out, pending = [], ""
    for text in lines:
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        out.append(pending + text)
        pending = ""
    if pending:
        out.append(pending)
    return [t for t in out if t.strip()]


def _words(command: str) -> list[str]:
    return shlex.split(command, comments=True)


def _runs_flow(words: list[str]) -> bool:
    if not words or Path(words[0]).name != "swe-rlvr":
        return False
    args = [w for w in words[1:] if not w.startswith("-")]
    if args[:1] and args[0] in FLOW_COMMANDS:
        return True
    return args[:2] == ["experiment", "ladder"] and "--plan" not in words


def _takes_overrides(words: list[str]) -> bool:
    args = [w for w in words[1:] if not w.startswith("-")]
    return bool(args) and (args[0] in FLOW_COMMANDS | {"grade"} or args[:2] == ["experiment", "ladder"])


def script(block: Block, tiny_model: Path | str, tmp: Path) -> str:
    """The bash script a block runs as: each `swe-rlvr` command with the overrides appended."""
    lines = ["set -euo pipefail"]
    for command in block.commands:
        words = _words(command)
        if not words or Path(words[0]).name != "swe-rlvr":
            lines.append(command)
            continue
        if OPERATORS & set(words):
            raise ValueError(f"{block.where}: a swe-rlvr command of a runnable block must stand "
                             f"alone on its line, without {' '.join(sorted(OPERATORS & set(words)))}")
        extra = [*HYGIENE, *block.append] if _takes_overrides(words) else []
        extra = [w.replace("{tiny_model}", str(tiny_model)).replace("{tmp}", str(tmp)) for w in extra]
        lines.append(shlex.join(["swe-rlvr", *words[1:], *extra]))
    return "\n".join(lines) + "\n"


def prepare(tmp: Path) -> None:
    """The block's working directory: configs/ linked, docs/ladder/ copied."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "configs").symlink_to(ROOT / "configs")
    shutil.copytree(ROOT / "docs" / "ladder", tmp / "docs" / "ladder")


def run(block: Block, tiny_model: Path | str, tmp: Path, timeout: float = 900) -> str:
    """Run a block in `tmp`; its output, or `BlockFailed` naming the block and the failed command."""
    prepare(tmp)
    text = script(block, tiny_model, tmp)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               PREFECT_HOME=str(tmp / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180")
    proc = subprocess.run(["bash", "-c", text], cwd=tmp, env=env, capture_output=True, text=True,
                          timeout=timeout)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise BlockFailed(f"the command block at {block.where} exited {proc.returncode}.\n"
                          f"script:\n{text}\noutput (last 4000 characters):\n{output[-4000:]}")
    return output
