"""The docker backend: one fresh container per sandbox, driven through the docker SDK.

The image is `sandbox.docker_image` if set, else the instance's own (`swebench/sweb.eval.x86_64.
<id, "__" -> "_1776_">:latest` for SWE-bench), else, for the built-in suite, the base image that
`infra/docker/base-image.sh` builds. The repository sits at `/testbed` (SWE-bench's convention):
if the image already holds the base commit there (SWE-bench and SWE-smith images), that checkout
is used; otherwise a checkout holding only the base commit (no later history for the agent to
read) is copied in from the repo store, `.git` included, so `diff()` works against the base.

Isolation and limits: no network (`network_mode="none"`), memory (swap included where the engine
can limit it), pids, CPUs and file size limits, a few capabilities dropped, no-new-privileges,
and `init` as PID 1 to reap orphans. Timeouts work in three layers (see `sandbox.docker_exec`); a
command that outlives even the host deadline kills the container, and the sandbox is then dead:
every later call raises `SandboxError`. Leaks are handled by labels, a TTL and
`sandbox.docker_sweep.sweep_containers` (re-exported here).

Simplifications: the root filesystem stays writable (test suites write caches beside the code);
`cfg.memory_mb` is the container's memory limit rather than a per-command address-space limit;
`cfg.cpu_time_s` is not applied (the wall-clock timeout and the CPU quota bound a command).
"""

from __future__ import annotations

import io
import posixpath
import shlex
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

from sandbox.base import REPO_DIR, ExecResult, SandboxError
from sandbox.docker_exec import HOST_GRACE_S, Exec, HeadTail, wrapped
from sandbox.docker_repo import checkout_tar, resolve_commit
from sandbox.docker_sweep import remove_container, sandbox_labels, sweep_containers

__all__ = ["BASE_IMAGE", "DockerSandbox", "docker_client", "resolve_image", "sweep_containers"]

BASE_IMAGE = "swe-rlvr/sandbox-base:bookworm"
WORKDIR = REPO_DIR
DROPPED_CAPS = ["NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP", "SYS_CHROOT"]
CONDA_ENV_BIN = "/opt/miniconda3/envs/testbed/bin"  # SWE-bench images' environment
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENV = {"HOME": "/root", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
       "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PAGER": "cat",
       "GIT_PAGER": "cat", "TERM": "dumb"}
GIT = "git -c safe.directory=* -c core.quotepath=off -c core.hooksPath=/dev/null"
DIFF_ENV = ("GIT_INDEX_FILE=/var/tmp/swe-rlvr-diff.index GIT_CONFIG_NOSYSTEM=1 "
            "GIT_CONFIG_GLOBAL=/dev/null")
DIFF_CONFIG = ("-c core.fsmonitor=false -c diff.noprefix=false -c diff.mnemonicPrefix=false "
               "-c diff.relative=false -c core.autocrlf=false")
JUNK = (":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc",
        ":(exclude,glob)**/*.egg-info/**")  # as the local backend
SETUP_TIMEOUT_S = 600.0
"""Limit of the sandbox's own commands (placing the repo, git add, diff)."""


def docker_client():
    """A docker SDK client for the engine of $DOCKER_HOST or the default socket."""
    try:
        import docker
    except ModuleNotFoundError as exc:
        raise SandboxError("The docker backend needs the docker SDK; "
                           "pip install 'docker>=7.1'.") from exc
    try:
        return docker.from_env()
    except docker.errors.DockerException as exc:
        raise SandboxError(f"No Docker engine answers ({exc}); start one with infra/docker/engine.sh "
                           f"or choose sandbox.backend=local.") from exc


def resolve_image(instance, cfg) -> str:
    """The image to run `instance` in (see the module docstring)."""
    if cfg.docker_image:
        return cfg.docker_image
    if instance.image:
        return instance.image
    if instance.source == "swe-bench":
        key = instance.instance_id.replace("__", "_1776_").lower()
        return f"swebench/sweb.eval.x86_64.{key}:latest"
    if instance.source == "builtin":
        return BASE_IMAGE
    raise SandboxError(f"Instance {instance.instance_id!r} names no Docker image; set "
                       f"sandbox.docker_image=<image> or choose sandbox.backend=local.")


class DockerSandbox:
    """A sandbox in a fresh container; satisfies `sandbox.base.Sandbox`."""

    workdir = WORKDIR

    def __init__(self, instance, cfg, repo_store: str | Path):
        self.instance, self.cfg = instance, cfg
        self.image = resolve_image(instance, cfg)
        self._dead, self._container, self._removed = "", None, False
        self._cwd, self._env = "/", dict(ENV)
        self._client = docker_client()
        try:
            self._ensure_image()
            self._container = self._start_container()
            self._env, found = self._probe()
            self.base = self._place_repo(found, repo_store)
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
        if code is None:
            out.add(f"\n[sandbox killed: the command outlived its {limit:g}s limit]\n".encode())
            return ExecResult(124, out.text(), out.dropped > 0, True, duration)
        timed_out = code == 137 and duration >= limit
        return ExecResult(124 if timed_out else code, out.text(), out.dropped > 0, timed_out, duration)

    def read_file(self, path: str) -> str:
        """The text of `path` (relative to /testbed or absolute), invalid UTF-8 replaced."""
        import docker
        full = self._path(path)
        self._check_alive()
        try:
            stream, _stat = self._container.get_archive(full)
        except docker.errors.NotFound as exc:
            raise FileNotFoundError(f"No such file in the sandbox: {full}") from exc
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise IsADirectoryError(f"Not a regular file in the sandbox: {full}")
            return tar.extractfile(member).read().decode("utf-8", errors="replace")

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
                self._container.put_archive(parent, buf.getvalue())
                return
            except docker.errors.NotFound:  # the parent is missing: make it, then try once more
                if attempt == 1:
                    self._setup(f"mkdir -p {shlex.quote(parent)}")
                    continue
                raise SandboxError(f"Writing {full} in the sandbox failed: {parent} is missing.")
            except docker.errors.APIError as exc:
                raise SandboxError(f"Writing {full} in the sandbox failed ({exc.explanation}); "
                                   f"is {parent} a directory?") from exc

    def diff(self) -> str:
        """The patch from the base commit to the files on disk, new files included.

        As in the local backend, the agent's index, hooks, fsmonitor, external diff drivers and
        global config play no part (a private index is rebuilt from the base commit), and binary
        files and byte-code caches are left out: they cannot travel in a text patch.
        """
        git = f"{DIFF_ENV} {GIT} {DIFF_CONFIG}"
        junk = " ".join(shlex.quote(p) for p in JUNK)
        numstat = self._setup(f"{git} read-tree {self.base} && {git} add -A -- . {junk} && "
                              f"{git} diff --cached --numstat -z {self.base}", keep=1 << 30)
        binaries = [item[4:] for item in numstat.split("\0") if item.startswith("-\t-\t")]
        excludes = " ".join(shlex.quote(f":(exclude,literal){p}") for p in binaries)
        return self._setup(f"{git} diff --cached --no-color --no-ext-diff --no-textconv "
                           f"{self.base} -- . {excludes}", keep=1 << 30)

    def close(self) -> None:
        """Remove the container (idempotent); the sandbox is dead afterwards."""
        self._dead = self._dead or "the sandbox was closed"
        if self._container is not None and not self._removed:
            self._removed = True
            remove_container(self._container)
        self._client.close()

    def __enter__(self) -> "DockerSandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ container life

    def _ensure_image(self) -> None:
        import docker
        try:
            self._client.images.get(self.image)
            return
        except docker.errors.ImageNotFound:
            pass
        if self.image == BASE_IMAGE:
            raise SandboxError(f"The base image {BASE_IMAGE} is missing; build it with "
                               f"infra/docker/base-image.sh.")
        try:
            self._client.images.pull(self.image)
        except docker.errors.APIError as exc:
            raise SandboxError(f"Docker image {self.image!r} is not in the engine and pulling it "
                               f"failed ({exc.explanation or exc}); `docker pull` or `docker load` "
                               f"it, or set sandbox.docker_image.") from exc

    def _start_container(self):
        cfg = self.cfg
        limits = {"mem_limit": f"{cfg.memory_mb}m", "pids_limit": cfg.max_procs,
                  "nano_cpus": int(cfg.docker_cpus * 1e9)}
        if _swap_limit(self._client):
            limits["memswap_limit"] = f"{cfg.memory_mb}m"
        fsize = cfg.file_size_mb * 1024 * 1024
        from docker.types import Ulimit
        return self._client.containers.run(
            self.image, ["sleep", str(int(cfg.ttl_s))], detach=True, auto_remove=True, init=True,
            labels=sandbox_labels(self.instance.instance_id, cfg.ttl_s), hostname="sandbox",
            environment=ENV, working_dir="/", cap_drop=DROPPED_CAPS,
            security_opt=["no-new-privileges"], ulimits=[Ulimit(name="fsize", soft=fsize, hard=fsize)],
            **({} if cfg.network else {"network_mode": "none"}), **limits)

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

    def _place_repo(self, found: list[str], repo_store: str | Path) -> str:
        """Make /testbed a checkout of the base commit; returns the commit's sha."""
        if len(found) == 2:  # the image holds the repo and the commit (SWE-bench, SWE-smith)
            head, sha = found
            if head != sha:
                self._setup(f"cd {WORKDIR} && {GIT} -c advice.detachedHead=false checkout -q -f {sha}")
            return sha
        from sandbox.repos import ensure_repo
        repo = Path(ensure_repo(self.instance, repo_store))
        sha = resolve_commit(repo, self.instance.base_commit)
        tar = checkout_tar(repo, sha, Path(self.cfg.workdir or tempfile.gettempdir()))
        with open(tar, "rb") as fh:
            if not self._container.put_archive(WORKDIR, fh):
                raise SandboxError(f"Copying the repository into {WORKDIR} failed; see the engine log.")
        return sha

    # ------------------------------------------------------------------ running

    def _run(self, argv: list[str], limit: float, out: HeadTail, err: HeadTail) -> int | None:
        """Exit status of `argv`, or None after the host deadline killed the container.

        Raises SandboxError when the container is gone or dies under the command (closed from
        another thread, killed from outside, past its TTL).
        """
        import docker
        self._check_alive()
        try:
            job = Exec(self._client.api, self._container.id, argv, workdir=self._cwd,
                       environment=self._env, out=out, err=err)
        except docker.errors.APIError as exc:
            raise self._died(f"its container is gone ({exc.explanation or exc})") from exc
        if not job.wait(limit + HOST_GRACE_S):
            self._dead = (f"a command outlived its {limit:g}s limit by {HOST_GRACE_S:g}s, so the "
                          f"container was killed")
            self._kill()
            job.wait(5.0)
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
            self._container.reload()
        except docker.errors.APIError:
            return False
        return self._container.status == "running"

    def _kill(self) -> None:
        import docker
        try:
            self._container.kill()
        except docker.errors.APIError:  # already gone; the sandbox is dead either way
            pass

    def _died(self, why: str) -> SandboxError:
        self._dead = self._dead or why
        return SandboxError(f"This docker sandbox is dead: {self._dead}; open a new sandbox.")

    def _setup(self, script: str, keep: int = 1 << 20) -> str:
        """stdout of one of the sandbox's own (idempotent) shell commands; raises SandboxError if
        it fails. The script's stdout starts and ends with a marker line, so output the engine
        lost on the way (its start or all of it, with an exit status of 0) is noticed, and the
        script runs once more, instead of passing off a truncated diff or probe as complete."""
        tag = uuid.uuid4().hex
        begin, end = f"swe-rlvr-begin-{tag}\n", f"swe-rlvr-end-{tag}\n"
        wrapped_script = (f"printf '%s' {shlex.quote(begin)}\n{script}\nstatus=$?; "
                          f"printf '%s' {shlex.quote(end)}; exit $status")
        argv = ["timeout", "-s", "KILL", f"{SETUP_TIMEOUT_S:g}", "bash", "-c", wrapped_script]

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


class OutputLost(SandboxError):
    """A command's output stream broke before its end (the engine dropped the connection)."""


_SWAP_LIMIT: dict[str, bool] = {}


def _swap_limit(client) -> bool:
    """Whether the engine can limit swap (asked once per engine)."""
    url = client.api.base_url
    if url not in _SWAP_LIMIT:
        _SWAP_LIMIT[url] = bool(client.info().get("SwapLimit"))
    return _SWAP_LIMIT[url]
