"""The host side of a sandbox's persistent command runner (`sandbox.executor_main`).

Starting a jail (bubblewrap's namespaces and mount tree, or `unshare`) costs 15-60 ms, so a
sandbox starts one on its first command and keeps it: the jail runs `executor_main`, and every
`execute` is one request and one reply over a pair of pipes (about a raw `subprocess.run`).

Lifetime:
- The jail is spawned from one long-lived thread of this process (`spawn`), because the death
  signal behind bwrap's `--die-with-parent` and the runner's PR_SET_PDEATHSIG fires when the
  *thread* that forked it exits, not the process; an owner killed with SIGKILL still takes the
  jail with it. The runner also exits when its request pipe closes.
- If the runner dies mid-command (the command ran `kill -9 -1`, say) that command gets exit code
  137 and a note, and the next `execute` starts a fresh jail: files persist, processes do not. A
  runner that does not answer within HOST_GRACE_S of the command's limit (stopped with SIGSTOP,
  say) is killed the same way and the command reported as timed out.
- `kill()` (from `close()`, any thread) kills the jail at once; a command in flight then raises
  SandboxError. Killing bwrap while it still sets the jail up does not reach the jail's own
  processes (their death signal is armed only just before the runner starts), so a start that
  greets after `kill()` is torn down again: closing the runner's pipes ends it, and with it the
  namespace.
"""

from __future__ import annotations

import json
import os
import select
import signal
import struct
import subprocess
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from queue import Queue
from typing import IO, TYPE_CHECKING

from sandbox import isolation
from sandbox.base import ExecResult, SandboxError
from sandbox.executor_wire import Capture

if TYPE_CHECKING:
    from sandbox.executor_wire import ReplyHeader, Request, RunnerConfig

HOST_GRACE_S = 5.0
"""How long past a command's limit the host waits for the runner's reply before killing the jail."""
START_TIMEOUT_S = 30.0
START_ATTEMPTS = 3
SOURCE = "\n".join((Path(__file__).parent / name).read_text()
                   for name in ("executor_wire.py", "executor_main.py"))
"""The runner's program: its stdlib-only modules' sources, in order (`sandbox.executor_main`)."""
PRELUDE = "import sys; sys.argv[0] = 'swe-rlvr-executor'\n"


class _StartFailed(Exception):
    """The jail exited or stayed silent before its runner greeted; the message says why."""


class Executor:
    """One jail with a runner in it, started on first use and again after it dies."""

    def __init__(self, jail: isolation.Jail) -> None:
        self.jail = jail
        self._proc: subprocess.Popen[bytes] | None = None
        self._seq = 0
        self._run_lock = threading.Lock()  # one command at a time
        self._state = threading.Lock()     # guards _proc and _killed against kill()
        self._killed = False

    def run(self, cmd: str, timeout: float, report: bool = False) -> ExecResult:
        """Run `cmd`; with `report`, the result also carries what it wrote to its fd 4
        (`executor_wire.REPORT_FD`)."""
        with self._run_lock:
            proc = self._ensure()
            self._seq += 1
            start = time.monotonic()
            request: Request = {"id": self._seq, "cmd": cmd, "timeout": max(timeout, 0.0),
                       "limit": self.jail.output_limit_bytes, "report": report}
            try:
                _write_frame(_fileno(proc.stdin), request)
                header, payload = _read_reply(_fileno(proc.stdout), start + timeout + HOST_GRACE_S)
            except (OSError, EOFError, TimeoutError, ValueError) as exc:
                return self._lost(start, exc)
            if header.get("id") != self._seq:
                stray = ValueError(f"reply {header.get('id')} to request {self._seq}")
                return self._lost(start, stray)
            cut = header["head"] + header["tail"]
            head, tail = payload[:header["head"]], payload[header["head"]:cut]
            return ExecResult(exit_code=header["exit_code"], truncated=header["dropped"] > 0,
                              output=Capture.render(head, tail, header["dropped"]),
                              timed_out=header["timed_out"], duration_s=time.monotonic() - start,
                              report=payload[cut:] if report else None,
                              report_dropped=header.get("report_dropped", 0))

    def kill(self) -> None:
        """Kill the jail now and refuse further commands; safe from any thread, does not wait."""
        with self._state:
            self._killed = True
            proc = self._proc
        if proc is not None:
            _killpg(proc)

    def stop(self, wait_s: float = 30.0) -> None:
        """Kill the jail, let a command in flight return, and reap what is left."""
        self.kill()
        got = self._run_lock.acquire(timeout=wait_s)
        try:
            self._reap()
        finally:
            if got:
                self._run_lock.release()

    # ------------------------------------------------------------------ internals

    def _ensure(self) -> subprocess.Popen[bytes]:
        """The live runner, starting a jail if there is none (first use, or after a death).
        A failed start is tried again: bwrap copies the host's mount tree, and a mount that
        comes or goes meanwhile (a container starting, say) makes that copy fail."""
        with self._state:
            if self._killed:
                raise SandboxError("This sandbox is closed; open a new one with open_sandbox().")
            if self._proc is not None and self._proc.poll() is None:
                return self._proc
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return self._start()
            except _StartFailed as exc:
                if self._killed:
                    raise SandboxError("This sandbox was closed while it started.") from exc
                if attempt == START_ATTEMPTS:
                    raise SandboxError(f"{exc} (after {attempt} attempts)") from exc
                time.sleep(0.05 * attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _start(self) -> subprocess.Popen[bytes]:
        """Spawn the jail and wait for its runner's greeting."""
        self._reap()
        proc = spawn(isolation.jail_argv(self.jail, self._program()), env=_runner_env(self.jail))
        with self._state:
            self._proc = proc
            if self._killed:
                _killpg(proc)
        try:
            _read_reply(_fileno(proc.stdout), time.monotonic() + START_TIMEOUT_S)
        except (OSError, EOFError, TimeoutError, ValueError) as exc:
            message = self._start_failure(proc, exc)
            self._reap()
            raise _StartFailed(message) from exc
        if self._killed:  # the greeting can come from a jail that outlived its killed bwrap
            self._reap()
            raise _StartFailed("the sandbox was closed while its jail started")
        return proc

    def _program(self) -> list[str]:
        cfg: RunnerConfig = {"workdir": self.jail.cwd, "tag": self.jail.tag,
               "tag_var": isolation.TAG_VAR, "prelude": isolation.limits_prelude(self.jail),
               "scope": isolation.kill_scope(self.jail), "cgroup": str(self.jail.cgroup or ""),
               "parent": os.getpid() if self.jail.level == "pgroup" else None,
               "chroot": str(self.jail.root) if self.jail.level == "unshare" else "",
               "uid": self.jail.uid if self.jail.level in isolation.MOUNT_LEVELS else None}
        return [isolation.runner_python(self.jail), "-I", "-S", "-c", PRELUDE + SOURCE,
                json.dumps(cfg)]

    def _start_failure(self, proc: subprocess.Popen[bytes], exc: Exception) -> str:
        _killpg(proc)
        proc.wait()
        os.set_blocking(_fileno(proc.stderr), False)
        try:
            err = os.read(_fileno(proc.stderr), 1 << 16).decode(errors="replace").strip()[-600:]
        except OSError:
            err = ""
        return (f"The {self.jail.level} jail did not start ({err or exc}). Check that "
                f"`{isolation.runner_python(self.jail)}` runs there, or set sandbox.isolation to "
                f"another level ({', '.join(isolation.LEVELS)}).")

    def _lost(self, start: float, exc: Exception) -> ExecResult:
        """The runner died, hung or broke protocol during a command: kill the jail, report."""
        hung = isinstance(exc, TimeoutError)
        self._reap()
        if self._killed:
            raise SandboxError("The sandbox was closed while this command ran; its output is lost.")
        note = ("The command did not finish in time and the sandbox's command runner stopped "
                "answering" if hung else
                "The command killed the sandbox's command runner (e.g. `kill -9 -1`)")
        output = (f"[{note}, so its output is lost. The sandbox restarts for the next command: "
                  f"files are kept, running processes are not.]")
        return ExecResult(exit_code=isolation.TIMEOUT_EXIT if hung else 128 + signal.SIGKILL,
                          output=output, truncated=False, timed_out=hung,
                          duration_s=time.monotonic() - start)

    def _reap(self) -> None:
        """Kill the current jail (if any), wait for it and everything it left, close its pipes."""
        with self._state:
            proc, self._proc = self._proc, None
        if proc is None:
            return
        _killpg(proc)
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe:
                pipe.close()
        isolation.await_gone(self.jail)


def _fileno(pipe: IO[bytes] | None) -> int:
    """The fd of one of the runner's pipes (all three are PIPEs, so never None)."""
    assert pipe is not None
    return pipe.fileno()


def _killpg(proc: subprocess.Popen[bytes]) -> None:
    if proc.returncode is None:  # not reaped yet, so the group id cannot have been reused
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _runner_env(jail: isolation.Jail) -> dict[str, str]:
    """The commands' environment without the tag: the runner adds it to commands only."""
    env = isolation.environment(jail)
    env.pop(isolation.TAG_VAR)
    return env


# --------------------------------------------------------------------------- wire format


def _write_frame(fd: int, obj: Request) -> None:
    data = json.dumps(obj).encode()
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_reply(fd: int, deadline: float) -> tuple[ReplyHeader, bytes]:
    """One frame, and the output bytes a reply announces after it; TimeoutError at `deadline`."""
    size = struct.unpack(">I", _read_exact(fd, 4, deadline))[0]
    header: ReplyHeader = json.loads(_read_exact(fd, size, deadline))
    return header, _read_exact(fd, header.get("head", 0) + header.get("tail", 0) + header.get("report", 0),
                               deadline)


def _read_exact(fd: int, size: int, deadline: float) -> bytes:
    parts, left = [], size
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise TimeoutError("no reply from the sandbox's command runner")
        chunk = os.read(fd, left)
        if not chunk:
            raise EOFError("the sandbox's command runner exited")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


# --------------------------------------------------------------------------- spawning


_spawn_queue: Queue[tuple[list[str], dict[str, str], Future[subprocess.Popen[bytes]]]] = Queue()
_spawner: threading.Thread | None = None
_spawner_lock = threading.Lock()


def spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Popen `argv` from this process's spawner thread, which lives as long as the process."""
    global _spawner
    with _spawner_lock:
        if _spawner is None or not _spawner.is_alive():  # first use, or a forked child process
            _spawner = threading.Thread(target=_spawn_loop, name="sandbox-spawner", daemon=True)
            _spawner.start()
    done: Future[subprocess.Popen[bytes]] = Future()
    _spawn_queue.put((argv, env, done))
    return done.result()


def _spawn_loop() -> None:
    while True:
        argv, env, done = _spawn_queue.get()
        try:
            done.set_result(subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, start_new_session=True, close_fds=True))
        except OSError as exc:
            done.set_exception(SandboxError(f"Cannot start {argv[0]}: {exc}; install it or choose "
                                            f"another sandbox.isolation level."))
