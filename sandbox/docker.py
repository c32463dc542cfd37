"""The docker backend: one fresh container per sandbox, driven through the docker SDK.

The image is the instance's own, or the one `sandbox.docker_image` names (see
`sandbox.docker_container`). The repository sits at `/testbed` (SWE-bench's convention): if the
image already holds the base commit there (SWE-bench and SWE-smith images), that checkout is used;
otherwise a checkout holding only the base commit (no later history for the agent to read) is
copied in from the repo store.

The policy is hostile: commands run as root in the container and try whatever earns reward or
reaches the host. So nothing the host trusts is computed by the container after the first agent
command. `diff()` streams /testbed out through the engine and diffs it with this host's git against
a git directory the agent never touched (see `sandbox.docker_repo`); a replaced `git` or a forged
`.git` changes nothing, and a patch past `sandbox.max_patch_kb` is `PatchTooLarge`, never held whole.

What the container allows, hides and caps is `sandbox.docker_container`'s to say. Timeouts work in
three layers (`sandbox.docker_exec`); a command that outlives even the host deadline, or a sandbox
past its disk cap, kills the container, and the sandbox is then dead: every later call raises
`SandboxError`. Leaks are handled by labels, a TTL and `sandbox.docker_sweep.sweep_containers`; the
sandbox's host directory (the trusted git directory, diff trees) is a marked `wc-docker-*` working
copy that `workspace.sweep` removes once its owner dies.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import shlex
import shutil
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox import workspace
from sandbox.base import REPO_DIR, ExecResult, PatchTooLarge, SandboxError
from sandbox.docker_container import ENV, MIB, docker_client, ensure_image, resolve_image, start_container
from sandbox.docker_exec import HOST_GRACE_S, DiskWatch, Exec, FileSink, HeadTail, Sink, wrapped
from sandbox.docker_repo import (
    archive_stream,
    checkout_tar,
    extract_tree,
    index_pack,
    init_pack_repo,
    resolve_commit,
    store_git_dir,
)
from sandbox.docker_sweep import remove_container

if TYPE_CHECKING:
    from docker.models.containers import Container

    from swe_rlvr.config import SandboxConfig
    from swe_rlvr.instances import Instance

WORKDIR = REPO_DIR
CONDA_ENV_BIN = "/opt/miniconda3/envs/testbed/bin"  # SWE-bench images' environment
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GIT = "git -c safe.directory=* -c core.quotepath=off -c core.hooksPath=/dev/null"
SETUP_TIMEOUT_S = 600.0
"""Limit of the sandbox's own commands (probing the image, placing and packing the repo)."""


class DockerSandbox:
    """A sandbox in a fresh container; satisfies `sandbox.base.Sandbox`."""

    workdir = WORKDIR

    def __init__(self, instance: Instance, cfg: SandboxConfig, repo_store: str | Path) -> None:
        self.instance, self.cfg = instance, cfg
        self.image = resolve_image(instance, cfg)
        self._dead, self._disk_full, self._removed = "", "", False
        self._container: Container | None = None
        self._host: Path | None = None
        self._watch: DiskWatch | None = None
        self._cwd, self._env = "/", dict(ENV)
        self._client = docker_client()
        try:
            ensure_image(self._client, self.image)
            self._host = host_dir(cfg)
            self._container, quota = start_container(self._client, cfg, self.image,
                                                     instance.instance_id)
            self._env, found = self._probe()
            self.base, self._git_dir = self._place_repo(found, repo_store)
            self._tree_limit = self._tree_bytes() + cfg.disk_mb * MIB
            if not quota:
                self._watch = DiskWatch(self._client.api, self._container.id, cfg.disk_mb * MIB,
                                        self._on_disk_full)
            self._cwd = WORKDIR
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ the Sandbox protocol

    def execute(self, cmd: str, timeout: float | None = None) -> ExecResult:
        """Run `cmd` with bash in /testbed; output head+tail capped, whole tree killed at timeout."""
        limit = float(timeout if timeout is not None else self.cfg.command_timeout_s)
        out = HeadTail(self.cfg.output_limit_bytes)
        start = time.monotonic()
        code = self._run(wrapped(cmd, limit, uuid.uuid4().hex), limit, out, HeadTail(4096))
        duration = time.monotonic() - start
        if code is None:  # the sandbox killed the container: at the deadline or past disk_mb
            why = self._disk_full or f"the command outlived its {limit:g}s limit"
            out.add(f"\n[sandbox killed: {why}]\n".encode())
            timed_out = not self._disk_full
            return ExecResult(124 if timed_out else 137, out.text(), out.dropped > 0, timed_out,
                              duration)
        timed_out = code == 137 and duration >= limit
        return ExecResult(124 if timed_out else code, out.text(), out.dropped > 0, timed_out, duration)

    def read_file(self, path: str) -> str:
        """The text of `path` (relative to /testbed or absolute), invalid UTF-8 replaced."""
        import docker
        full = self._path(path)
        self._check_alive()
        try:
            stream, _stat = self.container.get_archive(full)
        except docker.errors.NotFound as exc:
            raise FileNotFoundError(f"No such file in the sandbox: {full}") from exc
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            data = tar.extractfile(member) if member is not None and member.isfile() else None
            if data is None:
                raise IsADirectoryError(f"Not a regular file in the sandbox: {full}")
            return data.read().decode("utf-8", errors="replace")

    def write_file(self, path: str, content: str) -> None:
        """Create or replace `path` (parents made as needed) with `content` as UTF-8."""
        import docker
        full = self._path(path)
        parent, name = posixpath.split(full)
        data = content.encode("utf-8")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        self._check_alive()
        for attempt in (1, 2):
            try:
                self.container.put_archive(parent, buf.getvalue())
                return
            except docker.errors.NotFound:  # the parent is missing: make it, then try once more
                if attempt == 1:
                    self._setup(f"mkdir -p {shlex.quote(parent)}")
                    continue
                raise SandboxError(f"Writing {full} in the sandbox failed: {parent} is missing.") from None
            except docker.errors.APIError as exc:
                raise SandboxError(f"Writing {full} in the sandbox failed ({exc.explanation}); "
                                   f"is {parent} a directory?") from exc

    def diff(self) -> str:
        """The patch from the base commit to the files in /testbed, new files included, at most
        `sandbox.max_patch_kb` (`PatchTooLarge` beyond, as for a sandbox killed past disk_mb).

        The host computes it, never the container: /testbed is streamed out through the engine
        (without `.git`) and `workspace.tree_diff` diffs it with this host's git against the
        trusted git directory, exactly as the local backend does (binary files and byte-code
        caches are left out: they cannot travel in a text patch).
        """
        import docker
        if self._disk_full:
            raise PatchTooLarge(f"No patch: this docker sandbox's {self._disk_full}.")
        self._check_alive()
        tree = Path(tempfile.mkdtemp(dir=self._host, prefix="tree-"))
        try:
            with archive_stream(self._client.api, self.container.id, WORKDIR) as chunks:
                extract_tree(chunks, tree, self._tree_limit)
            return workspace.tree_diff(self._git_dir, tree, self.base, self.cfg.max_patch_kb * 1024)
        except docker.errors.NotFound as exc:
            raise SandboxError(f"{WORKDIR} is gone from the sandbox (or its container is); there "
                               f"is no patch to take.") from exc
        finally:
            shutil.rmtree(tree, ignore_errors=True)

    def close(self) -> None:
        """Remove the container and the host directory (idempotent); the sandbox is dead afterwards."""
        self._dead = self._dead or "the sandbox was closed"
        if self._watch is not None:
            self._watch.stop()
        if self._container is not None and not self._removed:
            self._removed = True
            remove_container(self._container)
        self._client.close()
        if self._host is not None:
            workspace.remove_working_copy(self._host)

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def container(self) -> Container:
        """The sandbox's container (`__init__` starts it; only `close` may find none)."""
        if self._container is None:
            raise SandboxError("This docker sandbox has no container; open a new sandbox.")
        return self._container

    # ------------------------------------------------------------------ environment and repository

    def _probe(self) -> tuple[dict[str, str], list[str]]:
        """One exec: the commands' environment (the image's PATH, with SWE-bench's conda env
        first when the image has it), and ["<HEAD sha>", "<base sha>"] when /testbed already
        holds the base commit; otherwise /testbed is emptied for the copy."""
        commit = shlex.quote(self.instance.base_commit + "^{commit}")
        lines = self._setup(
            f"printf '%s\\n' \"$PATH\"; test -d {CONDA_ENV_BIN} && echo conda || echo plain; "
            f"if cd {WORKDIR} 2>/dev/null && head=$({GIT} rev-parse --verify -q HEAD) && "
            f"sha=$({GIT} rev-parse --verify -q {commit}); then echo \"$head $sha\"; "
            f"else cd / && rm -rf {WORKDIR} && mkdir -p {WORKDIR}; fi").splitlines()
        path = lines[0] or SYSTEM_PATH
        if lines[1] == "conda":
            path = f"{CONDA_ENV_BIN}:/opt/miniconda3/bin:{path}"
        return {**ENV, "PATH": path}, " ".join(lines[2:]).split()

    def _place_repo(self, found: list[str], repo_store: str | Path) -> tuple[str, Path]:
        """Make /testbed a checkout of the base commit; returns the commit's sha and the trusted
        git directory that `diff()` compares with."""
        if len(found) == 2:  # the image holds the repo and the commit (SWE-bench, SWE-smith)
            head, sha = found
            if head != sha:
                self._setup(f"cd {WORKDIR} && {GIT} -c advice.detachedHead=false checkout -q -f {sha}")
            return sha, self._pack_base(sha)
        from sandbox.repos import ensure_repo
        repo = Path(ensure_repo(self.instance, repo_store))
        sha = resolve_commit(repo, self.instance.base_commit)
        tar = checkout_tar(repo, sha, Path(self.cfg.workdir or tempfile.gettempdir()))
        with open(tar, "rb") as fh:
            if not self.container.put_archive(WORKDIR, fh):
                raise SandboxError(f"Copying the repository into {WORKDIR} failed; see the engine log.")
        return sha, store_git_dir(repo)

    def _pack_base(self, sha: str) -> Path:
        """A host git directory holding the base commit alone: packed by the container's git
        before any agent command ran (the image is trusted as far as the tests it runs) and
        indexed, so hash-checked, by this host's git. Tried twice: the engine may drop an exec's
        output under load (see `_setup`)."""
        assert self._host is not None  # made before the container started
        git_dir = self._host / "git"
        pack = init_pack_repo(git_dir)
        script = (f"set -o pipefail; cd {WORKDIR} && {GIT} rev-list --objects --no-walk {sha} | "
                  f"{GIT} pack-objects -q --window=0 --stdout")
        for attempt in (1, 2):
            err = HeadTail(8192)
            try:
                with open(pack, "wb") as fh:
                    code = self._run(_setup_argv(script), SETUP_TIMEOUT_S, FileSink(fh), err)
                if code != 0:
                    raise SandboxError(f"Packing the base commit in {self.image} failed (exit "
                                       f"{code}): {err.text()[-1000:]}")
                index_pack(git_dir, pack, sha)
                return git_dir
            except SandboxError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _tree_bytes(self) -> int:
        """Bytes under /testbed now, before any agent command: the base of `diff()`'s cap."""
        return int(self._setup(f"du -sb {WORKDIR}").split()[0])

    # ------------------------------------------------------------------ running

    def _run(self, argv: list[str], limit: float, out: Sink, err: HeadTail) -> int | None:
        """Exit status of `argv` (its stdout into `out`: a `HeadTail` or a `FileSink`), or None
        after the sandbox killed the container under it (the host deadline, the disk watch).

        Raises SandboxError when the container is gone or dies under the command (closed from
        another thread, killed from outside, past its TTL).
        """
        import docker
        self._check_alive()
        try:
            job = Exec(self._client.api, self.container.id, argv, workdir=self._cwd,
                       environment=self._env, out=out, err=err)
        except docker.errors.APIError as exc:
            raise self._died(f"its container is gone ({exc.explanation or exc})") from exc
        with self._watch.command() if self._watch else contextlib.nullcontext():
            finished = job.wait(limit + HOST_GRACE_S)
        if not finished:
            self._dead = (f"a command outlived its {limit:g}s limit by {HOST_GRACE_S:g}s, so the "
                          f"container was killed")
            self._kill()
            job.wait(5.0)
            return None
        if self._disk_full:  # the disk watch killed the container under this command
            return None
        try:
            code = job.exit_code()
        except docker.errors.APIError:
            code = None
        if code in (None, 137) and not self._running():  # 137 alone may be the OOM killer's
            raise self._died("its container died during a command")
        if job.error is not None:  # the output was cut short: never pass it off as complete
            raise OutputLost(f"The output stream of a command in {self.image} broke "
                             f"({job.error!r}); its output is incomplete.")
        return code

    def _running(self) -> bool:
        import docker
        try:
            self.container.reload()
        except docker.errors.APIError:
            return False
        return self.container.status == "running"

    def _kill(self) -> None:
        import docker
        try:
            self.container.kill()
        except docker.errors.APIError:  # already gone; the sandbox is dead either way
            pass

    def _on_disk_full(self, grown: int) -> None:
        """The disk watch's breach (from its thread): the container dies, whoever was writing."""
        self._disk_full = (f"files grew by {grown // MIB} MiB, past sandbox.disk_mb="
                           f"{self.cfg.disk_mb}, so the container was killed")
        self._dead = self._dead or self._disk_full
        self._kill()

    def _died(self, why: str) -> SandboxError:
        self._dead = self._dead or why
        return SandboxError(f"This docker sandbox is dead: {self._dead}; open a new sandbox.")

    def _setup(self, script: str, keep: int = 1 << 20) -> str:
        """stdout of one of the sandbox's own (idempotent) shell commands; raises SandboxError if
        it fails. The script's stdout starts and ends with a marker line, so output the engine
        lost on the way (its start or all of it, with an exit status of 0) is noticed, and the
        script runs once more, instead of passing off a truncated probe as complete."""
        tag = uuid.uuid4().hex
        begin, end = f"swe-rlvr-begin-{tag}\n", f"swe-rlvr-end-{tag}\n"
        wrapped_script = (f"printf '%s' {shlex.quote(begin)}\n{script}\nstatus=$?; "
                          f"printf '%s' {shlex.quote(end)}; exit $status")
        argv = _setup_argv(wrapped_script)

        def whole(out: HeadTail) -> bool:  # both markers, nothing dropped in between
            text = out.text()
            return not out.dropped and text.startswith(begin) and text.endswith(end)

        for attempt in range(2):
            out, err = HeadTail(keep), HeadTail(8192)
            try:
                code = self._run(argv, SETUP_TIMEOUT_S, out, err)
            except OutputLost:
                if attempt:
                    raise
                continue
            if code != 0 or whole(out):
                break
        if code != 0:
            raise SandboxError(f"Sandbox command failed in {self.image} (exit {code}): {script[:200]}"
                               f"\n{err.text()[-2000:]}")
        if not whole(out):
            raise OutputLost(f"The output of a setup command in {self.image} was lost twice "
                             f"(the engine is overloaded?) or passed {keep} bytes: {script[:200]}")
        return out.text()[len(begin):-len(end)]

    def _check_alive(self) -> None:
        if self._dead:
            raise SandboxError(f"This docker sandbox is dead: {self._dead}; open a new sandbox.")

    def _path(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(WORKDIR, path))


def _setup_argv(script: str) -> list[str]:
    """argv of one of the sandbox's own commands: bash, killed at SETUP_TIMEOUT_S."""
    return ["timeout", "-s", "KILL", f"{SETUP_TIMEOUT_S:g}", "bash", "-c", script]


def host_dir(cfg: SandboxConfig) -> Path:
    """The sandbox's own host directory (trusted git directory, diff trees): a working copy with
    a marker, so `workspace.sweep` removes it once its owner dies or its TTL passes."""
    root = workspace.sandbox_root(cfg.workdir) / "copies"
    path = Path(tempfile.mkdtemp(dir=root, prefix="wc-docker-"))
    workspace.write_marker(path, int(cfg.ttl_s))
    return path


class OutputLost(SandboxError):
    """A command's output stream broke before its end (the engine dropped the connection)."""
