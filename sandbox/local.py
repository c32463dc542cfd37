"""The local backend: a working copy on this machine, commands run under `sandbox.isolation`.

Commands go to one persistent jail per sandbox (`sandbox.executor`), started on the first
`execute` and again, transparently, if a command kills it; one command runs at a time. They see
the working copy at `workdir`: `/testbed` wherever the jail has a mount namespace, while its host
directory (`copy.repo`) is random per sandbox (see `sandbox.isolation`). The file helpers take
paths relative to the repo root or absolute paths under `workdir`.

`diff()` never trusts the working copy's `.git`: the agent may commit, reset, rewrite history or
plant hooks and `core.fsmonitor` commands there. The patch is computed with the *base checkout's*
git directory (read-only, ours), a throw-away index and object directory, against the base sha,
so it holds exactly what differs on disk from the base commit, new files included. Binary files
and byte-code caches are left out (they cannot travel in a text patch).
"""

from __future__ import annotations

import posixpath
import tempfile
import threading
from pathlib import Path

from sandbox import cgroups, environments, isolation, workspace
from sandbox.executor import Executor
from sandbox.base import ExecResult, SandboxError
from sandbox.repos import ensure_repo

JUNK = (":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc", ":(exclude,glob)**/*.egg-info/**")


class LocalSandbox:
    """A sandbox on this machine; see the module docstrings of `isolation` and `workspace`."""

    def __init__(self, instance, cfg, repo_store):
        self.instance, self.cfg = instance, cfg
        environments.check_buildable(instance)  # first: a missing repo would hide the reason
        self.root = workspace.sandbox_root(cfg.workdir)
        level = isolation.choose_level(cfg.isolation)
        repo_dir = ensure_repo(instance, repo_store, clone=cfg.clone_missing)
        sha = workspace.resolve_commit(repo_dir, instance.base_commit)
        base = workspace.base_checkout(repo_dir, sha, self.root)
        pyenv = environments.ensure_env(instance, cfg, base)
        self.env_notes: tuple[str, ...] = pyenv.notes
        """Warnings about the environment that every report graded here carries (a stand-in
        Python under `sandbox.python_fallback`)."""
        self.copy = workspace.create_working_copy(base, sha, self.root, cfg.ttl_s, cfg.working_copy,
                                                  layer=pyenv.layer)
        self.workdir = isolation.command_dir(level, self.copy.repo)  # what the prompt names
        self.jail = self._jail(cfg, level, pyenv, Path(repo_store))
        self.executor = Executor(self.jail)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._active = 0
        self._closed = False
        self._released = threading.Event()  # set once close() has removed everything

    def _jail(self, cfg, level, pyenv, repo_store: Path) -> isolation.Jail:
        hidden = tuple(str(p) for p in (self.root / "copies", self.root / "bases",
                                        repo_store.resolve(), _home()) if p and p.is_dir())
        return isolation.Jail(
            level=level, workdir=self.copy.repo, tmpdir=self.copy.tmp, tag=self.copy.tag,
            hidden=hidden, rebind=isolation.needed_binds(hidden + ("/tmp",), pyenv.bin_dir),
            env_bin=pyenv.bin_dir,
            extra_env=pyenv.env_vars(self.workdir), network=cfg.network,
            cgroup=cgroups.create(self.copy.tag, cfg.max_procs),
            memory_mb=cfg.memory_mb, max_procs=cfg.max_procs, file_size_mb=cfg.file_size_mb,
            cpu_time_s=cfg.cpu_time_s, output_limit_bytes=cfg.output_limit_bytes)

    # ------------------------------------------------------------------ commands

    def execute(self, cmd: str, timeout: float | None = None) -> ExecResult:
        """Run `cmd` with bash in the repo root; the whole tree dies at the timeout."""
        limit = self.cfg.command_timeout_s if timeout is None else timeout
        with self._lock:
            if self._closed:
                raise SandboxError("This sandbox is closed; open a new one with open_sandbox().")
            self._active += 1
        try:
            return self.executor.run(cmd, limit)
        finally:
            with self._lock:
                self._active -= 1
                self._idle.notify_all()

    # ------------------------------------------------------------------ files

    def _host_path(self, path: str) -> Path:
        """The host file behind `path`, relative to the repo root or absolute as commands see it."""
        inside = posixpath.relpath(posixpath.join(self.workdir, path), self.workdir)
        full = (self.copy.repo / inside).resolve()
        if not full.is_relative_to(self.copy.repo.resolve()):
            raise SandboxError(f"Path {path!r} leaves the repository; give a path relative to its "
                               f"root ({self.workdir}).")
        return full

    def read_file(self, path: str) -> str:
        return self._host_path(path).read_text(errors="replace")

    def write_file(self, path: str, content: str) -> None:
        full = self._host_path(path)
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(content)

    def diff(self) -> str:
        """The patch from the base commit to the working tree, new files included."""
        with tempfile.TemporaryDirectory(prefix="swe-rlvr-diff-") as tmp:
            Path(tmp, "objects").mkdir()
            env = {"GIT_DIR": str(self.copy.base / ".git"), "GIT_WORK_TREE": str(self.copy.repo),
                   "GIT_INDEX_FILE": f"{tmp}/index", "GIT_OBJECT_DIRECTORY": f"{tmp}/objects",
                   "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(self.copy.base / ".git" / "objects")}
            workspace.git("read-tree", self.copy.sha, env=env)
            workspace.git("add", "-A", "--", ".", *JUNK, env=env)
            binaries = _binary_paths(workspace.git("diff", "--cached", "--numstat", "-z",
                                                   self.copy.sha, env=env).stdout)
            excludes = [f":(exclude,literal){p}" for p in binaries]
            return workspace.git("diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv",
                                 self.copy.sha, "--", ".", *excludes, env=env).stdout

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Kill the jail (a running command returns at once), wait for commands to return, then
        unmount and delete the working copy. Safe from any thread, and more than once: a second
        caller returns only when the first caller's clean-up is complete."""
        with self._lock:
            first = not self._closed
            self._closed = True
        if not first:
            self._released.wait(timeout=120)
            return
        try:
            self.executor.kill()
            with self._lock:
                self._idle.wait_for(lambda: self._active == 0, timeout=30)
            self.executor.stop()
            isolation.await_gone(self.jail)
            cgroups.remove(self.jail.cgroup)
            workspace.remove_working_copy(self.copy.path)
        finally:
            self._released.set()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _home() -> Path | None:
    """The caller's home (may hold credentials); hidden from commands unless it holds the root."""
    home = Path.home().resolve()
    return None if str(home) in ("/", "") else home


def _binary_paths(numstat_z: str) -> list[str]:
    """Paths that `git diff --numstat -z` reports as binary ("-\t-\t<path>")."""
    return [item[4:] for item in numstat_z.split("\0") if item.startswith("-\t-\t")]
