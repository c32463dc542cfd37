"""The sandbox seam: one small protocol that every backend satisfies without inheriting from it.

A sandbox is a fresh working copy of one instance's repository at its base commit, plus a way to
run shell commands in it. The agent only ever calls `execute`, the file helpers and `diff`;
grading opens its own sandbox, so nothing the agent did survives into the graded copy except the
patch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Self, runtime_checkable

REPO_DIR = "/testbed"
"""Where commands see the repository (SWE-bench's convention): the container path of the docker
backend, and the local backend's in-jail path wherever its jail has a mount namespace. A fixed
path keeps host directories (random per sandbox) out of prompts, outputs and hence token ids."""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the command run in it); the message names the fix."""


class PatchTooLarge(SandboxError):
    """`diff()` found more than `sandbox.max_patch_kb` of changes: the episode's patch is refused
    (a format failure of the episode, with this message as the reason), never read whole."""


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    """The command's exit status; 124 after a timeout (as GNU `timeout`), 128+N after signal N."""
    output: str
    """stdout and stderr interleaved, decoded as UTF-8 (invalid bytes replaced), head + tail."""
    truncated: bool
    """True when the middle of the output was dropped (a marker line says how many bytes)."""
    timed_out: bool
    """True when the wall-clock limit killed the command's whole process tree."""
    duration_s: float
    report: bytes | None = None
    """What the command wrote to its report pipe (fd 4), when asked for (`LocalSandbox.execute_reporting`)."""
    report_dropped: int = 0
    """Report bytes past the kept limit."""


@runtime_checkable
class Sandbox(Protocol):
    workdir: str
    """The repository root as commands see it (the cwd of `execute`): `REPO_DIR` where the backend
    can place it there; the prompt names this path."""

    def execute(self, cmd: str, timeout: float | None = None) -> ExecResult: ...

    def read_file(self, path: str) -> str: ...

    def write_file(self, path: str, content: str) -> None: ...

    def diff(self) -> str: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...
