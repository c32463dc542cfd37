"""A pids and a memory cgroup per sandbox: limits over all its processes together, and a sure
tree-kill.

RLIMIT_NPROC is not enforced for real uid 0, and a user namespace does not change that (bwrap's
`--uid 1000` as root still runs as kernel uid 0). So when the host runs as root and a pids
controller is writable (cgroup v1 `/sys/fs/cgroup/pids`, or a v2 hierarchy with `pids` enabled),
every command joins `<pids root>/swe-rlvr/<sandbox id>` with `pids.max = max_procs`; a fork bomb
then hits EAGAIN inside its own sandbox while other sandboxes and the host fork normally. Killing
every pid listed in the group's `cgroup.procs` also reaches processes that left the session and
the tag behind. Without a writable controller `available()` is None and limits fall back to
RLIMIT_NPROC (enforced for non-root users only); the sandbox logs which applies.

The memory group (`<memory root>/swe-rlvr/<owner pid>-<tag>`, v1 `memory.limit_in_bytes` and
`memory.memsw.limit_in_bytes`, or v2 `memory.max` and `memory.swap.max = 0`) bounds the sandbox's
processes together, and the tmpfs pages they write (its /tmp and writable layer, `/dev/shm`):
four processes of 700 MB under a 1 GB limit do not all survive. Where no memory controller is
writable, each command's address-space limit (RLIMIT_AS) is the only bound.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

GROUP = "swe-rlvr"
BASES = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))


def controller_root(controller: str) -> Path | None:
    """The `swe-rlvr` group of the writable hierarchy holding `controller` (pids | memory):
    v1 `/sys/fs/cgroup/<controller>`, or a v2 hierarchy that has it enabled; None otherwise."""
    if os.geteuid() != 0:
        return None
    for base in (Path("/sys/fs/cgroup") / controller, *BASES):
        if _has(base, controller):
            root = base / GROUP
            try:
                root.mkdir(exist_ok=True)
                if (base / "cgroup.subtree_control").exists():
                    (root / "cgroup.subtree_control").write_text(f"+{controller}")
                return root
            except OSError:
                continue
    return None


def pids_root() -> Path | None:
    return controller_root("pids")


def _has(base: Path, controller: str) -> bool:
    if (base / "tasks").exists() and base.name == controller:
        return True
    controllers = base / "cgroup.controllers"
    return controllers.exists() and controller in controllers.read_text().split()


def _fresh_group(controller: str, tag: str) -> Path | None:
    """The group `<owner pid>-<tag>` of `controller`'s hierarchy, made now; None without one."""
    root = controller_root(controller)
    if root is None:
        return None
    group = root / f"{os.getpid()}-{tag}"
    group.mkdir(exist_ok=True)
    return group


def create(tag: str, max_procs: int) -> Path | None:
    """A fresh group `<owner pid>-<tag>` with `pids.max`, or None where cgroups are unavailable."""
    group = _fresh_group("pids", tag)
    if group is not None:
        (group / "pids.max").write_text(str(max_procs))
    return group


def create_memory(tag: str, memory_mb: int) -> Path | None:
    """A fresh memory group `<owner pid>-<tag>` limited to `memory_mb` (swap included), or None
    where no memory controller is writable."""
    group = _fresh_group("memory", tag)
    if group is None:
        return None
    limit = str(memory_mb << 20)
    limits = (("memory.max", limit), ("memory.swap.max", "0"), ("memory.limit_in_bytes", limit),
              ("memory.memsw.limit_in_bytes", limit))
    try:
        for name, value in limits:
            if (group / name).exists():
                (group / name).write_text(value)
    except OSError:
        remove(group)
        return None
    return group


def join_argv(*groups: Path | None) -> list[str]:
    """An argv prefix that moves itself into every group given and then execs the rest."""
    live = [g for g in dict.fromkeys(groups) if g is not None]
    if not live:
        return []
    joins = " && ".join(f'echo $$ > "{g}/cgroup.procs"' for g in live)
    return ["sh", "-c", f'{joins} && exec "$@"', "sh"]


def kill_all(group: Path | None, rounds: int = 20) -> None:
    """SIGKILL every process in the group until it is empty (forks race the first rounds)."""
    if group is None or not group.exists():
        return
    for _ in range(rounds):
        pids = _pids(group)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)


def members(group: Path) -> list[int]:
    """Pids currently in the group (empty once it is gone)."""
    return _pids(group)


def _pids(group: Path) -> list[int]:
    try:
        return [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def remove(group: Path | None) -> None:
    """Kill what is left in the group and delete it (a cgroup dir is removed with rmdir)."""
    if group is None:
        return
    kill_all(group)
    for _ in range(50):
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)  # zombies still being reaped


def _roots() -> list[Path]:
    return [r for r in dict.fromkeys(map(controller_root, ("pids", "memory"))) if r is not None]


def stale_groups() -> list[Path]:
    """Groups whose owning process is gone (for the sweeper); live owners' groups are kept."""
    out = []
    for root in _roots():
        for group in root.iterdir():
            owner = group.name.split("-", 1)[0]
            if group.is_dir() and owner.isdigit() and not Path(f"/proc/{owner}").exists():
                out.append(group)
    return out


def owned_groups(tag: str) -> list[Path]:
    """The groups of the sandbox `tag`, whoever owns them."""
    return [g for root in _roots() for g in root.glob(f"*-{tag}") if g.is_dir()]
