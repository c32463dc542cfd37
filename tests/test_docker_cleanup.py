"""No docker container outlives its sandbox: the host deadline, killed and closed sandboxes, the
sweeper for dead owners, and the TTL that ends a forgotten container by itself.

Every test here needs an engine (`infra/docker/engine.sh`) and the base image
(`infra/docker/base-image.sh`); without them they skip and say so. Containers are found by the
label each sandbox puts on its own (`docker_engine.labelled`).
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from docker_engine import calc_instance, calc_store, docker_cfg, docker_client, labelled  # noqa: F401
from sandbox.base import SandboxError
from sandbox.docker import DockerSandbox
from sandbox.docker_exec import HOST_GRACE_S
from sandbox.docker_sweep import sweep_containers

pytestmark = pytest.mark.docker


# --------------------------------------------------------------------------- the host deadline


def test_host_deadline_kills_the_container_and_the_sandbox_stays_dead(docker_client, calc_store):
    """A command that stops the in-container wrapper defeats layers 1 and 2 of the timeout; the
    host deadline then kills the container, and every later call says the sandbox is dead."""
    store, base = calc_store
    inst = calc_instance(base)
    sb = DockerSandbox(inst, docker_cfg(), store)
    try:
        res = sb.execute("kill -STOP $(awk '{print $4}' /proc/$PPID/stat); sleep 600", timeout=1)
        assert res.timed_out and res.duration_s < 1 + HOST_GRACE_S + 5
        with pytest.raises(SandboxError, match="dead"):
            sb.execute("echo hi")
    finally:
        sb.close()
    assert wait_until(lambda: not labelled(docker_client, inst.instance_id))


# --------------------------------------------------------------------------- leaks


def wait_until(predicate, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def test_thirty_sandboxes_killed_mid_command_leave_no_container(docker_client, calc_store):
    """30 sandboxes each run a long command; a random third have their container killed from
    outside, the rest are closed while the command still runs. Nothing labelled remains."""
    _kill_many(docker_client, calc_store, 30)


@pytest.mark.slow
def test_two_hundred_sandboxes_killed_mid_command_leave_no_container(docker_client, calc_store):
    """The same at the sandbox issue's scale: 200 containers, none may remain."""
    _kill_many(docker_client, calc_store, 200)


def _kill_many(docker_client, calc_store, count: int) -> None:
    store, base = calc_store
    inst = calc_instance(base)
    rng = random.Random(7)
    with ThreadPoolExecutor(6) as pool:
        sandboxes = list(pool.map(lambda _: DockerSandbox(inst, docker_cfg(), store), range(count)))
    results: list[object] = []
    threads = [threading.Thread(target=_run_capturing, args=(sb, results)) for sb in sandboxes]
    for t in threads:
        t.start()
    time.sleep(1.0)
    for sb in sandboxes:
        if rng.random() < 1 / 3:
            docker_client.containers.get(sb._container.id).kill()
    with ThreadPoolExecutor(8) as pool:  # closing 200 one by one outlasts the commands' own limit
        list(pool.map(lambda sb: sb.close(), sandboxes))
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "an execute() hung after its sandbox died"
    assert len(results) == count
    # Each command died with its container: an error, or (racing the engine's status) a SIGKILL.
    odd = [r for r in results if not (isinstance(r, SandboxError) or r.exit_code == 137)]
    assert not odd, odd
    assert wait_until(lambda: not labelled(docker_client, inst.instance_id))


def _run_capturing(sb, results: list) -> None:
    try:
        results.append(sb.execute("sleep 900", timeout=600))  # only a kill or close() ends it
    except SandboxError as exc:
        results.append(exc)


OWNER_SCRIPT = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[4])
    from docker_engine import calc_instance, docker_cfg
    from sandbox.docker import DockerSandbox
    sb = DockerSandbox(calc_instance(sys.argv[2], sys.argv[3]), docker_cfg(), Path(sys.argv[1]))
    print(sb._container.id, sb._host, flush=True)
    os._exit(0)  # dies without close(): the container and the host directory leak
""")


def test_sweeper_removes_containers_of_dead_owners_only(docker_client, calc_store):
    """An owner dies without close(): the container sweeper removes its container (sparing a
    live owner's), and the working-copy sweeper its host directory (trusted git dir, trees)."""
    from sandbox import workspace
    store, base = calc_store
    tag = f"sweep-{random.randrange(1 << 30)}"
    tests_dir = str(Path(__file__).parent)
    proc = subprocess.run([sys.executable, "-c", OWNER_SCRIPT, str(store), base, tag, tests_dir],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    leaked = labelled(docker_client, calc_instance(base, tag).instance_id)
    assert len(leaked) == 1
    with DockerSandbox(calc_instance(base), docker_cfg(), store) as alive:
        assert sweep_containers(docker_client) >= 1
        assert not labelled(docker_client, calc_instance(base, tag).instance_id)
        assert alive.execute("echo spared").output == "spared\n"
        host = Path(proc.stdout.split()[1])
        assert host.is_dir() and alive._host.is_dir()
        assert host.name in workspace.sweep(workspace.sandbox_root(docker_cfg().workdir))
        assert not host.exists() and alive._host.is_dir()


def test_ttl_expiry_removes_the_container_by_itself(docker_client, calc_store):
    """The dead-man switch: the container's main process ends at its TTL and the engine removes it."""
    store, base = calc_store
    inst = calc_instance(base)
    sb = DockerSandbox(inst, docker_cfg(ttl_s=3), store)
    try:
        assert wait_until(lambda: not labelled(docker_client, inst.instance_id), timeout_s=30)
        with pytest.raises(SandboxError, match="dead"):
            sb.execute("echo hi")
    finally:
        sb.close()
