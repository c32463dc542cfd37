"""Prefect's ephemeral API server dies with the run that started it, even under SIGKILL.

With no PREFECT_API_URL, Prefect runs its API in a subprocess (`uvicorn ...
prefect.server.api.server:create_app`, its `SubprocessASGIServer`) and stops it at interpreter
exit. A run killed by the OOM killer or SIGKILL never gets there, and its server lived on as an
orphan holding ~220 MB and a port. So:

- `watch_ephemeral_server()` first starts a watchdog (`python -m flows.ephemeral <run pid>`), a
  small process holding the read end of a pipe whose write end only this process holds, then
  starts the server the way Prefect's client does (the same process-wide instance, which every
  later client reuses), labelled with this process's id (`SWE_RLVR_PREFECT_OWNER` in its
  environment). However this process dies, the kernel closes the pipe; the watchdog reads
  end-of-file and stops every server labelled with its pid (SIGTERM, then SIGKILL after
  `STOP_GRACE_S`). Started first, it also covers a run killed while its server starts.
- `sweep_servers()` (behind `swe-rlvr sandbox sweep`) is the backstop: it stops labelled servers
  whose owner is no longer their parent, and unlabelled ones of this interpreter adopted by init
  (left by runs from before the watchdog).

Left out: PR_SET_PDEATHSIG on the server itself. Prefect spawns it with no hook for that, and the
signal fires when the spawning *thread* exits, while Prefect starts the server from whichever
thread first needs the API. A child forked without exec (multiprocessing's "fork") inherits the
pipe's write end, so the watchdog then also waits for that child.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

OWNER_ENV = "SWE_RLVR_PREFECT_OWNER"
SERVER_APP = "prefect.server.api.server:create_app"
STOP_GRACE_S = 10.0

_watchdog: list[subprocess.Popen] = []  # this process's, started once


def watch_ephemeral_server() -> int | None:
    """Start Prefect's ephemeral API server now, under a watchdog, unless an API is configured.
    Returns the server's pid (None with a configured API); safe to call again."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL
    if PREFECT_API_URL.value():
        return None
    if not _watchdog:
        _watchdog.append(_start_watchdog())
    server = SubprocessASGIServer()
    if not server.running:
        os.environ[OWNER_ENV] = str(os.getpid())  # Prefect passes os.environ to the server
        try:
            server.start()
        finally:
            os.environ.pop(OWNER_ENV, None)
    return server.server_process.pid


def _start_watchdog() -> subprocess.Popen:
    read, write = os.pipe()  # not inheritable: later subprocesses do not hold the write end
    proc = subprocess.Popen([sys.executable, "-m", "flows.ephemeral", str(os.getpid())],
                            stdin=read, stdout=subprocess.DEVNULL)
    os.close(read)  # the write end stays open, unused, until this process exits
    return proc


def guard(owner: int) -> None:
    """The watchdog's body: once stdin (the owner's pipe) reaches end-of-file, stop the ephemeral
    servers labelled with `owner`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the run's to handle
    while os.read(sys.stdin.fileno(), 4096):
        pass
    for pid, _, env, _ in _ephemeral_servers():
        if env.get(OWNER_ENV) == str(owner):
            _stop(pid)


def _stop(pid: int) -> None:
    """SIGTERM `pid`, SIGKILL it if it lives `STOP_GRACE_S` later. Through a pidfd, which names
    one process, so a reused pid is never hit."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            signal.pidfd_send_signal(pidfd, sig)
            if select.select([pidfd], [], [], STOP_GRACE_S)[0]:
                return
    except ProcessLookupError:
        return
    finally:
        os.close(pidfd)


def orphaned_servers() -> list[int]:
    """Pids of this project's ephemeral API servers whose run is gone."""
    return [pid for pid, argv, env, ppid in _ephemeral_servers() if _orphaned(argv, env, ppid)]


def _orphaned(argv: list[str], env: dict[str, str], ppid: int) -> bool:
    """Labelled: its owner is no longer its parent. Unlabelled (from before the watchdog): this
    interpreter's, and adopted by init."""
    owner = env.get(OWNER_ENV)
    if owner is not None:
        return owner != str(ppid)
    return ppid == 1 and argv[0] == sys.executable


def _ephemeral_servers():
    """(pid, argv, environment, parent pid) of each readable ephemeral Prefect API server."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if SERVER_APP not in argv:
                continue
            env = dict(v.split("=", 1) for v in (entry / "environ").read_bytes()
                       .decode(errors="replace").split("\0") if "=" in v)
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or another user's
        if env.get("PREFECT__SERVER_EPHEMERAL") == "1":
            yield int(entry.name), argv, env, ppid


def sweep_servers() -> list[int]:
    """Stop the orphaned ephemeral API servers (`orphaned_servers`); returns their pids."""
    stopped = orphaned_servers()
    for pid in stopped:
        _stop(pid)
    return stopped


def sweep_servers_report() -> str:
    """`sweep_servers`, in one line of `swe-rlvr sandbox sweep` (no Prefect import)."""
    stopped = sweep_servers()
    return (f"stopped {len(stopped)} orphaned Prefect API servers"
            + (f": pids {', '.join(map(str, stopped))}" if stopped else ""))


if __name__ == "__main__":
    guard(int(sys.argv[1]))
