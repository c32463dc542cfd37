"""Action format and parsing: one fenced command block per turn becomes an `Action`.

The policy writes free text (its reasoning) plus exactly one fenced block:

    ```bash
    open src/pkg/mod.py 120
    ```

The block holds either a tool call (its first word names a tool of the scaffold) or a shell command.
Tool calls take their arguments from the first line (shell quoting rules) and their text bodies from
heredocs declared on that line, in declaration order, exactly as bash reads them:

    edit 10:12 <<'EOF'           replace FILE <<'OLD' <<'NEW'
    new line 10                  old text
    EOF                          OLD
                                 new text
                                 NEW

Anything else in the reply is a *format error*: no block, several blocks, an unclosed fence, an empty
block, NUL bytes, an unterminated heredoc, unbalanced quotes, or a tool called with the wrong number
of arguments or bodies. Format errors raise `FormatError`, whose observation says how to fix the turn;
the loop masks that turn's tokens from the loss (Nebius RFT).

The episode's control flow uses three exceptions that carry the observation (mini-swe-agent's shape):
`Submitted`, `FormatError` and `LimitsExceeded`.

Simplifications: a line that is exactly three backticks always closes a block, so a heredoc body
cannot contain such a line (write the file with `printf` or Python instead). Heredoc detection in
shell commands recognises `<<TAG`, `<<'TAG'`, `<<"TAG"` and `<<-TAG`; `<<<` here-strings are left to bash.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

SHELL = "bash"
"""`Action.tool` of a plain shell command."""

_OPEN_FENCE = re.compile(r"^```[\w+.-]*$")
_HEREDOC = re.compile(r"(?<!<)<<(?!<)(-?)[ \t]*(['\"]?)([A-Za-z_][\w.-]*)\2")


class AgentEvent(Exception):
    """Base of the loop's control-flow exceptions; `observation` is the text shown to the policy."""

    def __init__(self, observation: str = ""):
        super().__init__(observation)
        self.observation = observation


class Submitted(AgentEvent):
    """The policy called `submit`; the episode ends and the sandbox diff is the patch."""


class FormatError(AgentEvent):
    """The turn is malformed; the observation tells the policy how to fix it."""


class LimitsExceeded(AgentEvent):
    """A budget ran out; `termination` is the ROLLOUTS termination reason."""

    def __init__(self, termination: str, observation: str = ""):
        super().__init__(observation or f"Episode ended: {termination}.")
        self.termination = termination


@dataclass(frozen=True)
class ToolSpec:
    """Arity of one tool, checked before it runs."""

    usage: str
    min_args: int = 0
    max_args: int = 0
    bodies: tuple[int, ...] = (0,)
    """Allowed numbers of heredoc bodies."""


@dataclass(frozen=True)
class Action:
    tool: str
    """Tool name, or `SHELL` for a shell command."""
    args: tuple[str, ...]
    bodies: tuple[str, ...]
    command: str
    """The block's text as written."""


def extract_block(reply: str) -> str:
    """The single fenced block's content; FormatError if there is not exactly one."""
    blocks, start, lines = [], None, reply.split("\n")
    for i, line in enumerate(lines):
        text = line.strip()
        if start is None and _OPEN_FENCE.match(text):
            start = i
        elif start is not None and text == "```":
            blocks.append("\n".join(lines[start + 1:i]))
            start = None
    if start is not None:
        raise FormatError(_fix("A command block was opened with ``` but never closed."))
    if not blocks:
        raise FormatError(_fix("Your reply has no command block."))
    if len(blocks) > 1:
        raise FormatError(_fix(f"Your reply has {len(blocks)} command blocks; send exactly one per turn."))
    if not blocks[0].strip():
        raise FormatError(_fix("The command block is empty."))
    return blocks[0].strip("\n")


def parse_action(reply: str, tools: dict[str, ToolSpec]) -> Action:
    """Reply text -> Action. `tools` maps tool names to their specs (empty in bash-only mode)."""
    command = extract_block(reply)
    if "\x00" in command:
        raise FormatError(_fix("The command contains NUL bytes, which no shell accepts."))
    name = command.split(None, 1)[0]
    if name not in tools:
        check_heredocs(command)
        return Action(SHELL, (), (), command)
    head, bodies = split_heredocs(command)
    try:
        words = shlex.split(head)
    except ValueError as exc:
        raise FormatError(f"Cannot parse `{head}`: {exc}. Usage: {tools[name].usage}") from None
    return _checked(Action(name, tuple(words[1:]), tuple(bodies), command), tools[name])


def _checked(action: Action, spec: ToolSpec) -> Action:
    n = len(action.args)
    if not spec.min_args <= n <= spec.max_args or len(action.bodies) not in spec.bodies:
        raise FormatError(f"Wrong arguments for `{action.tool}`. Usage: {spec.usage}")
    return action


def split_heredocs(command: str) -> tuple[str, list[str]]:
    """First line with its heredoc markers removed, and the heredoc bodies in order."""
    lines = command.split("\n")
    head, rest = lines[0], lines[1:]
    bodies, pos = [], 0
    for dash, _quote, tag in _HEREDOC.findall(head):
        body, pos = _read_body(rest, pos, tag, bool(dash))
        bodies.append(body)
    if any(line.strip() for line in rest[pos:]):
        raise FormatError("A tool call is one line, followed only by its heredoc bodies (each ended "
                          "by a line that is exactly its tag, e.g. `EOF`). Send one command per turn.")
    return _HEREDOC.sub("", head).strip(), bodies


def check_heredocs(command: str) -> None:
    """Raise FormatError when a shell command declares a heredoc that is never terminated."""
    lines, i = command.split("\n"), 0
    while i < len(lines):
        line, i = lines[i], i + 1
        for dash, _quote, tag in _HEREDOC.findall(line):
            _body, i = _read_body(lines, i, tag, bool(dash))


def _read_body(lines: list[str], pos: int, tag: str, dash: bool) -> tuple[str, int]:
    for j in range(pos, len(lines)):
        if (lines[j].lstrip("\t") if dash else lines[j]).rstrip() == tag:
            return "\n".join(lines[pos:j]), j + 1
    raise FormatError(f"The heredoc `<<'{tag}'` is never terminated. End its body with a line "
                      f"that is exactly `{tag}`, inside the same command block.")


def _fix(problem: str) -> str:
    return (f"{problem} Reply with your reasoning followed by exactly one command block:\n"
            "```bash\n<one command or tool call>\n```")
