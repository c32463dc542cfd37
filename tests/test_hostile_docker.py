"""The docker backend against a hostile policy: each test is an attack and the rule that stops it.

The RL policy's commands run as root in the container and will try whatever earns reward or
reaches the host: forging the patch the grader sees, filling the host's disk or memory, reaching
the engine. Every test here needs an engine and the base image (see `docker_engine`), and each
docstring tells the attack's story.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import pytest

from docker_engine import BASE_IMAGE, CALC_V1, calc_instance, calc_store, docker_cfg, docker_client  # noqa: F401
from sandbox.base import PatchTooLarge, SandboxError
from sandbox.docker import DockerSandbox

pytestmark = pytest.mark.docker

FIX = "sed -i 's/a - b/a + b/' calc.py"
FORGED = ("diff --git a/test_calc.py b/test_calc.py\nnew file mode 100644\n--- /dev/null\n"
          "+++ b/test_calc.py\n@@ -0,0 +1 @@\n+assert True  # forged\n")
TESTBED_IMAGE = "swe-rlvr/test-hostile-testbed:latest"


@pytest.fixture(scope="module")
def testbed_image(docker_client):
    """An image that already holds the calc repository at /testbed, as SWE-bench images do;
    yields its base commit."""
    builder = docker_client.containers.run(BASE_IMAGE, ["sleep", "120"], detach=True,
                                           auto_remove=True)
    try:
        script = (f"git init -q /testbed && cd /testbed && printf %b {CALC_V1!r} > calc.py && "
                  "echo calc > README.md && git add -A && "
                  "git -c user.name=t -c user.email=t@t commit -qm base && git rev-parse HEAD")
        code, out = builder.exec_run(["bash", "-c", script])
        assert code == 0, out
        image = builder.commit(repository=TESTBED_IMAGE.split(":")[0], tag="latest")
    finally:
        builder.kill()
    yield out.decode().strip()
    docker_client.images.remove(image.id, force=True)


@pytest.fixture(params=["copied-in", "in-image"])
def open_sandbox(request, docker_client, calc_store, tmp_path):
    """Opens sandboxes of the calc repo either way /testbed gets its repository: copied in from
    the repo store, or already in the image (then the trusted base is packed at start)."""
    opened = []

    def make(**overrides) -> DockerSandbox:
        store, base = calc_store
        if request.param == "in-image":
            overrides.setdefault("docker_image", TESTBED_IMAGE)
            base, store = request.getfixturevalue("testbed_image"), tmp_path / "empty-store"
        sb = DockerSandbox(calc_instance(base), docker_cfg(**overrides), store)
        opened.append(sb)
        return sb

    yield make
    for sb in opened:
        sb.close()


@pytest.fixture
def sandbox(docker_client, calc_store):
    store, base = calc_store
    with DockerSandbox(calc_instance(base), docker_cfg(), store) as sb:
        yield sb


def wait_for_death(sb, timeout_s: float) -> str:
    """The SandboxError message once `sb` is dead ("" if it stays alive for `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            sb.execute("true", timeout=10)
        except SandboxError as exc:
            return str(exc)
        time.sleep(0.5)
    return ""


# --------------------------------------------------------------------------- the patch


ATTACKS = {
    "git-emptied": f"{FIX} && printf '#!/bin/sh\\nexit 0\\n' > \"$(command -v git)\"",
    "git-forged-first-on-path": (f"{FIX} && printf %b {FORGED!r} > \"$HOME/forged.patch\" && "
                                 "bin=\"${PATH%%:*}\" && mkdir -p \"$bin\" && "
                                 "printf '#!/bin/sh\\ncat %s\\n' \"$HOME/forged.patch\" > \"$bin/git\" && "
                                 "chmod +x \"$bin/git\""),
    "attributes-hide-all": f"{FIX} && echo '* binary' > .git/info/attributes",
    "history-replaced": (f"{FIX} && rm -rf .git && git init -q && git add -A && "
                         "git -c user.name=a -c user.email=a@b commit -qm 'base'"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_the_agent_cannot_empty_or_forge_the_patch(open_sandbox, attack):
    """The policy fixes calc.py, then attacks the diff. `diff()` used to run the container's own
    git with the container's .git: a `git` that exits 0 emptied the patch, a `git` first on PATH
    printed a forged one (here: a new test file the grader would run), `* binary` in
    .git/info/attributes hid every change, and a fresh history lost the base commit. The host
    now diffs the streamed files with its own git against a git directory the agent never
    touched, so each attack yields the true patch: the fix, and nothing else."""
    sb = open_sandbox()
    res = sb.execute(ATTACKS[attack])
    assert res.exit_code == 0, res.output
    patch = sb.diff()
    assert "diff --git a/calc.py b/calc.py" in patch and "+    return a + b" in patch, patch
    assert "forged" not in patch and "test_calc.py" not in patch and ".git/" not in patch


def test_a_giant_patch_is_refused_without_being_held(docker_client, calc_store):
    """The policy writes a 50 MB text file and submits. The old diff read the whole patch into
    the host process (up to 1 GiB per sandbox, times every sandbox at once). Now /testbed is
    streamed to disk chunk by chunk and the patch is read only up to sandbox.max_patch_kb:
    `PatchTooLarge`, with the host process never holding more than a few MiB of it."""
    store, base = calc_store
    with DockerSandbox(calc_instance(base), docker_cfg(max_patch_kb=256), store) as sb:
        res = sb.execute("head -c 38000000 /dev/urandom | base64 -w 100 > big.txt && "
                         "stat -c %s big.txt", timeout=120)
        assert res.exit_code == 0 and int(res.output) > 50_000_000, res.output
        tracemalloc.start()
        try:
            with pytest.raises(PatchTooLarge, match="max_patch_kb"):
                sb.diff()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 16 << 20, f"the host process held {peak >> 20} MiB of the patch"


# --------------------------------------------------------------------------- caps


def test_filling_the_disk_kills_the_container_and_says_why(docker_client, calc_store):
    """The policy writes file after file (each under the per-file limit) to fill the host's
    disk through the container's writable layer, which had no cap. The engine's own measure of
    the layer is now watched while the command runs: past sandbox.disk_mb the container is
    killed, the command's output says so, and the episode has no patch."""
    store, base = calc_store
    sb = DockerSandbox(calc_instance(base), docker_cfg(disk_mb=32), store)
    try:
        res = sb.execute("for i in $(seq 30); do head -c 32M /dev/zero > /testbed/fill$i; "
                         "sleep 0.2; done; echo finished", timeout=60)
        assert "finished" not in res.output and res.exit_code == 137 and not res.timed_out
        assert "sandbox.disk_mb=32" in res.output
        with pytest.raises(SandboxError, match="disk_mb"):
            sb.execute("echo hi")
        with pytest.raises(PatchTooLarge, match="disk_mb"):
            sb.diff()
    finally:
        sb.close()


def test_a_daemon_filling_the_disk_between_commands_is_caught(docker_client, calc_store):
    """The policy leaves a daemon behind (output redirected, so it outlives its command) that
    starts writing once the command has returned, when no command is being watched. The watch
    runs for the sandbox's whole life, so the container dies anyway."""
    store, base = calc_store
    sb = DockerSandbox(calc_instance(base), docker_cfg(disk_mb=32), store)
    try:
        res = sb.execute("nohup sh -c 'sleep 1; for i in $(seq 30); do "
                         "head -c 32M /dev/zero > /var/tmp/fill$i; sleep 0.3; done' "
                         ">/dev/null 2>&1 & "  # wait until the subshell has exec'd nohup
                         "while head -c4 /proc/$!/cmdline 2>/dev/null | grep -q bash; do :; done; "
                         "echo started")
        assert res.output == "started\n"
        assert "disk_mb" in wait_for_death(sb, timeout_s=30)
    finally:
        sb.close()


def test_tmp_and_dev_shm_are_capped(docker_client, calc_store):
    """/tmp was part of the uncapped writable layer. It is now a tmpfs of min(disk_mb,
    memory_mb) MiB, as is /dev/shm: writing more fails with ENOSPC and the sandbox lives on."""
    store, base = calc_store
    with DockerSandbox(calc_instance(base), docker_cfg(disk_mb=48, memory_mb=512), store) as sb:
        for path in ("/tmp/big", "/dev/shm/big"):
            res = sb.execute(f"head -c 200M /dev/zero > {path}; echo; stat -c %s {path}")
            assert "No space left on device" in res.output, res.output
            assert int(res.output.split()[-1]) <= 48 << 20
            sb.execute(f"rm -f {path}")
        assert sb.execute("echo ok").output == "ok\n"


def test_writing_to_pid_1_fills_no_log_on_the_host(docker_client, sandbox):
    """The policy writes to PID 1's stdout. The engine kept it in a json log file on the host,
    outside every cap. The log driver is now `none`: nothing lands on the host's disk."""
    res = sandbox.execute("head -c 20M /dev/zero > /proc/1/fd/1; head -c 20M /dev/zero > "
                          "/proc/1/fd/2; echo done", timeout=60)
    assert res.output.endswith("done\n")
    log = docker_client.api.inspect_container(sandbox._container.id)["LogPath"]
    assert not log or not os.path.exists(log) or os.path.getsize(log) < 1 << 20, log


CAP_BITS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6,
            "SETUID": 7}  # linux/capability.h


def test_commands_keep_only_the_capabilities_root_needs(sandbox):
    """Docker's default capabilities let root bind privileged ports (NET_BIND_SERVICE) and
    change capability sets (SETPCAP), among others. Every capability is now dropped and only
    those a root user needs to install packages and run test suites are added back, in the
    effective and the bounding set alike (no exec can regain one)."""
    want = sum(1 << bit for bit in CAP_BITS.values())  # 0b11111011 = 0xfb
    lines = sandbox.execute("grep -E '^Cap(Eff|Bnd|Prm)' /proc/self/status").output.split("\n")
    caps = {line.split(":")[0]: int(line.split()[1], 16) for line in lines if line}
    assert caps == {"CapPrm": want, "CapEff": want, "CapBnd": want}, {k: hex(v) for k, v in caps.items()}
    assert sandbox.execute("chown nobody calc.py && chown root calc.py && kill -0 1").exit_code == 0


def test_memory_is_one_budget_for_the_whole_sandbox(docker_client, calc_store):
    """Four processes of about 700 MB each under memory_mb=1024: a per-process limit would let
    all four live. The container's cgroup holds them to one budget, so they cannot all survive,
    and the sandbox does."""
    store, base = calc_store
    with DockerSandbox(calc_instance(base), docker_cfg(memory_mb=1024), store) as sb:
        hog = "python3 -c \"import time; b = b'x' * (700 << 20); time.sleep(3); print('alive')\""
        res = sb.execute(f"for i in 1 2 3 4; do {hog} & done; wait", timeout=120)
        assert res.output.splitlines().count("alive") < 4, res.output
        assert sb.execute("echo ok").output == "ok\n"


# --------------------------------------------------------------------------- the host's kernel and sockets


def test_proc_sys_and_sys_are_read_only(sandbox):
    """The policy tries to tune the host's kernel through /proc/sys (shared with the host: no
    namespace isolates most of it) and /sys, writing a value back unchanged, and to remount
    them writable. Every attempt fails."""
    res = sandbox.execute(
        "for f in /proc/sys/vm/swappiness /proc/sys/kernel/pid_max; do "
        "  v=$(cat $f); (echo $v > $f) 2>&1 && echo WROTE $f; done; "
        "mount -o remount,rw /proc/sys 2>&1 && echo REMOUNTED; "
        "mount -t proc proc /mnt 2>&1 && echo MOUNTED; "
        "(echo 1 > /sys/kernel/mm/ksm/run) 2>&1 && echo WROTE /sys; "
        "grep -E ' /proc/sys | /sys ' /proc/self/mounts")
    assert "WROTE" not in res.output and "MOUNTED" not in res.output, res.output
    assert "Read-only file system" in res.output
    mounts = [line for line in res.output.splitlines() if line.startswith(("proc ", "sysfs "))]
    assert len(mounts) == 2 and all(" ro," in line for line in mounts), mounts


def test_no_host_socket_is_reachable(sandbox):
    """The policy looks for a way out through a socket: the Docker engine's (root on the host),
    containerd's, or any abstract socket a host daemon listens on. No host socket is mounted and
    the container's own network namespace hides the host's abstract sockets."""
    res = sandbox.execute(r"find / \( -path /proc -o -path /sys \) -prune -o -type s -print; "
                          "ls -la /var/run/docker.sock /run/docker.sock /run/containerd 2>&1; "
                          "grep -c . /proc/net/unix")
    lines = res.output.splitlines()
    assert not [line for line in lines if line.startswith("/") and "No such" not in line], lines
    assert lines[-1] == "1", "the container sees unix sockets besides the header line"
    host_abstract = [line.split()[-1][1:] for line in Path("/proc/net/unix").read_text().splitlines()
                     if line.split()[-1].startswith("@")][:20]
    for name in host_abstract:
        probe = (f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
                 f"s.connect({chr(0) + name!r}); print('CONNECTED')\"")
        out = sandbox.execute(probe).output
        assert "CONNECTED" not in out and "ConnectionRefusedError" in out, (name, out)
