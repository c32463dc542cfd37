"""The agent's tools, run inside a sandbox: SWE-agent's set (Nebius) and mini-swe-agent's bash-only set.

*swe-agent* scaffold: any shell command, plus the file viewer and editors
`open FILE [LINE]`, `goto LINE`, `scroll_up`, `scroll_down`, `create FILE` (optional heredoc body),
`edit START:END` (heredoc body replaces lines START..END, 1-based, inclusive; END = START-1 inserts),
`replace [FILE]` (two heredocs: old text, new text; the old text must occur exactly once),
`search_file TERM [FILE]` and `submit`. The viewer keeps per-episode state (open file, first line
shown) and shows numbered windows of `AgentConfig.window` lines.

*bash* scaffold (mini-swe-agent): every block is a shell command. The episode ends with a block that
is exactly `submit` (in both scaffolds; chosen over mini-swe-agent's `echo COMPLETE_TASK...` sentinel
so one word means the same thing everywhere).

Every file operation goes through `Sandbox.execute/read_file/write_file`, so the tools work on the
local and docker backends alike. Commands do not share a shell: `cd` does not persist between turns.

Simplifications: no linting after edits (SWE-agent's flake8 guard) and no `find_file`/`search_dir`
(shell `grep`/`find` cover them); an unknown tool is recognised only as a simple one-line command that
the shell answers with exit code 127 ("command not found").
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.actions import SHELL, Action, FormatError, Submitted, ToolSpec
from swe_rlvr.config import AgentConfig

if TYPE_CHECKING:
    from sandbox.base import ExecResult, Sandbox

SUBMIT = ToolSpec("submit")

SWE_AGENT_TOOLS: dict[str, ToolSpec] = {
    "open": ToolSpec("open FILE [LINE]", 1, 2),
    "goto": ToolSpec("goto LINE", 1, 1),
    "scroll_up": ToolSpec("scroll_up"),
    "scroll_down": ToolSpec("scroll_down"),
    "create": ToolSpec("create FILE, optionally followed by <<'EOF' ... EOF", 1, 1, (0, 1)),
    "edit": ToolSpec("edit START:END <<'EOF' (new lines) EOF", 1, 1, (1,)),
    "replace": ToolSpec("replace [FILE] <<'OLD' <<'NEW', then the old text, OLD, the new text, NEW",
                        0, 1, (2,)),
    "search_file": ToolSpec("search_file TERM [FILE]", 1, 2),
    "submit": SUBMIT,
}
BASH_TOOLS: dict[str, ToolSpec] = {"submit": SUBMIT}

_RANGE = re.compile(r"^(\d+):(\d+)$")
_SIMPLE = re.compile(r"^[\w./+-]+(?:[ \t]+[^;&|`$()<>\n]*)?$")
MAX_MATCHES = 50


def render_result(result: ExecResult) -> str:
    """A shell result as an observation: its output, then notes and the exit code."""
    text = result.output if result.output.strip() else "(no output)"
    notes = []
    if result.timed_out:
        notes.append(f"[the command timed out after {result.duration_s:.0f} s and was killed]")
    if result.truncated:
        notes.append("[the output was truncated by the sandbox]")
    notes.append(f"[exit code {result.exit_code}]")
    return "\n".join([text.rstrip("\n"), *notes])


class BashTools:
    """mini-swe-agent's scaffold: every block is a shell command; `submit` ends the episode."""

    specs = BASH_TOOLS

    def __init__(self, sandbox: Sandbox, cfg: AgentConfig):
        self.sandbox, self.cfg = sandbox, cfg

    def run(self, action: Action) -> str:
        """Execute an action and return its observation (raises Submitted / FormatError)."""
        if action.tool == SHELL:
            return self.shell(action.command)
        return getattr(self, f"tool_{action.tool}")(*action.args, bodies=action.bodies)

    def shell(self, command: str) -> str:
        return render_result(self.sandbox.execute(command))

    def tool_submit(self, bodies: tuple[str, ...] = ()) -> str:
        raise Submitted("Submitted.")


@dataclass
class _File:
    path: str
    lines: list[str]
    newline_at_end: bool

    @classmethod
    def parse(cls, path: str, text: str) -> _File:
        ends = text.endswith("\n") or not text
        lines = text.split("\n")
        return cls(path, lines[:-1] if ends else lines, ends)

    def text(self) -> str:
        return "\n".join(self.lines) + ("\n" if self.lines and self.newline_at_end else "")


class SweAgentTools(BashTools):
    """SWE-agent's tools (Nebius's set) plus the shell; holds the viewer state of one episode."""

    specs = SWE_AGENT_TOOLS

    def __init__(self, sandbox: Sandbox, cfg: AgentConfig):
        super().__init__(sandbox, cfg)
        self.path, self.top = "", 1

    def shell(self, command: str) -> str:
        result = self.sandbox.execute(command)
        word = command.split()[0]
        if result.exit_code == 127 and _SIMPLE.match(command) and f"{word}: command not found" in result.output:
            raise FormatError(f"Unknown tool or command `{word}`. Tools: "
                              f"{', '.join(self.specs)}; any other command runs in bash.")
        return render_result(result)

    # -- viewer ----------------------------------------------------------------------------

    def tool_open(self, path: str, line: str = "", bodies: tuple[str, ...] = ()) -> str:
        file = self._read(path)
        if isinstance(file, str):
            return file
        self.path = path
        return self._show(file, _int(line, "open FILE [LINE]") if line else 1)

    def tool_goto(self, line: str, bodies: tuple[str, ...] = ()) -> str:
        return self._show(self._open_file(), _int(line, "goto LINE"))

    def tool_scroll_down(self, bodies: tuple[str, ...] = ()) -> str:
        return self._show(self._open_file(), self.top + self.cfg.window, center=False)

    def tool_scroll_up(self, bodies: tuple[str, ...] = ()) -> str:
        return self._show(self._open_file(), self.top - self.cfg.window, center=False)

    def _show(self, file: _File | str, line: int, center: bool = True) -> str:
        if isinstance(file, str):
            return file
        n, size = len(file.lines), self.cfg.window
        top = line - size // 2 if center else line
        self.top = top = max(1, min(top, n - size + 1))
        end = min(n, top + size - 1)
        out = [f"[File: {file.path} ({n} lines total)]"]
        out += [f"({top - 1} more lines above)"] if top > 1 else []
        out += [f"{i}:{file.lines[i - 1]}" for i in range(top, end + 1)] or ["(the file is empty)"]
        out += [f"({n - end} more lines below)"] if end < n else []
        return "\n".join(out)

    # -- editors ---------------------------------------------------------------------------

    def tool_create(self, path: str, bodies: tuple[str, ...] = ()) -> str:
        folder = path.rsplit("/", 1)[0] if "/" in path else "."
        check = self.sandbox.execute(f"if [ -e {shlex.quote(path)} ]; then echo exists; "
                                     f"else mkdir -p -- {shlex.quote(folder)}; fi")
        if check.output.strip() == "exists":
            return f"{path} already exists; `open` it and use `edit` or `replace` to change it."
        text = bodies[0] + "\n" if bodies and bodies[0] else ""
        self.sandbox.write_file(path, text)
        self.path = path
        return self._show(_File.parse(path, text), 1)

    def tool_edit(self, span: str, bodies: tuple[str, ...] = ()) -> str:
        file = self._open_file()
        if isinstance(file, str):
            return file
        start, end = _edit_range(span, len(file.lines))
        file.lines[start - 1:end] = bodies[0].split("\n") if bodies[0] else []
        self.sandbox.write_file(file.path, file.text())
        return "Edited. Check the result:\n" + self._show(file, start)

    def tool_replace(self, path: str = "", bodies: tuple[str, ...] = ()) -> str:
        file = self._read(path) if path else self._open_file()
        if isinstance(file, str):
            return file
        old, new = bodies
        text = file.text()
        if not old:
            raise FormatError("The old text of `replace` is empty; copy the lines to change.")
        count = text.count(old)
        if count != 1:
            return (f"The old text occurs {count} times in {file.path}; it must occur exactly once. "
                    + ("Copy it exactly, without line numbers." if count == 0
                       else "Include more surrounding lines to make it unique."))
        self.sandbox.write_file(file.path, text.replace(old, new))
        self.path = file.path
        line = text[:text.index(old)].count("\n") + 1
        return "Replaced. Check the result:\n" + self._show(self._read(file.path), line)

    def tool_search_file(self, term: str, path: str = "", bodies: tuple[str, ...] = ()) -> str:
        file = self._read(path) if path else self._open_file()
        if isinstance(file, str):
            return file
        hits = [f"Line {i}: {line}" for i, line in enumerate(file.lines, 1) if term in line]
        if not hits:
            return f'No matches for "{term}" in {file.path}.'
        more = [f"({len(hits) - MAX_MATCHES} more matches not shown)"] if len(hits) > MAX_MATCHES else []
        return "\n".join([f'{len(hits)} matches for "{term}" in {file.path}:',
                          *hits[:MAX_MATCHES], *more])

    # -- file access -----------------------------------------------------------------------

    def _read(self, path: str) -> _File | str:
        """The file, or an error observation when it cannot be read."""
        try:
            return _File.parse(path, self.sandbox.read_file(path))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            return f"Cannot open {path}: {exc.strerror or exc}. Check the path with `ls` or `find`."
        except UnicodeDecodeError:
            return f"{path} is not a UTF-8 text file; inspect it with shell commands instead."

    def _open_file(self) -> _File | str:
        if not self.path:
            return "No file is open. Use `open FILE` first."
        return self._read(self.path)


def _int(text: str, usage: str) -> int:
    if not text.isdigit():
        raise FormatError(f"{text!r} is not a line number. Usage: {usage}")
    return int(text)


def _edit_range(span: str, n: int) -> tuple[int, int]:
    match = _RANGE.match(span)
    start, end = (int(match[1]), int(match[2])) if match else (0, -1)
    if not match or start < 1 or end < start - 1 or end > n:
        raise FormatError(f"Bad edit range {span!r}: the open file has {n} lines. Use "
                          f"`edit START:END` with 1 <= START <= END <= {n}, or END = START-1 to "
                          f"insert before line START.")
    return start, end


SCAFFOLDS = {"swe-agent": SweAgentTools, "bash": BashTools}


def make_tools(sandbox: Sandbox, cfg: AgentConfig) -> BashTools:
    """The scaffold's tool set bound to one sandbox (fresh viewer state per episode)."""
    if cfg.scaffold not in SCAFFOLDS:
        raise ValueError(f"Unknown scaffold {cfg.scaffold!r}; choose one of: {', '.join(SCAFFOLDS)}.")
    return SCAFFOLDS[cfg.scaffold](sandbox, cfg)
