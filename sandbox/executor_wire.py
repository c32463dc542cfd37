"""What the in-jail runner (`sandbox.executor_main`) and its host (`sandbox.executor`) exchange:
framed JSON messages, and the head + tail of a command's output (`Capture`).

Wire format, both ways: a 4-byte big-endian length, then that many bytes of JSON; a reply's JSON
is followed by its `head` + `tail` output bytes.

The jail runs this file's source, followed by `executor_main`'s, as one `python -I -S -c` program
(`sandbox.executor.SOURCE`), so it is stdlib only, needs Python >= 3.8, and has no `__future__`
import (one would have to open the whole program).
"""

import json
import os
import struct
from collections import deque

TYPE_CHECKING = False
"""The jail does not import `typing`; a type checker reads the block below (annotations that
Python 3.8 cannot evaluate are quoted)."""
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, TypedDict

    class Request(TypedDict):
        """One command, host to runner."""
        id: int
        cmd: str
        timeout: float
        limit: int
        """Output bytes kept (`Capture`)."""
        report: bool
        """Return what the command wrote to its report pipe (`REPORT_FD`); optional, default no."""

    class ReplyHeader(TypedDict):
        """The runner's answer to a `Request`; `head` + `tail` output bytes follow it."""
        id: int
        exit_code: int
        timed_out: bool
        dropped: int
        head: int
        tail: int
        duration_s: float
        report: int
        """Bytes of the report pipe that follow the output (0 unless the request asked)."""
        report_dropped: int
        """Report bytes past `REPORT_LIMIT`, not kept."""

    class RunnerConfig(TypedDict):
        """The runner's argv[1] (`sandbox.executor.Executor._program`)."""
        workdir: str
        tag: str
        tag_var: str
        prelude: str
        scope: str
        """Whose processes a command's clean-up kills: namespace, cgroup or tag."""
        cgroup: str
        parent: int | None
        chroot: str
        uid: int | None


REPORT_FD = 4
"""Every command's fd 4 is the write end of a pipe whose read end only the runner holds: a result
channel no file of the jail stands for (`sandbox.suite_run` points pytest's junit report at it)."""
REPORT_LIMIT = 32 << 20


class Report:
    """What a command wrote to its report pipe: the first `REPORT_LIMIT` bytes, and a count of the
    rest."""

    def __init__(self) -> None:
        self.data, self.dropped, self.eof = bytearray(), 0, False

    def read(self, fd: int) -> int:
        """Read one chunk; its size (0 at end of file, or when nothing is there yet)."""
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return 0
        self.eof = self.eof or not chunk
        room = max(0, REPORT_LIMIT - len(self.data))
        self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - room)
        return len(chunk)

    def drain(self, fd: int) -> None:
        """Read what is left without waiting (every writer is dead by now)."""
        os.set_blocking(fd, False)
        while self.read(fd):
            pass


class Capture:
    """Head and tail of a byte stream, with a count of what was dropped in between."""

    def __init__(self, limit: int) -> None:
        self.head_limit, self.tail_limit = limit // 2, limit - limit // 2
        self.head, self.tail_len, self.dropped = bytearray(), 0, 0
        self.tail: deque[bytes] = deque()

    def add(self, chunk: bytes) -> None:
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail.append(chunk)
            self.tail_len += len(chunk)
            self._trim()

    def _trim(self) -> None:
        while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_limit:
            self.dropped += len(self.tail[0])
            self.tail_len -= len(self.tail.popleft())
        extra = self.tail_len - self.tail_limit
        if extra > 0:
            self.tail[0] = self.tail[0][extra:]
            self.tail_len -= extra
            self.dropped += extra

    def tail_bytes(self) -> bytes:
        return b"".join(self.tail)

    @staticmethod
    def render(head: bytes, tail: bytes, dropped: int) -> str:
        """The text the agent sees: head, a marker naming the dropped byte count, tail."""
        first, last = head.decode("utf-8", "replace"), tail.decode("utf-8", "replace")
        if not dropped:
            return first + last
        return f"{first}\n[... output truncated: {dropped} bytes omitted ...]\n{last}"


# --------------------------------------------------------------------------- wire format


def write_frame(fd: int, obj: "Mapping[str, object]", payload: bytes = b"") -> None:
    data = json.dumps(obj).encode()
    write_all(fd, struct.pack(">I", len(data)) + data + payload)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_exact(fd: int, size: int) -> "bytes | None":
    """`size` bytes from `fd`, or None at end of file."""
    parts, left = [], size
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_frame(fd: int) -> "Any":
    """One frame's JSON (a `Request` in the runner), or None at end of file."""
    header = read_exact(fd, 4)
    if header is None:
        return None
    body = read_exact(fd, struct.unpack(">I", header)[0])
    return None if body is None else json.loads(body.decode())
