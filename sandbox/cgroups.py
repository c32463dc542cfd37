"""A pids cgroup per sandbox: the process limit that also holds for root, and a sure tree-kill.

RLIMIT_NPROC is not enforced for real uid 0, and a user namespace does not change that (bwrap's
`--uid 1000` as root still runs as kernel uid 0). So when the host runs as root and a pids
controller is writable (cgroup v1 `/sys/fs/cgroup/pids`, or a v2 hierarchy with `pids` enabled),
every command joins `<pids root>/swe-rlvr/<sandbox id>` with `pids.max = max_procs`; a fork bomb
then hits EAGAIN inside its own sandbox while other sandboxes and the host fork normally. Killing
every pid listed in the group's `cgroup.procs` also reaches processes that left the session and
the tag behind. Without a writable controller `available()` is None and limits fall back to
RLIMIT_NPROC (enforced for non-root users only); the sandbox logs which applies.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

GROUP = "swe-rlvr"
CANDIDATES = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))


def pids_root() -> Path | None:
    """The writable pids hierarchy's `swe-rlvr` group, or None."""
    if os.geteuid() != 0:
        return None
    for base in CANDIDATES:
        if _has_pids(base):
            root = base / GROUP
            try:
                root.mkdir(exist_ok=True)
                if (base / "cgroup.subtree_control").exists():
                    (root / "cgroup.subtree_control").write_text("+pids")
                return root
            except OSError:
                continue
    return None


def _has_pids(base: Path) -> bool:
    if (base / "tasks").exists() and base.name == "pids":
        return True
    controllers = base / "cgroup.controllers"
    return controllers.exists() and "pids" in controllers.read_text().split()


def create(tag: str, max_procs: int) -> Path | None:
    """A fresh group `<owner pid>-<tag>` with `pids.max`, or None where cgroups are unavailable."""
    root = pids_root()
    if root is None:
        return None
    group = root / f"{os.getpid()}-{tag}"
    group.mkdir(exist_ok=True)
    (group / "pids.max").write_text(str(max_procs))
    return group


def join_argv(group: Path | None) -> list[str]:
    """An argv prefix that moves itself into `group` and then execs the rest."""
    if group is None:
        return []
    return ["sh", "-c", f'echo $$ > "{group}/cgroup.procs" && exec "$@"', "sh"]


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


def stale_groups() -> list[Path]:
    """Groups whose owning process is gone (for the sweeper); live owners' groups are kept."""
    root = pids_root()
    if root is None:
        return []
    out = []
    for group in root.iterdir():
        owner = group.name.split("-", 1)[0]
        if group.is_dir() and owner.isdigit() and not Path(f"/proc/{owner}").exists():
            out.append(group)
    return out


def owned_groups(tag: str) -> list[Path]:
    """The group(s) of the sandbox `tag`, whoever owns them."""
    root = pids_root()
    return [] if root is None else [g for g in root.glob(f"*-{tag}") if g.is_dir()]
