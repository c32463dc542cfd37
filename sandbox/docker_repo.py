"""Host-side checkouts for the docker backend: what gets copied to /testbed when the image lacks it.

The checkout is a fresh repository holding only the base commit (fetched shallowly from the repo
store with its original sha), so the agent can read no later history and `diff()` compares with
the real base. Its tarball is cached under `<cache_root>/swe-rlvr-docker-tars/` by repo and sha:
the G sandboxes of one instance build it once. Files are root-owned, as in SWE-bench images.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

from sandbox.base import SandboxError


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
