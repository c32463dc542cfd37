"""Jails for a sandbox's commands: isolation levels, limits, environment, and tree killing.

A sandbox starts one jail and keeps it (`sandbox.executor`); a small runner inside it forks each
command (`sandbox.executor_main`). This module says what that jail is.

Isolation levels, best first (`SandboxConfig.isolation`, "auto" picks the best available):
- bwrap: bubblewrap with new pid/net/ipc/uts namespaces, `--die-with-parent` and
  `--new-session`. Killing bwrap kills the namespace's init, and with it every process inside,
  `setsid` children included.
- unshare: util-linux `unshare` (root only) with new pid/mount(/net) namespaces; a shell builds
  the same view under a tmpfs and the runner chroots into it; `--kill-child` tears the pid
  namespace down with the runner, which is the namespace's init.
- pgroup: no namespaces (the host's whole file system, network on); each command gets a new
  session. The tree is killed through the pids cgroup where there is one; otherwise every
  command process carries the sandbox's tag in its environment and is found by it in /proc.
  Without a cgroup, a command that scrubs its environment (`env -i`) and detaches escapes; the
  sweeper's TTL is the backstop. Commands run as the caller, so pgroup is refused as root. Use it
  only for trusted commands.

**The jail is nobody on the host.** With bwrap and unshare, commands see only an allow-list of
the host (`sandbox.view`: the fixed system tools, the instance's environment, the working copy
and a private /tmp; no project checkout, run directory, dataset, home, socket, /sys or /var). As
root, every command runs as host uid/gid `JAIL_UID` (nobody) with no supplementary groups, no
capabilities (an empty bounding set) and no_new_privs: the runner drops to it before its first
command (`executor_main.drop_privileges`), so /proc/sys, root-only files and the jail's own mounts
are out of its reach. The working copy's files belong to that uid (`workspace.own_tree`). An
unprivileged caller's bwrap maps uid 1000 inside to the caller's own uid.

Where commands see the working copy (`Jail.cwd`, which the agent's prompt names): at `REPO_DIR`
(/testbed) with bwrap and unshare, whatever random host directory holds it, so two sandboxes of
one instance show the agent the same paths (pwd, tracebacks, `grep -rn`, pytest's rootdir) and a
rerun with the same seeds samples the same tokens. For the same reason commands run with
PYTHONHASHSEED fixed and without address-space randomisation (`executor_main.fixed_layout`), so
set orders and object addresses in their output repeat too. Wall-clock text (pytest's "in
0.14s") still differs between runs. Simplifications, named:
- pgroup has no mount namespace, so commands run in the host directory and see its random path,
  with the host's temp dir (random per sandbox) as $TMPDIR.
- The sandbox tag in every command's environment (`$SWE_RLVR_SANDBOX`, the random name of the
  sandbox's directory) and /proc/self/mountinfo (the copy's host path) still differ between
  sandboxes: a command that prints them (`env`) sees random text. The tag must stay: processes
  are found by it.

Limits for the whole sandbox (as root): the pids cgroup (process count, and a sure kill of the
whole jail) and the memory cgroup (`memory_mb` for all its processes and the tmpfs pages they
write) of `sandbox.cgroups`, and `disk_mb` for the working copy's writable layer and /tmp (a
size-capped tmpfs, `workspace`). Limits per command, set by the shell that runs it (`ulimit -H
-S`, so the command cannot raise them): address space, file size, CPU seconds, no core files,
and processes where no pids cgroup holds them (RLIMIT_NPROC counts every process of a uid, and
all sandboxes share `JAIL_UID`).

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
from sandbox import view as view_
from sandbox.base import REPO_DIR, SandboxError

log = logging.getLogger(__name__)

LEVELS = ("bwrap", "unshare", "pgroup")
MOUNT_LEVELS = ("bwrap", "unshare")
"""Levels with a mount namespace: the working copy is bound at `REPO_DIR` there."""
JAIL_UID = 65534
"""The host uid and gid (nobody, nogroup) of every command when the caller is root."""
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
    binds: tuple[str, ...] = ()
    """Host directories shown read-only at their own path besides the system's (bwrap,
    unshare): the instance's environment and the interpreters it links to (`view`)."""
    uid: int | None = None
    """The host uid and gid commands run as (`JAIL_UID` when the caller is root), None: the
    caller's own (an unprivileged caller)."""
    env_bin: str = ""
    """The instance environment's bin directory, first on PATH."""
    extra_env: tuple[tuple[str, str], ...] = ()
    cgroup: Path | None = None
    """The sandbox's pids cgroup (root only), or None."""
    memory_cgroup: Path | None = None
    """The sandbox's memory cgroup (root only): `memory_mb` for every process in it together."""
    network: bool = False
    memory_mb: int = 4096
    max_procs: int = 512
    file_size_mb: int = 512
    cpu_time_s: int = 600
    output_limit_bytes: int = 65536
    shm_mb: int = 64
    """Size cap of the jail's /dev/shm (a tmpfs)."""

    @property
    def cwd(self) -> str:
        """The working copy as commands see it (their start directory)."""
        return command_dir(self.level, self.workdir)

    @property
    def root(self) -> Path:
        """Host mount point of the `unshare` level's new root (inside the sandbox's directory)."""
        return self.workdir.parent / "jail-root"

    def view(self) -> list[view_.Mount]:
        """What the jail's commands see of the host (bwrap, unshare; see `sandbox.view`)."""
        return view_.mounts(self.binds, str(self.workdir), str(self.tmpdir), self.shm_mb << 20)


def command_dir(level: str, workdir: Path) -> str:
    """Where commands see the working copy at `level`: `REPO_DIR` in a mount namespace, else the
    host directory itself (pgroup)."""
    return REPO_DIR if level in MOUNT_LEVELS else str(workdir)


def choose_level(requested: str) -> str:
    """The isolation level in force for `requested` (auto | bwrap | unshare | pgroup). As root,
    pgroup is refused: its commands would run as host root."""
    if requested == "auto":
        level = next((lvl for lvl in LEVELS if available(lvl)), "")
        if not level:
            raise SandboxError(_unavailable_message("pgroup"))
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
    root = os.geteuid() == 0
    if level == "bwrap":
        return shutil.which("bwrap") is not None
    if level == "unshare":
        return root and shutil.which("unshare") is not None
    return not root


def _unavailable_message(level: str) -> str:
    if level == "bwrap":
        return "Isolation 'bwrap' needs bubblewrap; install it (apt-get install bubblewrap) or use isolation=auto."
    if level == "unshare":
        return "Isolation 'unshare' needs root and util-linux `unshare`; use isolation=auto or pgroup."
    return ("Isolation 'pgroup' would run agent commands as host root: it has no namespaces to "
            "drop privileges in. As root use isolation=bwrap (apt-get install bubblewrap) or "
            "unshare (isolation=auto picks one), or run as an unprivileged user.")


# --------------------------------------------------------------------------- command lines


def jail_argv(jail: Jail, program: list[str]) -> list[str]:
    """The full argv that starts `program` in the jail: cgroup join, isolation wrapper, program.
    As root, the program (the runner) drops to `jail.uid` itself before its first command
    (`executor_main.drop_privileges`)."""
    join = cgroups.join_argv(jail.cgroup, jail.memory_cgroup)
    if jail.level == "bwrap":
        return join + bwrap_args(jail) + program
    if jail.level == "unshare":
        return join + unshare_args(jail) + program
    return join + program


def limits_prelude(jail: Jail) -> str:
    """The shell lines that set every command's limits (hard = soft: the command cannot raise
    them) and enter the working copy; exit status 125 when either fails. Where a pids cgroup
    holds the process limit, RLIMIT_NPROC is left alone: it counts every process of the uid,
    and every sandbox's commands share `JAIL_UID`."""
    kib = jail.memory_mb * 1024
    procs = "" if jail.cgroup is not None else f" -u {jail.max_procs}"
    return (f"ulimit -S -H -v {kib}{procs} -f {jail.file_size_mb * 1024} "
            f"-t {jail.cpu_time_s} -c 0 || exit 125\ncd {_q(jail.cwd)} || exit 125")


def kill_scope(jail: Jail) -> str:
    """How the runner finds a finished command's leftovers: every other process of its pid
    namespace, the members of the sandbox's pids cgroup, or the processes carrying the tag."""
    if jail.level in ("bwrap", "unshare"):
        return "namespace"
    return "cgroup" if jail.cgroup is not None else "tag"


def runner_python(jail: Jail) -> str:
    """An interpreter the jail can run (the runner needs only the standard library, of Python
    3.8 or later): this process's own (whose prefix every jail shows), else the instance
    environment's, else the system's python3. An environment of an old Python (SWE-bench's 3.5
    and 3.6 specs) is skipped."""
    candidates = [os.path.realpath(sys.executable),
                  os.path.realpath(Path(jail.env_bin, "python")) if jail.env_bin else "",
                  "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else ""]
    for candidate in filter(None, candidates):
        if os.access(candidate, os.X_OK) and _visible(jail, candidate) and _runs_runner(candidate):
            return candidate
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
    """Whether `path` is readable inside the jail (the mount levels show an allow-list)."""
    return jail.level not in MOUNT_LEVELS or view_.visible(path, jail.binds)


def bwrap_args(jail: Jail) -> list[str]:
    """bubblewrap with the jail's view and new pid/ipc/uts(/net) namespaces. As root it needs no
    user namespace (the runner drops to `jail.uid`, a real unprivileged host uid); an
    unprivileged caller gets one, with uid 1000 inside mapped to its own uid outside."""
    user = [] if jail.uid is not None else ["--unshare-user", "--uid", "1000", "--gid", "1000"]
    args = ["bwrap", *view_.bwrap_args(jail.view()), *user,
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox",
            "--die-with-parent", "--new-session"]
    if not jail.network:
        args.append("--unshare-net")
    return args + ["--chdir", REPO_DIR, "--"]


def unshare_args(jail: Jail) -> list[str]:
    """util-linux `unshare` (as root) with new pid/mount(/net) namespaces; a shell builds the
    jail's view under `jail.root` and execs the runner, which chroots there and drops to
    `jail.uid` before its first command (`executor_main.drop_privileges`)."""
    net = [] if jail.network else ["--net"]
    setup = (f"mkdir -p {_q(str(jail.root))} && {view_.shell_script(jail.view(), str(jail.root))} "
             f"&& exec \"$@\"")
    return ["unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private",
            *net, "--", "sh", "-c", setup, "sh"]


def environment(jail: Jail) -> dict[str, str]:
    """The scrubbed environment: an allow-list plus fixed values; no host secrets pass."""
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    home = "/tmp" if jail.level in MOUNT_LEVELS else str(jail.tmpdir)
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
