"""Run one shell command isolated, limited and killable as a whole tree.

Isolation levels, best first (`SandboxConfig.isolation`, "auto" picks the best available):
- bwrap: bubblewrap with the host read-only, the working copy and a private /tmp writable, new
  user/pid/net/ipc/uts namespaces, `--die-with-parent` and `--new-session`. Killing bwrap kills
  the namespace's init, and with it every process inside, `setsid` children included. The
  repo store (which holds future commits), the base checkouts, other sandboxes and the caller's
  home (credentials) are hidden under empty tmpfs mounts; the environment's interpreter prefix is
  bound back read-only.
- unshare: util-linux `unshare` (root only) with pid/net/mount namespaces and the root mount
  remounted read-only (the working copy and its private temp dir, $TMPDIR, stay writable);
  `--kill-child` tears the pid namespace down with the runner.
- pgroup: a new session and process group, nothing else (no read-only host, network on). The
  tree is killed through the pids cgroup where there is one; otherwise every process carries the
  sandbox's tag in its environment and is found by it in /proc. Without a cgroup, a command that
  scrubs its environment (`env -i`) and detaches escapes; the sweeper's TTL is the backstop.

Limits are set by the shell that runs the command (`ulimit -H -S`, so the command cannot raise
them): address space, processes, file size, CPU seconds, no core files. RLIMIT_NPROC is not
enforced for kernel uid 0 (bwrap's `--uid 1000` as root is still uid 0 outside), so as root every
command also joins the sandbox's pids cgroup (`sandbox.cgroups`), which holds the process limit
and lets the whole tree be killed at every level.

Every command's processes end with it: background jobs a command leaves behind are killed when
its shell exits, as in a fresh SWE-agent action. Output is read incrementally; only the first and
last halves of `output_limit_bytes` are kept, so a command printing gigabytes costs no memory.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import subprocess
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from sandbox import cgroups
from sandbox.base import ExecResult, SandboxError

log = logging.getLogger(__name__)

LEVELS = ("bwrap", "unshare", "pgroup")
TAG_VAR = "SWE_RLVR_SANDBOX"
TIMEOUT_EXIT = 124
ENV_ALLOW = ("LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_announced: set[str] = set()


@dataclass(frozen=True)
class Jail:
    """Everything one command needs to know about where and how it runs."""

    level: str
    workdir: Path
    """The working copy (same path inside and outside the sandbox)."""
    tmpdir: Path
    """Host directory that commands see as /tmp (bwrap, unshare) or as $TMPDIR (pgroup)."""
    tag: str
    """Unique sandbox id, set as $SWE_RLVR_SANDBOX in every process."""
    hidden: tuple[str, ...] = ()
    """Host directories replaced by an empty tmpfs (bwrap): the repo store, other sandboxes."""
    rebind: tuple[tuple[str, str], ...] = ()
    """(source, dest) pairs bound read-only after hiding: what commands still need (bwrap)."""
    env_bin: str = ""
    """The instance environment's bin directory, first on PATH."""
    extra_env: tuple[tuple[str, str], ...] = ()
    cgroup: Path | None = None
    """The sandbox's pids cgroup (root only), or None."""
    network: bool = False
    memory_mb: int = 4096
    max_procs: int = 512
    file_size_mb: int = 512
    cpu_time_s: int = 600
    output_limit_bytes: int = 65536


def choose_level(requested: str) -> str:
    """The isolation level in force for `requested` (auto | bwrap | unshare | pgroup)."""
    if requested == "auto":
        level = next(lvl for lvl in LEVELS if available(lvl))
    elif requested in LEVELS:
        if not available(requested):
            raise SandboxError(_unavailable_message(requested))
        level = requested
    else:
        raise SandboxError(f"Unknown isolation {requested!r}; choose one of: auto, {', '.join(LEVELS)}.")
    if level not in _announced:
        _announced.add(level)
        log.info("local sandbox isolation: %s%s", level,
                 "" if level == "bwrap" else " (install bubblewrap for read-only host and no network)")
    return level


def available(level: str) -> bool:
    if level == "bwrap":
        return shutil.which("bwrap") is not None
    if level == "unshare":
        return os.geteuid() == 0 and shutil.which("unshare") is not None
    return True


def _unavailable_message(level: str) -> str:
    if level == "bwrap":
        return "Isolation 'bwrap' needs bubblewrap; install it (apt-get install bubblewrap) or use isolation=auto."
    return "Isolation 'unshare' needs root and util-linux `unshare`; use isolation=auto or pgroup."


def needed_binds(hidden: tuple[str, ...], bin_dir: str) -> tuple[tuple[str, str], ...]:
    """The environment's directory and the prefix of every hop of its python's symlink chain
    (a venv -> pyenv -> system python), bound back read-only where a hidden directory covers them."""
    if not bin_dir:
        return ()
    wanted = [str(Path(bin_dir).parent)] + [str(Path(hop).parent.parent)
                                           for hop in _link_chain(Path(bin_dir, "python"))]
    under = [p for p in dict.fromkeys(wanted)
             if any(p == h or p.startswith(h.rstrip("/") + "/") for h in hidden)]
    return tuple((p, p) for p in under)


def _link_chain(path: Path, limit: int = 16) -> list[str]:
    hops = []
    while path.is_symlink() and len(hops) < limit:
        path = path.parent / os.readlink(path)
        hops.append(os.path.normpath(path))
    return hops


# --------------------------------------------------------------------------- command lines


def argv_for(jail: Jail, cmd: str) -> list[str]:
    """The full argv: privilege drop, isolation wrapper, then bash with limits and the command."""
    script = f"{limits_prelude(jail)}\ncd {_q(str(jail.workdir))} || exit 125\n{cmd}"
    inner = ["bash", "-c", script]
    join = cgroups.join_argv(jail.cgroup)
    if jail.level == "bwrap":
        return join + bwrap_args(jail) + inner
    if jail.level == "unshare":
        return join + unshare_args(jail) + inner
    return join + _pdeathsig() + inner


def limits_prelude(jail: Jail) -> str:
    kib = jail.memory_mb * 1024
    return (f"ulimit -S -H -v {kib} -u {jail.max_procs} -f {jail.file_size_mb * 1024} "
            f"-t {jail.cpu_time_s} -c 0 || exit 125")


def _pdeathsig() -> list[str]:
    """pgroup level: the command's shell dies with the thread that started it."""
    return ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []


def bwrap_args(jail: Jail) -> list[str]:
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--unshare-user", "--uid", "1000", "--gid", "1000",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox",
            "--die-with-parent", "--new-session"]
    if not jail.network:
        args.append("--unshare-net")
    for path in jail.hidden:
        args += ["--tmpfs", path]
    args += ["--bind", str(jail.tmpdir), "/tmp"]
    for source, dest in jail.rebind:
        args += ["--ro-bind", source, dest]
    args += ["--bind", str(jail.workdir), str(jail.workdir), "--chdir", str(jail.workdir), "--"]
    return args


def unshare_args(jail: Jail) -> list[str]:
    net = [] if jail.network else ["--net"]
    rw = [jail.workdir, jail.tmpdir]
    binds = " && ".join(f"mount --bind {_q(str(p))} {_q(str(p))}" for p in rw)
    setup = f"{binds} && mount -o remount,bind,ro / && exec \"$@\""
    return ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", *net,
            "--", "sh", "-c", setup, "sh"]


def environment(jail: Jail) -> dict[str, str]:
    """The scrubbed environment: an allow-list plus fixed values; no host secrets pass."""
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    home = "/tmp" if jail.level == "bwrap" else str(jail.tmpdir)
    path = f"{jail.env_bin}:{SYSTEM_PATH}" if jail.env_bin else SYSTEM_PATH
    env.update(PATH=path, HOME=home, TMPDIR=home, LANG=env.get("LANG", "C.UTF-8"),
               PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", PIP_NO_INPUT="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PAGER="cat", GIT_PAGER="cat", TERM="dumb")
    env.update(dict(jail.extra_env))
    env[TAG_VAR] = jail.tag
    return env


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# --------------------------------------------------------------------------- running


def run(jail: Jail, cmd: str, timeout: float, on_start=None) -> ExecResult:
    """Run `cmd` in `jail`; kill its whole tree at `timeout` seconds. Never raises for the command."""
    start = time.monotonic()
    proc = subprocess.Popen(argv_for(jail, cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=environment(jail),
                            start_new_session=True, close_fds=True)
    if on_start:
        on_start(proc)
    try:
        capture, timed_out = _pump(proc, start + timeout, jail.output_limit_bytes)
    finally:
        killed = proc.poll() is None
        kill_tree(proc, jail)
        if killed:
            await_gone(jail)
        else:
            cgroups.kill_all(jail.cgroup)
    code = TIMEOUT_EXIT if timed_out else _exit_code(proc.wait())
    return ExecResult(exit_code=code, output=capture.text(), truncated=capture.dropped > 0,
                      timed_out=timed_out, duration_s=time.monotonic() - start)


def _pump(proc: subprocess.Popen, deadline: float, limit: int) -> tuple["Capture", bool]:
    """Read output until EOF, or shortly after the command exits, or until the deadline."""
    capture, fd, exited_at = Capture(limit), proc.stdout.fileno(), None
    while True:
        now = time.monotonic()
        if now >= deadline:
            return capture, exited_at is None
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > 0.2:
            return capture, False  # a detached child holds the pipe open; it is killed next
        ready, _, _ = select.select([fd], [], [], min(deadline - now, 0.05))
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return capture, not _wait(proc, deadline)
            capture.add(chunk)


def _wait(proc: subprocess.Popen, deadline: float) -> bool:
    """Wait for the command until the deadline; False if it is still running then."""
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 0))
        return True
    except subprocess.TimeoutExpired:
        return False


def _exit_code(status: int) -> int:
    return 128 - status if status < 0 else status


def kill_tree(proc: subprocess.Popen, jail: Jail) -> None:
    """Kill the command's whole tree and reap it."""
    signal_tree(proc, jail)
    _drain(proc)


def signal_tree(proc: subprocess.Popen, jail: Jail) -> None:
    """SIGKILL the process group (bwrap/unshare take their pid namespace with them), then every
    process still carrying the sandbox tag (pgroup). Does not wait; safe from another thread."""
    if proc.returncode is None:  # not reaped yet, so the group id cannot have been reused
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if jail.level == "pgroup":
        cgroups.kill_all(jail.cgroup) if jail.cgroup else kill_tagged(jail.tag)


def await_gone(jail: Jail, limit_s: float = 3.0) -> None:
    """After killing bwrap/unshare from outside, their namespace dies asynchronously: kill what
    the cgroup still lists and wait until no process of the sandbox is left."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if jail.cgroup is not None:  # every command joined it: its member list is the truth
            cgroups.kill_all(jail.cgroup, rounds=1)
            if not cgroups.members(jail.cgroup):
                return
        elif not tagged_pids(jail.tag):
            return
        time.sleep(0.01)
    kill_tagged(jail.tag)


def _drain(proc: subprocess.Popen) -> None:
    proc.wait()
    if proc.stdout:
        proc.stdout.close()


def kill_tagged(tag: str, rounds: int = 5) -> int:
    """SIGKILL every process whose environment holds `SWE_RLVR_SANDBOX=<tag>`; repeat for forks."""
    killed = 0
    for _ in range(rounds):
        pids = tagged_pids(tag)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def tagged_pids(tag: str) -> list[int]:
    """Pids whose environment holds the tag (`tag` ending in '-' matches as a prefix)."""
    needle = f"{TAG_VAR}={tag}".encode()
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        if any(item.startswith(needle) if tag.endswith("-") else item == needle
               for item in environ.split(b"\0")):
            pids.append(int(entry.name))
    return pids


class Capture:
    """Head and tail of a byte stream, with a count of what was dropped in between."""

    def __init__(self, limit: int):
        self.head_limit, self.tail_limit = limit // 2, limit - limit // 2
        self.head, self.tail, self.tail_len, self.dropped = bytearray(), deque(), 0, 0

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
        while self.tail_len - len(self.tail[0]) >= self.tail_limit:
            self.dropped += len(self.tail[0])
            self.tail_len -= len(self.tail.popleft())
        extra = self.tail_len - self.tail_limit
        if extra > 0:
            self.tail[0] = self.tail[0][extra:]
            self.tail_len -= extra
            self.dropped += extra

    def text(self) -> str:
        head = bytes(self.head).decode("utf-8", errors="replace")
        tail = b"".join(self.tail).decode("utf-8", errors="replace")
        if not self.dropped:
            return head + tail
        return f"{head}\n[... output truncated: {self.dropped} bytes omitted ...]\n{tail}"
