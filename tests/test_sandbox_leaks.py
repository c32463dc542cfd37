"""Many sandboxes, some killed mid-command, leave no processes, mounts or working copies behind.

Two ways to die are exercised: `close()` from another thread while a command runs (the agent loop's
wall-clock limit), and SIGKILL of the whole Python process that drives a sandbox (an OOM-killed
worker), after which `sandbox sweep` must clean up what the dead owner left.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox import SandboxError, isolation, open_sandbox, workspace
from test_sandbox_support import live_copies, make_instance, overlay_mounts, sandbox_config, store  # noqa: F401


def run_many(inst, cfg, store, count: int, seed: int = 0) -> set[str]:
    """Open `count` sandboxes, 4 at a time; returns their tags."""
    rng = random.Random(seed)
    plans = [rng.random() < 0.4 for _ in range(count)]  # True: closed mid-command
    tags = set()

    def one(killed: bool) -> None:
        sb = open_sandbox(inst, cfg, store)
        tags.add(sb.copy.tag)
        try:
            if killed:
                threading.Timer(rng.uniform(0.05, 0.3), sb.close).start()
                try:
                    result = sb.execute("sleep 30 & (setsid sleep 30 &); sleep 30", timeout=20)
                    assert result.duration_s < 15  # killed by close(), not by the 20 s timeout
                except SandboxError:
                    pass  # close() won the race: the sandbox refuses new commands
            else:
                assert sb.execute("echo ok; (setsid sleep 30 &)").output.startswith("ok")
        finally:
            sb.close()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, plans))
    return tags


def test_twenty_sandboxes_some_closed_mid_command(store, tmp_path):
    cfg = sandbox_config(tmp_path)
    tags = run_many(make_instance(store), cfg, store, 20)
    assert len(tags) == 20
    assert live_copies(cfg) == [] and overlay_mounts(cfg) == [] and no_processes(tags)


@pytest.mark.slow
def test_two_hundred_sandboxes_some_closed_mid_command(store, tmp_path):
    cfg = sandbox_config(tmp_path)
    tags = run_many(make_instance(store), cfg, store, 200, seed=1)
    assert live_copies(cfg) == [] and overlay_mounts(cfg) == [] and no_processes(tags)


def no_processes(tags: set[str]) -> bool:
    """No process carries the tag of one of `tags` (this test's sandboxes; other tests' sandboxes
    may run beside it). Tags, not working directories: commands run in /testbed, whatever host
    directory holds their copy."""
    return not [p for p in isolation.tagged_pids("wc-") if _tag(p) in tags]


def _tag(pid: int) -> str:
    """The sandbox tag in a process's environment ("" if it is gone)."""
    prefix = f"{isolation.TAG_VAR}=".encode()
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return ""
    return next((item[len(prefix):].decode() for item in environ if item.startswith(prefix)), "")


DRIVER = """
import sys
sys.path[:0] = {paths!r}
from test_sandbox_support import make_instance, sandbox_config
from pathlib import Path
from sandbox import open_sandbox
store, tmp = Path({store!r}), Path({tmp!r})
sb = open_sandbox(make_instance(store), sandbox_config(tmp), store)
print(sb.copy.tag, flush=True)
sb.execute("(setsid sleep 300 &); sleep 300", timeout=600)
"""


def test_killed_owner_is_swept(store, tmp_path):
    """SIGKILL the process driving a sandbox mid-command: its command dies with it (die-with-parent
    / pdeathsig), and the sweeper removes the copy, the overlay mount and the cgroup it left."""
    cfg = sandbox_config(tmp_path)
    make_instance(store)
    code = DRIVER.format(paths=[str(Path(__file__).parent), str(Path(__file__).parents[1])],
                         store=str(store), tmp=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    tag = proc.stdout.readline().strip()
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert live_copies(cfg) == [tag]
    deadline = time.monotonic() + 5
    while isolation.tagged_pids(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert workspace.sweep(workspace.sandbox_root(cfg.workdir)) == [tag]
    assert live_copies(cfg) == [] and overlay_mounts(cfg) == []
    assert isolation.tagged_pids(tag) == []
