"""An episode's turns read back from its ROLLOUTS row: what each span of its trace shows.

The messages are `[system, issue (+ guidance), reply, observation, reply, observation, ...]`
(`agent.loop`), so turn k is the k-th assistant message and the user message after it (none after
the last reply of a submitted episode, or of one cut by a limit). The command is the reply's
block, read with the parser the episode ran (`agent.actions.extract_block`), and the exit code is
the last `[exit code N]` note that `agent.tools.render_result` appends, so output that prints such
a line itself cannot change it. Token counts, log-probs and times come from the row's turn log
(`Trajectory.turn_log`); rows written before it existed give None for them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from agent.actions import FormatError, extract_block

_EXIT = re.compile(r"\[exit code (-?\d+)\]\s*\Z")


@dataclass(frozen=True)
class Turn:
    index: int
    reply: str
    command: str
    """The reply's command block; "" when the reply had none that parses (a format error)."""
    observation: str
    """What the episode answered ("" after the last reply)."""
    exit_code: int | None
    """The shell's exit code; None when no shell command ran (a tool, a submission, an error)."""
    format_error: bool | None
    """The turn was masked as malformed (None: no turn log to tell)."""
    prompt_tokens: int | None
    gen_tokens: int | None
    logprob_sum: float | None
    """The sampler's log-probability of the reply's tokens."""
    at_s: float | None
    """Seconds from the episode's start to the turn's generation."""
    gen_s: float | None
    exec_s: float | None


def exit_code(observation: str) -> int | None:
    """The exit code that ends a rendered shell observation, else None."""
    found = _EXIT.search(observation)
    return int(found.group(1)) if found else None


def command_of(reply: str) -> str:
    """The reply's single command block, or "" when it has none that parses."""
    try:
        return extract_block(reply)
    except FormatError:
        return ""


def turns(row: dict) -> list[Turn]:
    """The turns of one ROLLOUTS row, in order."""
    messages = json.loads(row["messages_json"])
    log = json.loads(row.get("turns_json") or "{}").get("turns", [])
    out: list[Turn] = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        k = len(out)
        after = messages[i + 1]["content"] if i + 1 < len(messages) and \
            messages[i + 1]["role"] == "user" else ""
        times = log[k] if k < len(log) else None
        out.append(Turn(
            index=k, reply=message["content"], command=command_of(message["content"]),
            observation=after, exit_code=exit_code(after),
            format_error=_masked(row, times) if times else None,
            prompt_tokens=times["prompt_tokens"] if times else None,
            gen_tokens=times["gen_tokens"] if times else None,
            logprob_sum=_logprob_sum(row, times) if times else None,
            at_s=times["at_s"] if times else None, gen_s=times["gen_s"] if times else None,
            exec_s=times["exec_s"] if times else None))
    return out


def _span(times: dict) -> slice:
    return slice(times["prompt_tokens"], times["prompt_tokens"] + times["gen_tokens"])


def _masked(row: dict, times: dict) -> bool:
    mask = list(row["loss_mask"])[_span(times)]
    return bool(mask) and not any(mask)


def _logprob_sum(row: dict, times: dict) -> float:
    return float(sum(list(row["logprobs"])[_span(times)]))
