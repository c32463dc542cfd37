"""Commands in a container: the in-container wrapper, the output cap, the host deadline, the disk watch.

Three layers stop a command, each covering what the one before can miss:
1. `timeout -s KILL <t>` inside the container kills the command's process group at its limit.
2. The wrapper (WRAPPER below) then kills what escaped the group: after a timeout, every process
   carrying the exec's tag in its environment (a `setsid` child keeps the tag); after any exit,
   every process still holding the exec's output pipe (`cmd &` without redirection), because
   `docker exec` keeps waiting for whoever holds that pipe. A daemon started with its output
   redirected (`nohup server >log 2>&1 &`) survives a normal exit, as in a terminal, once its
   redirection is in place (a child still between fork and redirection holds the pipe). The sweep
   repeats (up to 5 rounds) while it finds processes, so a fork bomb's late children go too.
3. A host-side deadline (the limit plus HOST_GRACE_S): if the exec still has not returned, the
   caller kills the whole container. Killing only the `docker exec` client would leave the
   command running in the container.

Disk: where the engine cannot cap the container's writable layer (`storage_opt` needs overlay2 on
xfs with project quotas), `DiskWatch` polls the engine's own measure of it for the sandbox's whole
life (a daemon may write between commands) and reports a breach; the sandbox then kills the
container.

Simplification: a process that both clears its environment and closes the exec's pipe survives a
timeout until the sandbox closes; it cannot block the exec, only use the container's CPU and
memory limits, which the container's cgroup still bounds.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO, Protocol

if TYPE_CHECKING:
    import requests
    from docker import APIClient

HOST_GRACE_S = 5.0
"""How long past the in-container limit the host waits before it kills the container."""

# $1: the limit in seconds, $2: the exec's tag (SWE_RLVR_EXEC in the command's environment),
# $3: the command. stderr joins stdout in order; the wrapper's own stderr goes to /dev/null (no
# "Killed" job notice). Only bash builtins run in the sweep, so the wrapper's helpers never hold
# the pipe or the tag. `-ef` compares pipe inodes.
WRAPPER = r"""
exec 3>&1 2>/dev/null
SWE_RLVR_EXEC="$2" timeout -s KILL "$1" bash -c "$3" </dev/null >&3 2>&3 3>&-
rc=$?
exec 3>&-
for round in 1 2 3 4 5; do
  hits=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] && continue
    hit=
    if [ "$rc" = 137 ]; then
      while IFS= read -r -d '' kv; do
        [ "$kv" = "SWE_RLVR_EXEC=$2" ] && { hit=1; break; }
      done 2>/dev/null <"$d/environ"
    fi
    if [ -z "$hit" ]; then
      for f in 0 1 2; do [ "$d/fd/$f" -ef "/proc/$$/fd/1" ] && { hit=1; break; }; done
    fi
    [ -n "$hit" ] && kill -9 "$p" 2>/dev/null && hits=$((hits + 1))
  done
  [ "$hits" = 0 ] && break
done
exit "$rc"
"""


def wrapped(cmd: str, timeout_s: float, tag: str) -> list[str]:
    """argv for `docker exec`: bash running WRAPPER on `cmd` with limit `timeout_s`."""
    return ["bash", "-c", WRAPPER, "swe-rlvr-exec", f"{timeout_s:.3f}", tag, cmd]


class Sink(Protocol):
    """Where an exec's output goes: a `HeadTail` or a `FileSink`."""

    def add(self, chunk: bytes) -> None: ...


class HeadTail:
    """Keeps the first and the last `limit // 2` bytes of a byte stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.head_cap = max(limit // 2, 0)
        self.tail_cap = max(limit - self.head_cap, 0)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_cap:
            self.tail += chunk[-self.tail_cap:]
            if len(self.tail) > self.tail_cap:
                del self.tail[:-self.tail_cap]

    @property
    def dropped(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        """Head + a marker line naming the dropped byte count + tail (the local backend's marker)."""
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if not self.dropped:
            return head + tail
        return f"{head}\n[... output truncated: {self.dropped} bytes omitted ...]\n{tail}"


class Exec:
    """One `docker exec` whose output is drained by a thread, so the host can stop waiting.

    The output is read through the HTTP response's buffered reader, not docker-py's raw socket:
    output that reaches the host in the same packet as the upgrade response's headers lands in
    that buffer, and docker-py's stream skips it (a fast command then seems to print nothing, or
    to lose its first lines; docker/docker-py#2042).
    """

    def __init__(self, api: APIClient, container_id: str, argv: list[str], *, workdir: str,
                 environment: dict[str, str], out: Sink, err: HeadTail) -> None:
        self.api, self.out, self.err = api, out, err
        self.exec_id = api.exec_create(container_id, argv, workdir=workdir,
                                       environment=environment)["Id"]
        self.error: BaseException | None = None
        response = api._post_json(api._url("/exec/{0}/start", self.exec_id), stream=True,
                                  headers={"Connection": "Upgrade", "Upgrade": "tcp"},
                                  data={"Tty": False, "Detach": False})
        try:
            api._raise_for_status(response)
        except Exception:
            response.close()
            raise
        reader = response.raw._fp.fp  # the BufferedReader that parsed the headers
        api._disable_socket_timeout(reader.raw)  # a quiet command may print nothing for minutes
        self._reader = threading.Thread(target=self._drain, args=(reader, response), daemon=True)
        self._reader.start()

    def _drain(self, reader: BinaryIO, response: requests.Response) -> None:
        try:
            read_frames(reader, self.out, self.err)
        except Exception as exc:  # the connection drops when the container is killed
            self.error = exc
        finally:
            response.close()

    def wait(self, deadline_s: float) -> bool:
        """True when the exec's output ended within `deadline_s` seconds."""
        self._reader.join(deadline_s)
        return not self._reader.is_alive()

    def exit_code(self) -> int | None:
        """The exit status (None if the engine never reports one, e.g. the container died)."""
        for _ in range(50):
            info = self.api.exec_inspect(self.exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            time.sleep(0.02)
        return None


FRAME_HEADER = struct.Struct(">BxxxL")
"""The engine's multiplexed stream: a 1-byte stream id (1 stdout, 2 stderr), 3 zero bytes and
a big-endian payload length, then the payload."""


def read_frames(reader: BinaryIO, out: Sink, err: Sink) -> None:
    """Copy a multiplexed exec stream from a blocking reader into `out` and `err` until EOF.
    Raises EOFError when the stream ends inside a frame (the output is then incomplete)."""
    while header := reader.read(FRAME_HEADER.size):
        if len(header) < FRAME_HEADER.size:
            raise EOFError(f"the exec stream ended inside a frame header ({len(header)} bytes)")
        stream, size = FRAME_HEADER.unpack(header)
        data = reader.read(size) if size else b""
        if len(data) < size:
            raise EOFError(f"the exec stream ended {size - len(data)} bytes into a frame")
        (err if stream == 2 else out).add(data)


class FileSink:
    """Takes an exec's stdout (as `HeadTail` does) and writes it to an open binary file whole."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh

    def add(self, chunk: bytes) -> None:
        self.fh.write(chunk)


DISK_POLL_S = 0.5
"""How often the disk watch asks the engine while a command runs."""
DISK_IDLE_POLL_S = 5.0
"""... and between commands (a daemon the agent left may still write; the engine walks the whole
layer for each answer, so idle sandboxes ask rarely)."""


def layer_bytes(api: APIClient, container_id: str) -> int:
    """The size of the container's writable layer as the engine measures it on the host
    (`SizeRw`: apparent sizes, so sparse files count whole); nothing inside can fake it."""
    info = api._result(api._get(api._url("/containers/{0}/json", container_id),
                                params={"size": 1}), True)
    return int(info.get("SizeRw") or 0)


class DiskWatch:
    """A thread that calls `breach(grown)` once the writable layer has grown by more than
    `limit_bytes` since the watch began, then stops. It polls every DISK_POLL_S seconds while
    a command runs (`with watch.command():`) and every DISK_IDLE_POLL_S seconds otherwise; only
    the container's removal ends it early (an answer that times out, say while the engine walks
    a million files the agent made, is asked again)."""

    def __init__(self, api: APIClient, container_id: str, limit_bytes: int,
                 breach: Callable[[int], None]) -> None:
        self.api, self.container_id, self.limit, self.breach = api, container_id, limit_bytes, breach
        self.start_bytes = layer_bytes(api, container_id)
        self._busy, self._lock = 0, threading.Lock()
        self._wake, self._stopped = threading.Event(), False
        self._thread = threading.Thread(target=self._loop, daemon=True, name="swe-rlvr-disk-watch")
        self._thread.start()

    @contextmanager
    def command(self) -> Iterator[None]:
        with self._lock:
            self._busy += 1
        self._wake.set()
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(5.0)

    def _loop(self) -> None:
        import docker
        import requests
        while True:
            self._wake.wait(DISK_POLL_S if self._busy else DISK_IDLE_POLL_S)
            self._wake.clear()
            if self._stopped:
                return
            try:
                grown = layer_bytes(self.api, self.container_id) - self.start_bytes
            except docker.errors.NotFound:
                return  # the container is gone: nothing left to watch
            except (docker.errors.DockerException, requests.RequestException):
                continue  # the engine is slow or busy: ask again
            if grown > self.limit:
                self.breach(grown)
                return
