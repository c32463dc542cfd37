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


class Capture:
    """Head and tail of a byte stream, with a count of what was dropped in between."""

    def __init__(self, limit):
        self.head_limit, self.tail_limit = limit // 2, limit - limit // 2
        self.head, self.tail, self.tail_len, self.dropped = bytearray(), deque(), 0, 0

    def add(self, chunk):
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail.append(chunk)
            self.tail_len += len(chunk)
            self._trim()

    def _trim(self):
        while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_limit:
            self.dropped += len(self.tail[0])
            self.tail_len -= len(self.tail.popleft())
        extra = self.tail_len - self.tail_limit
        if extra > 0:
            self.tail[0] = self.tail[0][extra:]
            self.tail_len -= extra
            self.dropped += extra

    def tail_bytes(self):
        return b"".join(self.tail)

    @staticmethod
    def render(head, tail, dropped):
        """The text the agent sees: head, a marker naming the dropped byte count, tail."""
        head, tail = head.decode("utf-8", "replace"), tail.decode("utf-8", "replace")
        if not dropped:
            return head + tail
        return "%s\n[... output truncated: %d bytes omitted ...]\n%s" % (head, dropped, tail)


# --------------------------------------------------------------------------- wire format


def write_frame(fd, obj, payload=b""):
    data = json.dumps(obj).encode()
    write_all(fd, struct.pack(">I", len(data)) + data + payload)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_exact(fd, size):
    """`size` bytes from `fd`, or None at end of file."""
    parts, left = [], size
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_frame(fd):
    header = read_exact(fd, 4)
    if header is None:
        return None
    body = read_exact(fd, struct.unpack(">I", header)[0])
    return None if body is None else json.loads(body.decode())
