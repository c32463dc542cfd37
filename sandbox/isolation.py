"""Jails for a sandbox's commands: isolation levels, limits, environment, and tree killing.

A sandbox starts one jail and keeps it (`sandbox.executor`); a small runner inside it forks each
command (`sandbox.executor_main`). This module says what that jail is.

Isolation levels, best first (`SandboxConfig.isolation`, "auto" picks the best available):
- bwrap: bubblewrap with the host read-only, the working copy (at `REPO_DIR`) and a private /tmp
  writable, new user/pid/net/ipc/uts namespaces, `--die-with-parent` and `--new-session`. Killing
  bwrap kills the namespace's init, and with it every process inside, `setsid` children included.
  The repo store (which holds future commits), the base checkouts, other sandboxes (this one's
  host directory included) and the caller's home (credentials) are hidden under empty tmpfs
  mounts; the environment's interpreter prefix is bound back read-only.
- unshare: util-linux `unshare` (root only) with pid/net/mount namespaces, the working copy bound
  at `REPO_DIR` and the root mount remounted read-only (the copy and its private temp dir, $TMPDIR,
  stay writable); `--kill-child` tears the pid namespace down with the runner, which is the
  namespace's init.
- pgroup: no namespaces (no read-only host, network on); each command gets a new session. The
  tree is killed through the pids cgroup where there is one; otherwise every command process
  carries the sandbox's tag in its environment and is found by it in /proc. Without a cgroup, a
  command that scrubs its environment (`env -i`) and detaches escapes; the sweeper's TTL is the
  backstop. Commands run as the caller, in the host's pid namespace: as root, `kill -9 -1` in a
  command kills every process on the machine. Use it only for trusted commands.

Where commands see the working copy (`Jail.cwd`, which the agent's prompt names): at `REPO_DIR`
(/testbed) with bwrap and unshare, whatever random host directory holds it, so two sandboxes of
one instance show the agent the same paths (pwd, tracebacks, `grep -rn`, pytest's rootdir) and a
rerun with the same seeds samples the same tokens. For the same reason commands run with
PYTHONHASHSEED fixed and without address-space randomisation (`executor_main.fixed_layout`), so
set orders and object addresses in their output repeat too. Wall-clock text (pytest's "in
0.14s") still differs between runs. Simplifications, named:
- pgroup has no mount namespace, so commands run in the host directory and see its random path.
- unshare and pgroup give commands the host's temp dir as $TMPDIR (random per sandbox), where
  bwrap binds it at /tmp; unshare makes `REPO_DIR` on the host once as an empty mount point.
- The sandbox tag in every command's environment (`$SWE_RLVR_SANDBOX`, the random name of the
  sandbox's directory) and bwrap's /proc/self/mountinfo (the copy's host path) still differ
  between sandboxes: a command that prints them (`env`) sees random text. The tag must stay:
  processes are found by it.
- bwrap 0.8 cannot make a mount point inside a read-only root (no `--overlay` before 0.9), so the
  jail's / is a tmpfs holding a read-only bind of each top-level host entry (`root_args`),
  remounted read-only once `REPO_DIR` is in place. A top-level entry created after the jail
  started is not seen in it.

Limits are set by the shell that runs the command (`ulimit -H -S`, so the command cannot raise
them): address space, processes, file size, CPU seconds, no core files.
RLIMIT_NPROC is not enforced for kernel uid 0 (bwrap's `--uid 1000` as root is still uid 0
outside), so as root the jail joins the sandbox's pids cgroup (`sandbox.cgroups`), which holds the
process limit for everything in it and lets the whole jail be killed at every level.

Every command's processes end with it: background jobs a command leaves behind are killed when
its shell exits, as in a fresh SWE-agent action (`kill_scope` says how they are found).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox import cgroups
from sandbox.base import REPO_DIR, SandboxError

log = logging.getLogger(__name__)

LEVELS = ("bwrap", "unshare", "pgroup")
MOUNT_LEVELS = ("bwrap", "unshare")
"""Levels with a mount namespace: the working copy is bound at `REPO_DIR` there."""
TAG_VAR = "SWE_RLVR_SANDBOX"
TIMEOUT_EXIT = 124
ENV_ALLOW = ("LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HASH_SEED = "0"
"""PYTHONHASHSEED of every command: set orders in output (assertion messages) repeat run to run."""
_announced: set[str] = set()


@dataclass(frozen=True)
class Jail:
    """Everything one command needs to know about where and how it runs."""

    level: str
    workdir: Path
    """The working copy on the host (a random `<root>/copies/wc-*/repo`); commands see `cwd`."""
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

    @property
    def cwd(self) -> str:
        """The working copy as commands see it (their start directory)."""
        return command_dir(self.level, self.workdir)


def command_dir(level: str, workdir: Path) -> str:
    """Where commands see the working copy at `level`: `REPO_DIR` in a mount namespace, else the
    host directory itself (pgroup)."""
    return REPO_DIR if level in MOUNT_LEVELS else str(workdir)


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
        if level == "pgroup" and os.geteuid() == 0:
            log.warning("isolation pgroup as root: agent commands run as root on this host, and "
                        "`kill -9 -1` in one kills every process here; use bwrap or unshare "
                        "(sandbox.isolation=auto) for untrusted policies")
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


def jail_argv(jail: Jail, program: list[str]) -> list[str]:
    """The full argv that starts `program` in the jail: cgroup join, isolation wrapper, program."""
    join = cgroups.join_argv(jail.cgroup)
    if jail.level == "bwrap":
        return join + bwrap_args(jail) + program
    if jail.level == "unshare":
        return join + unshare_args(jail) + program
    return join + program


def limits_prelude(jail: Jail) -> str:
    """The shell lines that set every command's limits (hard = soft: the command cannot raise
    them) and enter the working copy; exit status 125 when either fails."""
    kib = jail.memory_mb * 1024
    return (f"ulimit -S -H -v {kib} -u {jail.max_procs} -f {jail.file_size_mb * 1024} "
            f"-t {jail.cpu_time_s} -c 0 || exit 125\ncd {_q(jail.cwd)} || exit 125")


def kill_scope(jail: Jail) -> str:
    """How the runner finds a finished command's leftovers: every other process of its pid
    namespace, the members of the sandbox's pids cgroup, or the processes carrying the tag."""
    if jail.level in ("bwrap", "unshare"):
        return "namespace"
    return "cgroup" if jail.cgroup is not None else "tag"


def runner_python(jail: Jail) -> str:
    """An interpreter the jail can run (the runner needs only the standard library, of Python
    3.8 or later): this process's own, else the instance environment's, else the system's
    python3. An environment of an old Python (SWE-bench's 3.5 and 3.6 specs) is skipped."""
    candidates = [sys.executable, str(Path(jail.env_bin, "python")) if jail.env_bin else "",
                  shutil.which("python3", path=SYSTEM_PATH) or ""]
    for candidate in filter(None, candidates):
        real = os.path.realpath(candidate)
        if os.access(real, os.X_OK) and _visible(jail, str(Path(real).parent.parent)) and _runs_runner(real):
            return real
    raise SandboxError("No Python 3.8 or later is visible inside the sandbox to run its commands; "
                       "install python3 under /usr or give the instance an environment "
                       "(sandbox.env_cache).")


@functools.lru_cache(maxsize=64)
def _runs_runner(python: str) -> bool:
    if python == os.path.realpath(sys.executable):
        return True
    probe = subprocess.run([python, "-c", "import sys; sys.exit(sys.version_info < (3, 8))"],
                           capture_output=True)
    return probe.returncode == 0


def _visible(jail: Jail, path: str) -> bool:
    """Whether `path` is readable inside the jail (bwrap hides some host directories)."""
    if jail.level != "bwrap":
        return True
    def under(root: str) -> bool:
        return path == root or path.startswith(root.rstrip("/") + "/")
    return not any(under(h) for h in jail.hidden) or any(under(src) for src, _ in jail.rebind)


def bwrap_args(jail: Jail) -> list[str]:
    args = ["bwrap", *root_args(), "--dev", "/dev", "--proc", "/proc",
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
    args += ["--bind", str(jail.workdir), REPO_DIR, "--remount-ro", "/", "--chdir", REPO_DIR, "--"]
    return args


def root_args() -> list[str]:
    """bwrap arguments that fill the jail's / with the host's top-level entries, read-only, and
    leave `REPO_DIR`'s place free for the working copy (see the module docstring)."""
    skip = {"proc", "dev", REPO_DIR.strip("/").split("/")[0]}
    args = []
    for entry in sorted(os.scandir("/"), key=lambda e: e.name):
        if entry.name in skip:
            continue
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry.path), entry.path]
        else:
            args += ["--ro-bind-try", entry.path, entry.path]
    return args


def unshare_args(jail: Jail) -> list[str]:
    net = [] if jail.network else ["--net"]
    tmp = _q(str(jail.tmpdir))
    setup = (f"mkdir -p {REPO_DIR} && mount --bind {_q(str(jail.workdir))} {REPO_DIR} && "
             f"mount --bind {tmp} {tmp} && mount -o remount,bind,ro / && exec \"$@\"")
    return ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", *net,
            "--", "sh", "-c", setup, "sh"]


def environment(jail: Jail) -> dict[str, str]:
    """The scrubbed environment: an allow-list plus fixed values; no host secrets pass."""
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    home = "/tmp" if jail.level == "bwrap" else str(jail.tmpdir)
    path = f"{jail.env_bin}:{SYSTEM_PATH}" if jail.env_bin else SYSTEM_PATH
    env.update(PATH=path, HOME=home, TMPDIR=home, LANG=env.get("LANG", "C.UTF-8"),
               PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", PYTHONHASHSEED=HASH_SEED,
               PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PAGER="cat", GIT_PAGER="cat",
               TERM="dumb")
    env.update(dict(jail.extra_env))
    env[TAG_VAR] = jail.tag
    return env


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# --------------------------------------------------------------------------- killing


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
