"""The docker sandbox backend against a real engine and real containers: the basics, the limits,
and output that must come back whole.

Every test here needs an engine (`infra/docker/engine.sh`) and the base image
(`infra/docker/base-image.sh`); without them they skip and say so. The limits are the point:
runaway commands must end at their timeout however they try to escape, and the container must
survive them. That no container outlives its sandbox is tested in test_docker_cleanup, and
grading on this backend in test_docker_grading.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from docker_engine import BASE_IMAGE, CALC_V1, calc_instance, calc_store, docker_cfg, docker_client  # noqa: F401
from sandbox.base import Sandbox, SandboxError
from sandbox.docker import DockerSandbox
from sandbox.docker_container import resolve_image
from sandbox.docker_exec import HOST_GRACE_S
from swe_rlvr.config import SandboxConfig
from swe_rlvr.instances import Instance

pytestmark = pytest.mark.docker


@pytest.fixture
def sandbox(docker_client, calc_store):
    store, base = calc_store
    with DockerSandbox(calc_instance(base), docker_cfg(), store) as sb:
        yield sb


def process_count(sb) -> int:
    """Live processes in the container, the counting command itself excluded."""
    return int(sb.execute("n=0; for d in /proc/[0-9]*; do [ -r $d/stat ] && n=$((n+1)); done; "
                          "echo $((n-1))").output)


# --------------------------------------------------------------------------- the basics


def test_executes_in_testbed_with_only_the_base_commit(sandbox, calc_store):
    """The repo sits at /testbed at the base commit; the later fix is nowhere in its history."""
    _store, base = calc_store
    assert isinstance(sandbox, Sandbox)
    res = sandbox.execute("pwd; echo out; echo err >&2; git log --all --format=%H; exit 3")
    assert res.exit_code == 3 and not res.timed_out and not res.truncated
    assert res.output.splitlines() == ["/testbed", "out", "err", base]
    assert sandbox.read_file("calc.py") == CALC_V1


def test_files_and_diff_include_new_files_and_ignore_agent_git_tricks(sandbox):
    """diff() is against the base commit: an agent commit, a reset index or a binary file do not
    hide or add anything; byte-code caches stay out of the patch."""
    sandbox.write_file("pkg/new_module.py", "VALUE = 'é'\n")
    assert sandbox.read_file("/testbed/pkg/new_module.py") == "VALUE = 'é'\n"
    sandbox.execute("sed -i 's/a - b/a + b/' calc.py && printf '\\0\\1' > blob.bin && "
                    "mkdir -p __pycache__ && echo x > __pycache__/calc.cpython-311.pyc && "
                    "git add -A && git -c user.name=a -c user.email=a@b commit -qm agent && "
                    "git rm -q --cached calc.py")
    patch = sandbox.diff()
    assert "diff --git a/calc.py b/calc.py" in patch and "+    return a + b" in patch
    assert "new file mode 100644" in patch and "+VALUE = 'é'" in patch
    assert "blob.bin" not in patch and "__pycache__" not in patch
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("missing.txt")


def test_swe_bench_style_image_is_used_as_is(docker_client, tmp_path):
    """SWE-bench images hold the repo at /testbed and a conda env `testbed`: the sandbox uses
    both as they are (the image's own PATH kept, the env first) and needs no repo store."""
    builder = docker_client.containers.run(BASE_IMAGE, ["sleep", "60"], detach=True, auto_remove=True)
    try:
        script = ("mkdir -p /opt/miniconda3/envs/testbed/bin && "
                  "ln -s /usr/bin/python3 /opt/miniconda3/envs/testbed/bin/python && "
                  "git init -q /testbed && cd /testbed && echo 'x = 1' > mod.py && git add -A && "
                  "git -c user.name=t -c user.email=t@t commit -qm base && git rev-parse HEAD")
        code, out = builder.exec_run(["bash", "-c", script])
        assert code == 0, out
        image = builder.commit(repository="swe-rlvr/test-testbed", tag="latest",
                               changes=["ENV PATH=/opt/tool/bin:/usr/bin:/bin"])
    finally:
        builder.kill()
    try:
        inst = calc_instance(out.decode().strip())
        cfg = docker_cfg(docker_image="swe-rlvr/test-testbed:latest")
        with DockerSandbox(inst, cfg, tmp_path / "empty-store") as sb:
            assert sb.execute("command -v python; echo $PATH").output.splitlines() == [
                "/opt/miniconda3/envs/testbed/bin/python",
                "/opt/miniconda3/envs/testbed/bin:/opt/miniconda3/bin:/opt/tool/bin:/usr/bin:/bin"]
            assert sb.read_file("mod.py") == "x = 1\n"
            sb.write_file("mod.py", "x = 2\n")
            assert "+x = 2" in sb.diff()
    finally:
        docker_client.images.remove(image.id, force=True)


def test_image_names_follow_swe_bench_and_missing_images_say_how_to_fix(docker_client, calc_store):
    inst = Instance(instance_id="django__django-11099", repo="django/django", base_commit="abc",
                    problem_statement="", patch="", test_patch="", fail_to_pass=(),
                    pass_to_pass=(), source="swe-bench")
    cfg = SandboxConfig(backend="docker")
    assert resolve_image(inst, cfg) == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    store, base = calc_store
    with pytest.raises(SandboxError, match="docker pull"):
        DockerSandbox(calc_instance(base), docker_cfg(docker_image="swe-rlvr/absent:never"), store)


# --------------------------------------------------------------------------- limits and timeouts


def test_infinite_loop_ends_at_its_timeout(sandbox):
    res = sandbox.execute("while :; do :; done", timeout=2)
    assert res.timed_out and res.exit_code == 124
    assert 2 <= res.duration_s < 2 + HOST_GRACE_S
    assert sandbox.execute("echo still alive").output == "still alive\n"


def test_detached_setsid_child_dies_with_the_timeout(sandbox):
    """`setsid` leaves timeout's process group, but keeps the exec's tag and is killed by it."""
    res = sandbox.execute("setsid bash -c 'while :; do echo beat >> /tmp/beat; sleep 0.1; done' "
                          "& sleep 600", timeout=2)
    assert res.timed_out and res.duration_s < 2 + HOST_GRACE_S
    counts = sandbox.execute("wc -l < /tmp/beat; sleep 1; wc -l < /tmp/beat").output.split()
    assert counts[0] == counts[1], "the detached child kept running after the timeout"


def test_background_children_do_not_hang_the_command(sandbox):
    """A background child that holds the output pipe is killed when the command ends; a daemon
    that redirected its output keeps running, as in a terminal. The command waits until the
    daemon's subshell has exec'd nohup: one still between fork and redirection holds the pipe."""
    res = sandbox.execute("setsid sleep 600 & sleep 600 & nohup sleep 601 >/dev/null 2>&1 & "
                          "while head -c4 /proc/$!/cmdline 2>/dev/null | grep -q bash; do :; done; "
                          "echo ok")
    assert res.output == "ok\n" and res.duration_s < 5
    ps = sandbox.execute("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").output
    assert "sleep 601" in ps and "sleep 600" not in ps


def test_fork_bomb_is_contained(docker_client, calc_store):
    store, base = calc_store
    with DockerSandbox(calc_instance(base), docker_cfg(max_procs=64), store) as sb:
        before = process_count(sb)
        res = sb.execute(":(){ :|:& };: ; sleep 600", timeout=3)
        assert res.timed_out and res.duration_s < 3 + HOST_GRACE_S
        assert sb.execute("echo ok").output == "ok\n"
        assert process_count(sb) <= before + 1


def test_memory_hog_is_killed_and_the_sandbox_survives(docker_client, calc_store):
    store, base = calc_store
    with DockerSandbox(calc_instance(base), docker_cfg(memory_mb=256), store) as sb:
        res = sb.execute("python3 -c \"b = b'x' * (2 << 30); print('allocated')\"", timeout=60)
        assert res.exit_code != 0 and "allocated" not in res.output and not res.timed_out
        assert sb.execute("echo ok").output == "ok\n"


def test_no_network(sandbox):
    res = sandbox.execute("ls /sys/class/net; python3 -c \"import socket; "
                          "socket.create_connection(('1.1.1.1', 53), timeout=3)\"", timeout=20)
    assert res.output.splitlines()[0] == "lo" and res.exit_code != 0
    assert "unreachable" in res.output


def test_a_gigabyte_of_output_keeps_head_and_tail(sandbox):
    res = sandbox.execute("echo START; head -c 1000000000 /dev/zero | tr '\\0' a; echo; echo END",
                          timeout=120)
    assert res.exit_code == 0 and res.truncated and not res.timed_out
    assert res.output.startswith("START\naaa") and res.output.endswith("aaa\nEND\n")
    assert "bytes omitted" in res.output and len(res.output) < 4096 + 100


# --------------------------------------------------------------------------- output under load


def test_fast_commands_under_load_never_lose_output(docker_client, calc_store):
    """Four sandboxes run 60 instant commands each at once on a busy host. Output that reached the host with
    the upgrade headers used to be skipped (docker/docker-py#2042): a command seemed to print
    nothing, or a diff lost its first lines. Every output must come back whole."""
    store, base = calc_store

    def hammer(i: int) -> list[str]:
        with DockerSandbox(calc_instance(base), docker_cfg(), store) as sb:
            return [sb.execute(f"echo {i}-{k}").output for k in range(60)]

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:  # a busy host delays the client between the engine's reply and its first read
        with ThreadPoolExecutor(4) as pool:
            outputs = list(pool.map(hammer, range(4)))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    wrong = [(i, k, got) for i, got_all in enumerate(outputs) for k, got in enumerate(got_all)
             if got != f"{i}-{k}\n"]
    assert not wrong, f"{len(wrong)} of 240 outputs came back wrong: {wrong[:5]}"


def test_setup_output_lost_on_the_way_is_noticed_and_rerun(docker_client, calc_store):
    """A setup command whose output the engine drops (exit 0, nothing printed: seen with 30
    sandboxes starting at once on 2 cores) runs again; lost twice, it raises, never returning a
    truncated probe or diff as if complete."""
    from sandbox.docker import OutputLost
    store, base = calc_store
    with DockerSandbox(calc_instance(base), docker_cfg(), store) as sb:
        real, calls = sb._run, []

        def lossy(argv, limit, out, err, drop=1):
            calls.append(argv)
            code = real(argv, limit, out, err)
            if len(calls) <= drop:
                out.head.clear(), out.tail.clear()              # the engine lost the output
            return code

        sb._run = lossy
        assert sb._setup("echo hi") == "hi\n" and len(calls) == 2
        calls.clear()

        def headless(argv, limit, out, err):  # the first line lost, the rest delivered
            calls.append(argv)
            code = real(argv, limit, out, err)
            if len(calls) == 1:
                rest = out.text().split("\n", 1)[1]
                out.head.clear(), out.tail.clear()
                out.total = 0
                out.add(rest.encode())
            return code

        sb._run = headless
        assert sb._setup("echo hi") == "hi\n" and len(calls) == 2
        calls.clear()
        sb._run = lambda *a: lossy(*a, drop=2)
        with pytest.raises(OutputLost, match="lost twice"):
            sb._setup("echo hi")
        assert len(calls) == 2
