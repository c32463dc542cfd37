"""Host-side copies for the docker backend: the checkout copied into /testbed, the trees copied out.

In: when the image lacks the repository, a fresh repository holding only the base commit (fetched
shallowly from the repo store with its original sha), so the agent can read no later history. Its
tarball is cached under `<cache_root>/swe-rlvr-docker-tars/` by repo and sha: the G sandboxes of
one instance build it once. Files are root-owned, as in SWE-bench images.

Out: `diff()` never runs the container's own programs (the agent may have replaced git, or what
PATH finds first). The engine streams /testbed as a tar archive, `extract_tree` unpacks it into a
host directory (safely, capped, without any `.git`), and this host's git diffs it against a
trusted git directory: the repo store's, or, for an image that held the repository, a one-commit
pack that the container wrote before any agent command ran, indexed (so hash-checked) here.

Simplification: no `.git` the agent could write is read, so a repository the agent nests in the
tree is diffed as plain files, not as a gitlink (a checked-out submodule shows no change, as before).
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox import tar_safety
from sandbox.base import PatchTooLarge, SandboxError
from sandbox.workspace import git

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer
    from docker import APIClient


def resolve_commit(repo: Path, commit: str) -> str:
    """The full sha of `commit` (a sha or a branch name) in the repo store."""
    return _git_host(repo, "rev-parse", "--verify", "-q", f"{commit}^{{commit}}").strip()


def _git_host(repo: Path, *args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd or repo,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SandboxError(f"git {' '.join(args[:2])} failed in {cwd or repo}: "
                           f"{proc.stderr.strip()[-400:]}"
                           f"; check that the repo store holds the instance's base commit.")
    return proc.stdout


def checkout_tar(repo: Path, sha: str, cache_root: Path) -> Path:
    """A cached tarball of a checkout of `sha` whose `.git` holds that one commit only."""
    dest = cache_root / "swe-rlvr-docker-tars" / repo.name / f"{sha}.tar"
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        tree = Path(tmp) / "tree"
        upload = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"
        _git_host(repo, "init", "-q", str(tree))
        _git_host(repo, "fetch", "-q", "--depth=1", f"--upload-pack={upload}",
                  f"file://{repo.resolve()}", sha, cwd=tree)
        _git_host(repo, "-c", "advice.detachedHead=false", "checkout", "-q", sha, cwd=tree)
        for key, value in (("user.name", "sandbox"), ("user.email", "sandbox@localhost"),
                           ("gc.auto", "0")):
            _git_host(repo, "config", key, value, cwd=tree)
        part = Path(tmp) / "checkout.tar"
        with tarfile.open(part, "w") as tar:
            tar.add(tree, arcname=".", filter=_root_owned)
        os.replace(part, dest)
    return dest


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


# --------------------------------------------------------------------------- copies out of a container


MAX_TREE_ENTRIES = 300_000
"""Most archive entries `extract_tree` reads (an inode bomb of empty files takes no disk quota)."""


@contextmanager
def archive_stream(api: APIClient, container_id: str, path: str,
                   chunk_bytes: int = 1 << 20) -> Iterator[Iterator[bytes]]:
    """The chunks of the engine's tar archive of `path` in the container, read as they arrive;
    the response is closed on exit, read to its end or not. A missing path raises
    `docker.errors.NotFound`."""
    response = api._get(api._url("/containers/{0}/archive", container_id), params={"path": path},
                        stream=True, headers={"Accept-Encoding": "identity"})  # as docker-py's
    try:
        api._raise_for_status(response)
        yield api._stream_raw_result(response, chunk_bytes, False)  # no socket timeout
    finally:
        response.close()


class ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks; each byte is copied once."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks, self._view, self._at = iter(chunks), memoryview(b""), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        while self._at >= len(self._view):
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._view, self._at = memoryview(chunk), 0
        buf = memoryview(buffer)
        n = min(len(buf), len(self._view) - self._at)
        buf[:n] = self._view[self._at:self._at + n]
        self._at += n
        return n


def extract_tree(chunks: Iterable[bytes], dest: Path, limit_bytes: int, max_entries: int = MAX_TREE_ENTRIES) -> None:
    """Unpack a docker archive of one directory into `dest` (the directory's own name stripped),
    safely: tarfile's "data" filter (see `_tree_filter`), no `.git` at any depth, and at most
    `limit_bytes` of file content and `max_entries` entries read, skipped ones included
    (`PatchTooLarge` beyond, before the excess is read). Memory stays at about one chunk."""
    total = entries = 0
    with tarfile.open(fileobj=ChunkReader(chunks), mode="r|") as tar:
        while (member := tar.next()) is not None:
            total, entries = total + member.size, entries + 1
            if total > limit_bytes or entries > max_entries:
                raise PatchTooLarge(f"The files under the repository add up to more than "
                                    f"{limit_bytes >> 20} MiB or {max_entries} entries (its base "
                                    f"checkout plus sandbox.disk_mb); the patch was refused. Remove "
                                    f"generated or bulk files before submitting.")
            inner = _inner(member)
            safe = None if inner is None else _tree_filter(inner, str(dest))
            if safe is not None:
                _place(tar, safe, dest)
            # a stream keeps every header read; only the current one is used (typeshed omits
            # the attribute; getmembers() would read the whole stream)
            tar.members.clear()  # type: ignore[attr-defined]


def _place(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    """Write one filtered entry. Links are made here: tarfile falls back to searching the whole
    archive when a link fails, which on a stream reads the rest of it. A link that cannot be made
    (a hard link to an entry left out, such as one in `.git`) is left out, and so is an entry
    whose path changed type while the engine read the tree."""
    target = dest / member.name
    try:
        if not (member.issym() or member.islnk()):
            tar_safety.extract_filtered(tar, member, dest)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.is_file():
            target.unlink()
        if member.issym():
            os.symlink(member.linkname, target)
        else:
            os.link(dest / member.linkname, target)
    except (FileExistsError, FileNotFoundError, NotADirectoryError, IsADirectoryError):
        pass


def _inner(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """`member` renamed below the archive's top directory; None for that directory itself and
    for anything in a `.git` (the agent's own repository metadata is never read)."""
    top, _, name = member.name.partition("/")
    if not name or ".git" in name.split("/"):
        return None
    if not member.islnk():
        return tar_safety.replace(member, name=name)
    link_top, _, link = member.linkname.partition("/")
    return tar_safety.replace(member, name=name, linkname=link) if link_top == top else None


def _tree_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's "data" filter (nothing lands outside `dest` or through a link, no device files,
    no owners, no setuid bits), except that a symlink pointing outside is kept as a link (git
    records a link's target and never follows it; the filter still refuses every later path
    through it) and what would be refused otherwise is left out, as git leaves out what it
    cannot track."""
    try:
        return tar_safety.data_filter(member, dest)
    except (tar_safety.AbsoluteLinkError, tar_safety.LinkOutsideDestinationError):
        if member.issym():  # its own path passed the filter's first check
            return tar_safety.replace(member, uid=None, gid=None, uname=None, gname=None,
                                      mode=None)
        return None
    except tar_safety.FilterError:
        return None


def store_git_dir(repo: Path) -> Path:
    """The git directory of a repo-store repository: ours, never written by a sandbox."""
    return Path(_git_host(repo, "rev-parse", "--absolute-git-dir").strip())


def init_pack_repo(git_dir: Path) -> Path:
    """A fresh bare repository at `git_dir` (this host's config); returns where its one pack goes."""
    git("init", "--quiet", "--bare", str(git_dir))
    return git_dir / "objects" / "pack" / "pack-base.pack"


def index_pack(git_dir: Path, pack: Path, sha: str) -> None:
    """Index `pack` with this host's git, which hashes every object in it, and check that it
    holds the commit `sha` and its tree."""
    env = {"GIT_DIR": str(git_dir)}
    git("index-pack", str(pack), env=env)
    if git("cat-file", "-e", f"{sha}^{{tree}}", env=env, check=False).returncode != 0:
        raise SandboxError(f"The pack of the image's repository lacks the base commit {sha}; "
                           f"check that the image holds it at /testbed.")
