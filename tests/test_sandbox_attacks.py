"""Hostile commands, each contained: the host and other sandboxes stay unaffected, with a reason.

Runs on the best isolation level this machine has (bwrap here); checks that only hold with
namespaces skip on the pgroup level and say so. A second sandbox stays open beside the attacked
one throughout and must still work afterwards.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandbox import isolation, open_sandbox
from test_sandbox_support import make_instance, sandbox_config, store  # noqa: F401 - fixture


@pytest.fixture
def pair(store, tmp_path):
    """Two live sandboxes of the same instance: the attacked one and a bystander."""
    inst = make_instance(store)
    cfg = sandbox_config(tmp_path, memory_mb=1024, max_procs=64, file_size_mb=1)
    with open_sandbox(inst, cfg, store) as attacked, open_sandbox(inst, cfg, store) as bystander:
        yield attacked, bystander


def isolated(sb) -> None:
    if sb.jail.level == "pgroup":
        pytest.skip("isolation level is pgroup here (install bubblewrap, or run as root for unshare)")


def assert_unaffected(attacked, bystander) -> None:
    """No process of the attacked sandbox is left; the bystander and the host still work."""
    left = isolation.tagged_pids(attacked.jail.tag)
    assert left == [], [open(f"/proc/{p}/cmdline").read() for p in left]
    assert bystander.execute("echo alive").output.strip() == "alive"
    assert subprocess.run(["true"]).returncode == 0


def test_fork_bomb_is_contained(pair):
    """While a fork bomb runs, the bystander sandbox and the host still fork; afterwards no
    process of the bomb survives."""
    attacked, bystander = pair
    if attacked.jail.cgroup is None and os.geteuid() == 0:
        pytest.skip("running as root without a writable pids cgroup: RLIMIT_NPROC is not enforced")
    with ThreadPoolExecutor(1) as pool:
        bomb = pool.submit(attacked.execute, ":(){ :|:& };:; sleep 4", 6)
        time.sleep(1.5)
        assert bystander.execute("echo alive", timeout=10).output.strip() == "alive"
        assert subprocess.run(["true"]).returncode == 0
        if attacked.jail.cgroup is not None:
            assert int((attacked.jail.cgroup / "pids.current").read_text()) <= 64
        bomb.result()
    assert_unaffected(attacked, bystander)


def test_memory_hog_hits_the_address_space_limit(pair):
    attacked, bystander = pair
    result = attacked.execute("python -c 'x = bytearray(4 << 30)'", timeout=30)
    assert result.exit_code != 0 and "MemoryError" in result.output
    assert_unaffected(attacked, bystander)


def test_infinite_loop_is_killed_at_the_timeout(pair):
    attacked, bystander = pair
    result = attacked.execute("while true; do :; done", timeout=1)
    assert result.timed_out and result.exit_code == isolation.TIMEOUT_EXIT
    assert result.duration_s < 10
    assert_unaffected(attacked, bystander)


def test_detached_child_dies_with_its_command(pair):
    """A `setsid` grandchild that ignores SIGHUP must not outlive the command's timeout."""
    attacked, bystander = pair
    result = attacked.execute("setsid nohup sleep 300 >/dev/null 2>&1 & sleep 100", timeout=1)
    assert result.timed_out
    assert_unaffected(attacked, bystander)


def test_detached_child_dies_even_when_the_command_succeeds(pair):
    attacked, bystander = pair
    result = attacked.execute("(setsid sleep 300 >/dev/null 2>&1 &); echo done", timeout=10)
    assert result.exit_code == 0 and result.output.strip() == "done" and not result.timed_out
    assert_unaffected(attacked, bystander)


def test_write_outside_the_working_copy_fails(pair):
    """The host is read-only or not shown at all (/tmp is the sandbox's own), and other sandboxes
    are invisible."""
    attacked, bystander = pair
    isolated(attacked)
    target = f"/var/tmp/swe-rlvr-canary-{os.getpid()}"
    try:
        result = attacked.execute(f"echo pwned > {target}; echo pwned > /usr/pwned-{os.getpid()}")
        assert result.exit_code != 0 and "No such file or directory" in result.output
        assert "Read-only file system" in result.output
        assert not os.path.exists(target)
    finally:
        if os.path.exists(target):
            os.remove(target)
    bystander_file = os.path.join(bystander.copy.repo, "README.md")  # its host path
    attacked.execute(f"echo pwned > {bystander_file}")
    assert open(bystander_file).read() == "calc\n"
    assert_unaffected(attacked, bystander)


def test_network_is_off(pair):
    attacked, bystander = pair
    isolated(attacked)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
        result = attacked.execute(f"python -c \"{code}\"", timeout=20)
    assert result.exit_code != 0 and ("refused" in result.output or "unreachable" in result.output)
    assert_unaffected(attacked, bystander)


def test_a_gigabyte_of_output_is_truncated_not_buffered(pair):
    attacked, bystander = pair
    result = attacked.execute("yes 0123456789abcdef | head -c 1000000000; echo; echo THE-END", timeout=120)
    assert result.exit_code == 0 and result.truncated
    assert len(result.output) < attacked.cfg.output_limit_bytes + 200
    assert "output truncated" in result.output and result.output.rstrip().endswith("THE-END")
    assert_unaffected(attacked, bystander)


def test_file_size_limit(pair):
    attacked, bystander = pair
    result = attacked.execute("head -c 5000000 /dev/zero > big.bin", timeout=20)
    assert result.exit_code != 0
    assert os.path.getsize(os.path.join(attacked.copy.repo, "big.bin")) <= 1 << 20
    assert_unaffected(attacked, bystander)


def test_environment_is_scrubbed(pair, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2")
    attacked, _ = pair
    output = attacked.execute("env").output
    assert "hunter2" not in output and "AWS_SECRET" not in output
    assert "PYTHONDONTWRITEBYTECODE=1" in output


def test_pgroup_level_still_kills_detached_children(store, tmp_path):
    """The weakest level finds a detached grandchild by its cgroup or its environment tag."""
    if os.geteuid() == 0:
        pytest.skip("pgroup is refused as root (test_hostile_jail::test_pgroup_is_refused_as_root)")
    cfg = sandbox_config(tmp_path, isolation="pgroup")
    with open_sandbox(make_instance(store), cfg, store) as sb:
        result = sb.execute("setsid nohup sleep 300 >/dev/null 2>&1 & sleep 100", timeout=1)
        assert result.timed_out
        assert isolation.tagged_pids(sb.jail.tag) == []
