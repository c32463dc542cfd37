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

import os
import posixpath
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Self

from sandbox import cgroups, environments, isolation, view, workspace
from sandbox.base import ExecResult, SandboxError
from sandbox.executor import Executor
from sandbox.repos import ensure_repo

if TYPE_CHECKING:
    from swe_rlvr.config import SandboxConfig
    from swe_rlvr.instances import Instance


class LocalSandbox:
    """A sandbox on this machine; see the module docstrings of `isolation` and `workspace`."""

    def __init__(self, instance: Instance, cfg: SandboxConfig, repo_store: str | Path) -> None:
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
        uid = isolation.JAIL_UID if os.geteuid() == 0 else None
        self.copy = workspace.create_working_copy(base, sha, self.root, cfg.ttl_s, cfg.working_copy,
                                                  layer=pyenv.layer, owner=uid, disk_mb=cfg.disk_mb)
        self.workdir = isolation.command_dir(level, self.copy.repo)  # what the prompt names
        self.jail = self._jail(cfg, level, pyenv, uid)
        self.executor = Executor(self.jail)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._active = 0
        self._closed = False
        self._released = threading.Event()  # set once close() has removed everything

    def _jail(self, cfg: SandboxConfig, level: str, pyenv: environments.PythonEnv,
              uid: int | None) -> isolation.Jail:
        return isolation.Jail(
            level=level, workdir=self.copy.repo, tmpdir=self.copy.tmp, tag=self.copy.tag,
            binds=view.environment_binds(pyenv.bin_dir, sys.executable), uid=uid,
            env_bin=pyenv.bin_dir,
            extra_env=pyenv.env_vars(self.workdir), network=cfg.network,
            cgroup=cgroups.create(self.copy.tag, cfg.max_procs),
            memory_cgroup=cgroups.create_memory(self.copy.tag, cfg.memory_mb),
            memory_mb=cfg.memory_mb, max_procs=cfg.max_procs, file_size_mb=cfg.file_size_mb,
            cpu_time_s=cfg.cpu_time_s, output_limit_bytes=cfg.output_limit_bytes,
            shm_mb=max(1, min(cfg.disk_mb, cfg.memory_mb)))

    # ------------------------------------------------------------------ commands

    def execute(self, cmd: str, timeout: float | None = None) -> ExecResult:
        """Run `cmd` with bash in the repo root; the whole tree dies at the timeout."""
        return self.execute_reporting(cmd, timeout, report=False)

    def execute_reporting(self, cmd: str, timeout: float | None = None, report: bool = True) -> ExecResult:
        """`execute`, and (with `report`) what the command wrote to its fd 4: a pipe that only the
        runner outside the command holds the other end of (`executor_wire.REPORT_FD`)."""
        limit = self.cfg.command_timeout_s if timeout is None else timeout
        with self._lock:
            if self._closed:
                raise SandboxError("This sandbox is closed; open a new one with open_sandbox().")
            self._active += 1
        try:
            return self.executor.run(cmd, limit, report)
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
        """Create or replace `path`, owned (with the directories made for it) by the commands'
        uid, so they can go on changing it."""
        full = self._host_path(path)
        made = [p for p in reversed(full.parents) if not p.exists()]
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(content)
        if self.jail.uid is not None:
            for p in (*made, full):
                os.chown(p, self.jail.uid, self.jail.uid)

    def diff(self) -> str:
        """The patch from the base commit to the working tree, new files included (at most
        `sandbox.max_patch_kb`; `PatchTooLarge` beyond)."""
        return workspace.tree_diff(self.copy.base / ".git", self.copy.repo, self.copy.sha,
                                   self.cfg.max_patch_kb * 1024)

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
            cgroups.remove(self.jail.memory_cgroup)  # after its tmpfs pages are gone
        finally:
            self._released.set()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
