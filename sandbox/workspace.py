"""Working copies: a fresh, writable checkout of the base commit per sandbox.

A *base checkout* is made once per (repository, commit) under `<root>/bases/`: a new git repository
holding only the base commit, fetched shallowly from the repo store, so an agent cannot read the
fix from later history (`git log --all` shows nothing newer than the base). Bases are never written
after they are built: they serve only as the lower layer of an overlay or as a copy source, and
bubblewrap hides the whole `bases/` directory from commands.

A *working copy* lives in `<root>/copies/wc-*/` next to a marker file (owner pid, its start time,
creation time, TTL). Where the kernel allows (root, overlayfs) the repo is an overlay over the base
(~1 ms); elsewhere it is a `cp -a --reflink=auto` copy. Hard links are deliberately not used: a
file's owner may chmod it writable and the write would leak into the shared base. An environment
may add a `layer` (the git-ignored files its install generated, see `sandbox.environments`): a
second lower layer above the base, or copied over the copy. It holds only ignored files, so the
base stays shared by every environment of its commit and `diff()` is unchanged.

As root, commands run as an unprivileged uid (`isolation.JAIL_UID`): the base and layer are
chowned to it once (`own_tree`; they are never written through, only copied up), and the copy's
upper layer, work dir and temp dir live in `rw/`, a tmpfs capped at `sandbox.disk_mb`, so the
sandbox cannot fill the host's disk. `tree_diff` computes a patch with the host's git and a
trusted git directory, capped at `sandbox.max_patch_kb`.

`sweep` removes working copies whose owner died or whose TTL passed, unmounting their overlays and
killing processes still tagged with their id. Simplification: overlays are mounted in the host's
mount namespace (so the host-side file helpers see them); a SIGKILLed owner therefore leaves one
mount behind until the next sweep.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox.base import PatchTooLarge, SandboxError

log = logging.getLogger(__name__)

MARKER = "sandbox.json"
GIT_BASE = ("git", "-c", "safe.directory=*", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "HOME": "/nonexistent",
           "GIT_AUTHOR_NAME": "sandbox", "GIT_AUTHOR_EMAIL": "sandbox@localhost",
           "GIT_COMMITTER_NAME": "sandbox", "GIT_COMMITTER_EMAIL": "sandbox@localhost"}
_libc = ctypes.CDLL(None, use_errno=True)
_RESOLVED: dict[tuple[str, str], str] = {}


def git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, check: bool = True,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run host-side git with system/global config, hooks and fsmonitor disabled."""
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **GIT_ENV, **(env or {})}
    proc = subprocess.run([*GIT_BASE, *args], cwd=cwd, env=full_env, input=stdin,
                          capture_output=True, text=True, errors="replace")
    if check and proc.returncode != 0:
        raise SandboxError(f"git {' '.join(args[:3])} failed in {cwd}: {proc.stderr.strip()[-400:]}")
    return proc


def sandbox_root(workdir: str | None) -> Path:
    """Root of bases and working copies: `workdir`, or a per-user directory in the temp dir."""
    root = Path(workdir) if workdir else Path(tempfile.gettempdir()) / f"swe-rlvr-{os.getuid()}"
    (root / "copies").mkdir(parents=True, exist_ok=True)
    (root / "bases").mkdir(parents=True, exist_ok=True)
    return root


# --------------------------------------------------------------------------- base checkouts


def resolve_commit(repo_dir: Path, commit: str) -> str:
    """The full sha of `commit` (a sha or a branch name) in the repo store; full shas are
    remembered once seen (a branch name is resolved every time: it may move)."""
    key = (str(repo_dir), commit)
    if key in _RESOLVED:
        return _RESOLVED[key]
    proc = git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", cwd=repo_dir, check=False)
    if proc.returncode != 0:
        raise SandboxError(f"Commit {commit!r} is not in {repo_dir}; fetch it there "
                           f"(git -C {repo_dir} fetch origin {commit}) or fix the instance's base_commit.")
    sha = proc.stdout.strip()
    if sha == commit:
        _RESOLVED[key] = sha
    return sha


def base_checkout(repo_dir: Path, sha: str, root: Path) -> Path:
    """The cached checkout of `sha`, built atomically on first use."""
    dest = root / "bases" / repo_dir.name / sha
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{sha[:12]}-"))
    try:
        _fetch_commit(repo_dir, sha, tmp)
        os.chmod(tmp, 0o755)
        os.rename(tmp, dest)
    except OSError:
        if not dest.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _fetch_commit(repo_dir: Path, sha: str, dest: Path) -> None:
    upload = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"
    git("init", "--quiet", str(dest))
    git("fetch", "--quiet", "--depth=1", f"--upload-pack={upload}",
        f"file://{repo_dir.resolve()}", sha, cwd=dest)
    git("-c", "advice.detachedHead=false", "checkout", "--quiet", sha, cwd=dest)
    for key, value in (("core.checkStat", "minimal"), ("core.trustctime", "false"),
                       ("user.name", "sandbox"), ("user.email", "sandbox@localhost"),
                       ("gc.auto", "0")):
        git("config", key, value, cwd=dest)


# --------------------------------------------------------------------------- working copies


@dataclass(frozen=True)
class WorkingCopy:
    path: Path
    """The sandbox directory: marker, repo, and `rw/` (tmp and the overlay's upper/work dirs)."""
    repo: Path
    tmp: Path
    base: Path
    sha: str
    mounted: bool

    @property
    def tag(self) -> str:
        return self.path.name


def create_working_copy(base: Path, sha: str, root: Path, ttl_s: int, mode: str = "auto",
                        layer: str | Path = "", owner: int | None = None,
                        disk_mb: int = 0) -> WorkingCopy:
    """A fresh writable copy of `base` with `layer` (if any) over it (`mode`: auto | overlay |
    copy), labelled with a marker, writable by `owner` (a uid; None: the caller). As root, the
    overlay's upper layer and the copy's temp dir live on a tmpfs of `disk_mb` MiB (0: uncapped),
    so the sandbox cannot fill more disk than that."""
    if mode not in ("auto", "overlay", "copy"):
        raise SandboxError(f"Unknown working_copy {mode!r}; choose one of: auto, overlay, copy.")
    path = Path(tempfile.mkdtemp(dir=root / "copies", prefix="wc-"))
    write_marker(path, ttl_s)
    rw = _writable_area(path, disk_mb)
    repo, tmp = path / "repo", rw / "tmp"
    for d in (repo, tmp, rw / "upper", rw / "work"):
        d.mkdir()
    os.chmod(tmp, 0o1777)
    lowers = [Path(layer), base] if layer else [base]
    for lower in lowers:
        own_tree(lower, owner)
    mounted = mode != "copy" and _mount_overlay(lowers, rw, repo, owner)
    if mode == "overlay" and not mounted:
        remove_working_copy(path)
        raise SandboxError("overlayfs is not available here (it needs root and kernel support); "
                           "set sandbox.working_copy=auto or copy.")
    if not mounted:
        for lower in reversed(lowers):
            _copy_tree(lower, repo)
    return WorkingCopy(path=path, repo=repo, tmp=tmp, base=base, sha=sha, mounted=mounted)


def _writable_area(path: Path, disk_mb: int) -> Path:
    """`path/rw`: a tmpfs of `disk_mb` MiB where the caller may mount one (root), else a plain
    directory. Its pages are charged to the memory cgroup of whoever writes them."""
    rw = path / "rw"
    rw.mkdir()
    if disk_mb > 0 and os.geteuid() == 0:
        options = f"size={disk_mb}m,mode=755".encode()
        if _libc.mount(b"tmpfs", str(rw).encode(), b"tmpfs", 0, options) != 0:
            log.warning("cannot mount a %d MiB tmpfs for the sandbox's writable layer (errno %d); "
                        "its disk use is not capped", disk_mb, ctypes.get_errno())
    return rw


def own_tree(tree: Path, owner: int | None) -> None:
    """Make `owner` the owner of every file of `tree` (a base checkout or an environment's
    layer), once: commands running as `owner` must be able to change them in their copy."""
    if owner is None or tree.stat().st_uid == owner:
        return
    proc = subprocess.run(["chown", "-R", f"{owner}:{owner}", str(tree)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SandboxError(f"chown of {tree} to uid {owner} failed: {proc.stderr.strip()[-300:]}")


def write_marker(path: Path, ttl_s: int) -> None:
    marker = {"pid": os.getpid(), "pid_start": process_start(os.getpid()),
              "created": time.time(), "ttl_s": ttl_s}
    (path / MARKER).write_text(json.dumps(marker))


def _mount_overlay(lowers: list[Path], rw: Path, repo: Path, owner: int | None) -> bool:
    """Mount `lowers` (topmost first) at `repo` with a fresh upper layer in `rw`."""
    if os.geteuid() != 0:
        return False
    shutil.copystat(lowers[-1], rw / "upper")
    if owner is not None:
        os.chown(rw / "upper", owner, owner)
    lowerdir = ":".join(str(p) for p in lowers)
    options = f"lowerdir={lowerdir},upperdir={rw / 'upper'},workdir={rw / 'work'}".encode()
    rc = _libc.mount(b"overlay", str(repo).encode(), b"overlay", 0, options)
    return rc == 0


def _copy_tree(base: Path, repo: Path) -> None:
    proc = subprocess.run(["cp", "-a", "--reflink=auto", f"{base}/.", str(repo)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SandboxError(f"Copying the base checkout {base} failed: {proc.stderr.strip()}. "
                           f"Check free disk space under {repo.parent.parent}.")


def remove_working_copy(path: Path) -> None:
    """Unmount (if mounted) and delete a working copy; safe to call twice."""
    for mount in (path / "repo", path / "rw"):
        if os.path.ismount(mount):
            _libc.umount2(str(mount).encode(), 2)  # MNT_DETACH: succeeds even while a file is open
            if os.path.ismount(mount):  # never delete through a mount
                raise SandboxError(f"Cannot unmount {mount}; unmount it by hand (umount -l {mount}) "
                                   f"and run `swe-rlvr sandbox sweep` again.")
    for attempt in range(6):  # a dying process may still create files while the tree goes
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(0.05 * 2 ** attempt)
    log.warning("working copy %s survived removal; `swe-rlvr sandbox sweep` will retry", path)


# --------------------------------------------------------------------------- diffs


JUNK = (":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc", ":(exclude,glob)**/*.egg-info/**")
"""Never part of a patch: byte-code caches and install metadata."""


def tree_diff(git_dir: Path, work_tree: Path, sha: str, max_bytes: int) -> str:
    """The patch from `sha` to the files in `work_tree`, new files included, computed by this
    host's git with `git_dir` (ours, never the agent's: it may rewrite history or plant hooks and
    `core.fsmonitor` commands in its own `.git`) read-only, a throw-away index and object
    directory. Binary files and `JUNK` are left out (they cannot travel in a text patch). More
    than `max_bytes` of patch raises `PatchTooLarge` without reading the rest."""
    with tempfile.TemporaryDirectory(prefix="swe-rlvr-diff-") as tmp:
        Path(tmp, "objects").mkdir()
        env = {"GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(work_tree),
               "GIT_INDEX_FILE": f"{tmp}/index", "GIT_OBJECT_DIRECTORY": f"{tmp}/objects",
               "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(Path(git_dir, "objects"))}
        git("read-tree", sha, env=env)
        git("add", "-A", "--", ".", *JUNK, env=env)
        numstat = git("diff", "--cached", "--numstat", "-z", sha, env=env).stdout
        binaries = [item[4:] for item in numstat.split("\0") if item.startswith("-\t-\t")]
        excludes = [f":(exclude,literal){p}" for p in binaries]
        return _capped_git(["diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv",
                            sha, "--", ".", *excludes], env, max_bytes)


def _capped_git(args: list[str], env: dict[str, str], max_bytes: int) -> str:
    """stdout of host git, read only up to `max_bytes` (PatchTooLarge past it)."""
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **GIT_ENV, **env}
    with subprocess.Popen([*GIT_BASE, *args], env=full_env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None  # both are PIPE
        out = proc.stdout.read(max_bytes + 1)
        if len(out) > max_bytes:
            proc.kill()
            raise PatchTooLarge(f"The patch is larger than {max_bytes // 1024} KiB "
                                f"(sandbox.max_patch_kb); it was refused. Revert generated or "
                                f"bulk changes before submitting.")
        err = proc.stderr.read()
        if proc.wait() != 0:
            raise SandboxError(f"git {' '.join(args[:2])} failed: {err.decode(errors='replace')[-400:]}")
    return out.decode(errors="replace")


# --------------------------------------------------------------------------- sweeping


def process_start(pid: int) -> str:
    """The start time of `pid` in clock ticks (field 22 of /proc/<pid>/stat), "" if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def is_stale(path: Path, older_than: float | None = None, now: float | None = None,
             dead_owner_only: bool = False) -> bool:
    """True when the copy's owner is dead, its TTL passed, or it is older than `older_than`;
    with `dead_owner_only`, only when its owner is dead (or it was never finished)."""
    now = time.time() if now is None else now
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return now - path.stat().st_mtime > 60  # half-created; give its creator a minute
    age = now - marker["created"]
    owner_alive = process_start(marker["pid"]) == marker["pid_start"]
    if dead_owner_only:
        return not owner_alive
    if older_than is not None and age > older_than:
        return True
    return not owner_alive or age > marker["ttl_s"]


def sweep(root: Path, older_than: float | None = None, dead_owner_only: bool = False) -> list[str]:
    """Remove stale working copies under `root` (`is_stale`), killing their processes; returns
    their names."""
    from sandbox import cgroups
    from sandbox.isolation import kill_tagged
    removed = []
    for path in sorted((root / "copies").glob("wc-*")):
        if path.is_dir() and is_stale(path, older_than, dead_owner_only=dead_owner_only):
            for group in cgroups.owned_groups(path.name):
                cgroups.remove(group)
            kill_tagged(path.name)
            remove_working_copy(path)
            removed.append(path.name)
    for group in cgroups.stale_groups():
        cgroups.remove(group)
    return removed
