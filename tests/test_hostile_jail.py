"""A hostile policy inside the local jail: it must not reach the host, read the answers or exhaust
the machine. Each test is an attack that worked before the jail became an allow-list run as
nobody; the docstring tells the story.

The attacks run on both namespace levels (bwrap and unshare) where this machine has them; what
needs root (the drop to nobody, cgroups, a capped tmpfs) skips with the reason elsewhere.
"""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

import pytest

import swe_rlvr
from sandbox import isolation, open_sandbox, view
from sandbox.base import PatchTooLarge, SandboxError
from test_sandbox_support import make_instance, sandbox_config, store  # noqa: F401 - fixture

ROOT = os.geteuid() == 0
LEVELS = [pytest.param(lvl, marks=pytest.mark.skipif(not isolation.available(lvl),
                                                     reason=f"isolation {lvl} is not available here"))
          for lvl in isolation.MOUNT_LEVELS]
needs_root = pytest.mark.skipif(not ROOT, reason="the drop to nobody and the cgroups need root")


@pytest.fixture(params=LEVELS)
def jail(request, store, tmp_path):
    """A sandbox on the given namespace level, with small limits."""
    cfg = sandbox_config(tmp_path, isolation=request.param, memory_mb=1024, disk_mb=64,
                         file_size_mb=8, max_patch_kb=256)
    with open_sandbox(make_instance(store), cfg, store) as sb:
        yield sb


def run(sb, cmd: str, timeout: float = 30) -> str:
    return sb.execute(cmd, timeout=timeout).output


@needs_root
def test_commands_run_as_nobody_without_capabilities(jail):
    """The jail's uid was host root (bwrap's uid 1000 inside mapped to 0 outside; `unshare` ran
    commands as root with every capability, so `mount -o remount,rw /` worked and host files
    could be written). Now every command is host uid/gid 65534 with no capability at all."""
    status = dict(line.split(":\t", 1) for line in run(jail, "cat /proc/self/status").splitlines()
                  if ":\t" in line)
    assert status["Uid"].split()[:2] == ["65534", "65534"] and status["Gid"].split()[0] == "65534"
    assert int(status["CapEff"], 16) == int(status["CapPrm"], 16) == int(status["CapBnd"], 16) == 0
    assert status["NoNewPrivs"].strip() == "1"
    assert jail.execute("mount -o remount,rw / 2>&1").exit_code != 0


def test_host_kernel_settings_are_out_of_reach(jail):
    """/proc/sys was writable from the jail (763 files, `kernel/core_pattern` among them: code
    execution as root on the host). Opening it for writing (without writing) must fail now;
    /sys is not shown at all, nor /proc/sysrq-trigger writable."""
    probe = ("import os\nfor p in ('/proc/sys/kernel/core_pattern', '/proc/sysrq-trigger'):\n"
             "    try:\n        os.close(os.open(p, os.O_WRONLY)); print('WRITABLE', p)\n"
             "    except OSError as e:\n        print('refused', p, e.errno)\n")
    out = run(jail, f"python3 -c {isolation._q(probe)}; ls /sys 2>&1 | head -1")
    assert "WRITABLE" not in out and out.count("refused") == 2, out
    assert "No such file" in out.splitlines()[-1], out


def test_root_only_host_files_are_not_readable(jail):
    """The jail's uid mapped to host root, so every file its owner may read was readable:
    /etc/shadow among them."""
    result = jail.execute("cat /etc/shadow")
    assert result.exit_code != 0 and "root:" not in result.output


def test_host_unix_sockets_are_not_reachable(jail, tmp_path):
    """`--unshare-net` does not cover file-system sockets: the Docker engine's socket (root on
    the host) and any other listening socket under /run were reachable. The jail shows no /run,
    no /var and no host directory holding sockets."""
    path = Path("/run") / f"swe-rlvr-test-{uuid.uuid4().hex[:8]}.sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        server.listen(1)
        probe = (f"import socket; s = socket.socket(socket.AF_UNIX); s.settimeout(2); "
                 f"s.connect({str(path)!r}); print('CONNECTED')")
        out = run(jail, f"python3 -c {isolation._q(probe)} 2>&1; ls /run /var/run /var 2>&1")
    finally:
        server.close()
        path.unlink(missing_ok=True)
    assert "CONNECTED" not in out, out
    assert all(f"cannot access '{d}': No such file" in out for d in ("/run", "/var/run", "/var")), out


def test_the_answers_are_not_readable(jail):
    """The project's checkout and installed package hold every built-in gold patch and the fixed
    code (`swe_rlvr/builtin/instances.jsonl`, `projects/`); applying one resolved a hard
    test-split instance. Datasets on the host and the run directory were readable too. The jail
    shows none of them."""
    package = Path(swe_rlvr.__file__).resolve().parent
    for path in (package / "builtin" / "instances.jsonl", package.parent / "README.md"):
        result = jail.execute(f"ls {isolation._q(str(path))} 2>&1; cat {isolation._q(str(path))} | head -c 100")
        assert "No such file" in result.output or "Permission denied" in result.output, (path, result.output)
    installed = [d for bind in jail.jail.binds for d in view.own_package_dirs(bind)]
    for path in installed:  # an installed copy (or its metadata) inside the environment: masked
        assert run(jail, f"ls -A {isolation._q(path)}").strip() == "", path
    home = Path.home()
    shown = set(run(jail, f"ls -A {isolation._q(str(home))} 2>/dev/null").split())
    needed = {Path(b).relative_to(home).parts[0] for b in jail.jail.binds if Path(b).is_relative_to(home)}
    assert shown <= needed, f"the jail shows {sorted(shown - needed)} of the home directory"


def test_the_jail_offers_a_fixed_tool_set_whatever_the_host_has(jail):
    """The jail's view depended on the host's installs: on a host with xdg-utils, `open calc/ops.py`
    found /usr/bin/open, so an unknown tool was no format error there. Now /usr/bin and /usr/sbin
    hold exactly the fixed tools (where the host has them), and /usr/local is empty."""
    listed = set(run(jail, "ls /usr/bin /usr/sbin /usr/local").split()) - {"/usr/bin:", "/usr/sbin:", "/usr/local:"}
    assert listed <= set(view.TOOLS), sorted(listed - set(view.TOOLS))
    assert {"bash", "git", "patch", "grep", "sed", "python3"} <= listed
    assert jail.execute("command -v open xdg-open docker sudo su").output.strip() == ""


@needs_root
def test_many_processes_share_one_memory_limit(jail):
    """Memory was limited per process only: 4 x 700 MB passed with memory_mb=1024. A memory
    cgroup now bounds the sandbox as a whole, so they cannot all hold their memory at once."""
    if jail.jail.memory_cgroup is None:
        pytest.skip("no writable memory cgroup on this machine")
    hog = "python3 -c \"import time; b = bytearray(700 << 20); b[::4096] = b'x' * len(b[::4096]); print('he' + 'ld'); time.sleep(3)\""
    out = run(jail, " & ".join([hog] * 4) + " & wait", timeout=60)
    assert out.count("held") < 4, out
    assert jail.execute("echo alive").output.strip() == "alive"


@needs_root
def test_disk_is_capped_for_the_working_copy_and_tmp(jail):
    """Disk was unbounded (a 1 MB file size limit does not stop a thousand files), and /dev was a
    RAM-backed tmpfs of half the host's memory. The working copy's writable layer and /tmp share a
    `disk_mb` tmpfs, and /dev/shm is capped too."""
    fill = "for i in $(seq 100); do head -c 1048576 /dev/zero > {d}/f$i || break; done; du -sm {d} | cut -f1"
    for place in ("/testbed/junk", "/tmp/junk", "/dev/shm"):
        out = run(jail, f"mkdir -p {place}; " + fill.format(d=place) + f"; rm -rf {place}/f*", timeout=60)
        used = int(out.strip().splitlines()[-1])
        assert used <= 64 and "No space left" in out, (place, out)


def test_a_huge_diff_is_refused_not_read_whole(jail):
    """A 537 MB diff became a 1.6 GB string in the rollout process. Past `max_patch_kb` the diff
    is refused (a format failure of the episode) without reading it whole."""
    jail.execute("python3 -c \"open('big.txt', 'w').write('line of text\\n' * 100000)\"")
    with pytest.raises(PatchTooLarge, match="max_patch_kb"):
        jail.diff()
    jail.execute("rm big.txt && echo small > small.txt")
    assert "+small" in jail.diff()


@needs_root
def test_pgroup_is_refused_as_root(store, tmp_path):
    """pgroup has no namespaces: as root its commands ran as host root. It is refused, naming the
    levels that drop privileges."""
    with pytest.raises(SandboxError, match="bwrap"):
        with open_sandbox(make_instance(store), sandbox_config(tmp_path, isolation="pgroup"), store) as sb:
            sb.execute("true")


@needs_root
def test_files_the_host_writes_stay_the_commands_to_change(jail):
    """Commands run as nobody, but the agent's editor writes through the host (as root): what it
    writes must still be the commands' to append to, and its new directories theirs to fill."""
    jail.write_file("pkg/new/module.py", "x = 1\n")
    out = run(jail, "echo 'y = 2' >> pkg/new/module.py && touch pkg/new/other.py && cat pkg/new/module.py")
    assert out == "x = 1\ny = 2\n", out
