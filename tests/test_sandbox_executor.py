"""The persistent jail: one runner per sandbox serves every command, survives the thread that
started it, and is restarted when a command kills or stops it.

`kill -9 -1` is only ever sent where a pid namespace holds it: at the pgroup level it would kill
every process of the host's user.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from sandbox import SandboxError, executor, isolation, open_sandbox
from sandbox.base import REPO_DIR
from test_sandbox_support import make_instance, sandbox_config, store  # noqa: F401 - fixture

LEVELS = [level for level in isolation.LEVELS if isolation.available(level)]


@pytest.fixture(params=LEVELS)
def sb(request, store, tmp_path):
    cfg = sandbox_config(tmp_path, isolation=request.param)
    with open_sandbox(make_instance(store), cfg, store) as sandbox:
        yield sandbox


def runner_pid(sb) -> str:
    """The runner is every command's parent: the same pid and start time mean the same jail
    (a new namespace reuses the pid)."""
    return sb.execute("echo $PPID $(cut -d' ' -f22 /proc/$PPID/stat)").output.strip()


def test_one_runner_serves_every_command(sb):
    first = runner_pid(sb)
    assert [runner_pid(sb) for _ in range(3)] == [first] * 3


def test_the_runner_outlives_the_thread_that_started_it(sb):
    """bwrap's --die-with-parent and PR_SET_PDEATHSIG fire when the forking *thread* exits; the
    jail is spawned from a long-lived thread, so a short-lived caller thread does not kill it."""
    seen = []
    worker = threading.Thread(target=lambda: seen.append(runner_pid(sb)))
    worker.start()
    worker.join()
    time.sleep(0.2)
    assert runner_pid(sb) == seen[0]


def test_a_killed_runner_is_restarted_and_files_persist(sb):
    sb.execute("echo kept > note.txt")
    before = runner_pid(sb)
    result = sb.execute("kill -9 $PPID; sleep 2")
    if sb.jail.level == "unshare":  # the runner is the namespace's init: immune from inside
        assert result.exit_code == 0 and runner_pid(sb) == before
        return
    assert result.exit_code == 137 and "restarts" in result.output and result.duration_s < 1.5
    assert sb.execute("echo ok").output == "ok\n"
    assert runner_pid(sb) != before
    assert sb.execute("cat note.txt").output == "kept\n"
    assert isolation.tagged_pids(sb.jail.tag) == []


def test_kill_everything_inside_the_namespace(sb):
    """`kill -9 -1` reaches the runner (not the namespace's init); the next command still runs."""
    if sb.jail.level == "pgroup":
        pytest.skip("no pid namespace at the pgroup level: kill -1 would hit the host")
    sb.execute("kill -9 -1")
    assert sb.execute("echo ok").output == "ok\n"
    assert isolation.tagged_pids(sb.jail.tag) == []


def test_a_stopped_runner_is_replaced_after_the_grace(sb, monkeypatch):
    monkeypatch.setattr(executor, "HOST_GRACE_S", 1.0)
    result = sb.execute("kill -STOP $PPID; sleep 30", timeout=1)
    assert result.timed_out and result.exit_code == isolation.TIMEOUT_EXIT
    assert result.duration_s < 5
    assert sb.execute("echo ok").output == "ok\n"
    assert isolation.tagged_pids(sb.jail.tag) == []


def test_a_background_job_does_not_hold_the_reply(sb):
    """The reply comes shortly after the shell exits, not when the pipe closes; the job dies."""
    result = sb.execute("sleep 30 & echo started", timeout=20)
    assert result.output == "started\n" and result.exit_code == 0 and result.duration_s < 5
    assert isolation.tagged_pids(sb.jail.tag) == []


def test_commands_start_where_the_prompt_says(sb):
    """`workdir` (which the agent's prompt names) is where commands really run: /testbed where the
    jail has a mount namespace, the copy's host directory at pgroup (no mounts there)."""
    expected = str(sb.copy.repo) if sb.jail.level == "pgroup" else REPO_DIR
    assert sb.workdir == sb.jail.cwd == expected
    assert sb.execute("pwd && cat README.md").output == f"{expected}\ncalc\n"


def test_exit_codes_signals_and_undecodable_output(sb):
    assert sb.execute("exit 3").exit_code == 3
    assert sb.execute("kill -TERM $$").exit_code == 128 + 15
    result = sb.execute(r"printf 'a\377b'")
    assert result.output == "a\ufffdb" and not result.truncated


def test_commands_run_one_at_a_time_from_many_threads(sb):
    outputs = []
    threads = [threading.Thread(target=lambda i=i: outputs.append(sb.execute(f"echo {i}").output))
               for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outputs) == [f"{i}\n" for i in range(6)]


def test_a_jail_that_cannot_start_says_why(sb):
    """The error carries the jail's own complaint and names the fix."""
    broken = executor.Executor(replace(sb.jail, workdir=sb.jail.workdir / "missing"))
    if sb.jail.level == "pgroup":  # no bind mounts: the shell's `cd` fails instead
        assert broken.run("true", 10).exit_code == 125
    else:
        with pytest.raises(SandboxError, match="(?s)did not start .*sandbox.isolation"):
            broken.run("true", 10)
    broken.stop()


def test_commands_cannot_write_to_the_runners_pipes(sb):
    """A command that wrote a forged reply frame into the runner's reply pipe could answer for
    later commands (a grading run, say); the runner is not dumpable, so /proc/<runner>/fd is
    closed to the commands' uid (pgroup has no pid namespace, and its runner is the caller)."""
    if sb.jail.level not in isolation.MOUNT_LEVELS:
        pytest.skip("commands run as the caller at this level")
    result = sb.execute("for f in /proc/$PPID/fd/*; do echo forged > $f && echo WROTE; done")
    assert "WROTE" not in result.output and "Permission denied" in result.output
    assert sb.execute("echo ok").output == "ok\n"
