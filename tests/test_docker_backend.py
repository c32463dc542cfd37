"""The docker sandbox backend against a real engine and real containers.

Every test here needs an engine (`infra/docker/engine.sh`) and the base image
(`infra/docker/base-image.sh`); without them they skip and say so. The limits are the point:
runaway commands must end at their timeout however they try to escape, the container must
survive them, and no container may outlive its sandbox.
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
from docker_engine import (BASE_IMAGE, CALC_V1, calc_instance, calc_store, docker_cfg,  # noqa: F401
                           docker_client, labelled)

from sandbox.base import Sandbox, SandboxError
from sandbox.docker import DockerSandbox, resolve_image, sweep_containers
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
        assert sweep_containers() >= 1
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


# --------------------------------------------------------------------------- grading on docker


def test_builtin_suite_gold_resolves_and_empty_patch_does_not(docker_client, tmp_path):
    """Every hand-written built-in instance and a sample of the generated ones, graded on the
    docker backend (base image): the gold patch resolves it, the empty patch does not, and neither
    is an infrastructure failure."""
    from builtin_support import builtin_sample
    from sandbox.grading import grade_many
    try:
        instances = builtin_sample()
    except FileNotFoundError as exc:
        pytest.skip(f"the built-in suite is not generated yet: {exc}")
    items = [(inst, inst.patch) for inst in instances] + [(inst, "") for inst in instances]
    reports = grade_many(items, SandboxConfig(backend="docker"), tmp_path / "repos", workers=4,
                         progress=False)
    gold, empty = reports[:len(instances)], reports[len(instances):]
    for inst, report in zip(instances, gold):
        assert report.resolved, (inst.instance_id, report.infra_reason, report.notes,
                                 report.f2p_failed, report.p2p_failed, report.log[-1500:])
    for inst, report in zip(instances, empty):
        assert not report.resolved and not report.infra_failure, (inst.instance_id,
                                                                   report.infra_reason)


def test_a_suite_that_cannot_run_is_an_infrastructure_failure_on_docker(docker_client, tmp_path):
    """No interpreter in the image (exit 127), through the test command and through a record's
    eval_script: the suite never ran, with the gold patch or without one. No sample, never a 0."""
    from dataclasses import replace

    from builtin_support import builtin_sample
    from sandbox.grading import grade
    try:
        inst = builtin_sample()[0]
    except FileNotFoundError as exc:
        pytest.skip(f"the built-in suite is not generated yet: {exc}")
    script = "set -uxo pipefail\n: '>>>>> Start Test Output'\npython2.1 -m pytest -rA\n: '>>>>> End Test Output'\n"
    cases = (replace(inst, env=replace(inst.env, test_cmd="python2.1 -m pytest -rA")),
             replace(inst, instance_id=inst.instance_id + "-script", env=replace(inst.env, eval_script=script)))
    for case in cases:
        for patch in ("", case.patch):
            report = grade(case, patch, SandboxConfig(backend="docker"), tmp_path / "repos")
            assert report.infra_failure and not report.resolved, (case.instance_id, patch[:20])
            assert "python2.1" in report.infra_reason and "command not found" in report.infra_reason
