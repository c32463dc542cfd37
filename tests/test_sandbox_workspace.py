"""Working copies, `diff()`, file helpers, and the sweeper, on real git repositories."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agent.prompts import system_prompt
from agent.tools import make_tools
from sandbox import SandboxError, isolation, open_sandbox, workspace
from sandbox.base import REPO_DIR
from swe_rlvr.config import AgentConfig
from test_sandbox_support import FIXED, live_copies, make_instance, overlay_mounts, sandbox_config, store  # noqa: F401


@pytest.fixture
def env(store, tmp_path):
    return make_instance(store), sandbox_config(tmp_path), store


def test_fresh_copy_at_base_and_no_future_history(env):
    """The agent sees the base commit only: `git log --all` cannot show the upstream fix."""
    inst, cfg, store = env
    with open_sandbox(inst, cfg, store) as sb:
        head = sb.execute("git rev-parse HEAD").output.strip()
        log = sb.execute("git log --all --oneline").output
        assert head == inst.base_commit and "the future" not in log
        assert sb.execute("git status --porcelain").output == ""
        assert sb.read_file("calc/core.py").count("a - b") == 1


def test_copies_are_independent_and_the_base_is_untouched(env):
    inst, cfg, store = env
    with open_sandbox(inst, cfg, store) as one, open_sandbox(inst, cfg, store) as two:
        one.write_file("calc/core.py", FIXED)
        one.execute("rm README.md")
        assert "a - b" in two.read_file("calc/core.py") and two.read_file("README.md") == "calc\n"
        assert "a - b" in (one.copy.base / "calc/core.py").read_text()
        assert (one.copy.base / "README.md").exists()


def test_diff_has_edits_and_new_files_but_no_junk(env):
    inst, cfg, store = env
    with open_sandbox(inst, cfg, store) as sb:
        sb.write_file("calc/core.py", FIXED)
        sb.write_file("calc/extra.py", "X = 1\n")
        sb.execute("mkdir -p calc/__pycache__ && echo junk > calc/__pycache__/core.cpython-311.pyc")
        sb.execute("printf '\\x00\\x01\\x02' > blob.bin")
        patch = sb.diff()
    assert "+    return a + b" in patch and "calc/extra.py" in patch and "new file mode" in patch
    assert "__pycache__" not in patch and "blob.bin" not in patch


def test_diff_survives_agent_commits_resets_and_history_rewrites(env):
    """An agent that commits, soft-resets, amends, or deletes .git cannot hide (or fake) changes:
    diff() compares the files on disk with the base commit through our own git directory."""
    inst, cfg, store = env
    with open_sandbox(inst, cfg, store) as sb:
        sb.write_file("calc/core.py", FIXED)
        sb.execute("git add -A && git commit -qm fix && git reset -q --soft HEAD~1 && "
                   "git commit -qm again && git update-ref refs/heads/main HEAD")
        first = sb.diff()
        sb.execute("git config core.fsmonitor 'touch /tmp/pwned' && rm -rf .git")
        second = sb.diff()
    assert first == second and "+    return a + b" in first
    assert first.count("diff --git") == 1


def test_file_helpers_refuse_paths_outside_the_repo(env):
    inst, cfg, store = env
    with open_sandbox(inst, cfg, store) as sb:
        with pytest.raises(SandboxError, match="leaves the repository"):
            sb.read_file("../sandbox.json")
        with pytest.raises(SandboxError, match="leaves the repository"):
            sb.write_file("/etc/passwd", "x")
        sb.write_file("new/dir/file.txt", "hello")
        assert sb.execute("cat new/dir/file.txt").output == "hello"
        assert sb.read_file(f"{sb.workdir}/new/dir/file.txt") == "hello"  # absolute, as commands see it


def test_close_removes_copy_and_mount(env):
    inst, cfg, store = env
    sb = open_sandbox(inst, cfg, store)
    assert live_copies(cfg) == [sb.copy.tag]
    sb.close()
    sb.close()
    assert live_copies(cfg) == [] and overlay_mounts(cfg) == []
    with pytest.raises(SandboxError, match="closed"):
        sb.execute("true")


def test_missing_repository_names_the_store_and_the_expected_dirs(env):
    inst, cfg, store = env
    with pytest.raises(SandboxError, match=r"acme/nope.*acme__nope"):
        open_sandbox(replace(inst, repo="acme/nope"), cfg, store)


def test_sweep_removes_dead_owners_and_expired_copies(env):
    inst, cfg, store = env
    root = workspace.sandbox_root(cfg.workdir)
    live = open_sandbox(inst, cfg, store)
    dead = open_sandbox(inst, cfg, store)
    marker = dead.copy.path / workspace.MARKER
    data = json.loads(marker.read_text())
    marker.write_text(json.dumps({**data, "pid": 2 ** 22 + 1}))  # an owner that cannot exist
    try:
        assert workspace.sweep(root) == [dead.copy.tag]
        assert live_copies(cfg) == [live.copy.tag]
        assert workspace.sweep(root, older_than=0) == [live.copy.tag]
        assert live_copies(cfg) == [] and overlay_mounts(cfg) == []
    finally:
        live.close()
        dead.close()


def test_sweep_of_dead_owners_only_spares_a_live_copy_past_its_ttl(env):
    """What a fan-out stage sweeps after its shards: a killed worker's copies, never a live
    sandbox of a concurrent run, even one older than its TTL."""
    inst, cfg, store = env
    root = workspace.sandbox_root(cfg.workdir)
    live = open_sandbox(inst, cfg, store)
    dead = open_sandbox(inst, cfg, store)
    for box, pid in ((live, None), (dead, 2 ** 22 + 1)):
        marker = box.copy.path / workspace.MARKER
        data = json.loads(marker.read_text())
        marker.write_text(json.dumps({**data, "ttl_s": 0, "pid": pid or data["pid"]}))
    try:
        assert workspace.sweep(root, dead_owner_only=True) == [dead.copy.tag]
        assert live_copies(cfg) == [live.copy.tag]
    finally:
        live.close()
        dead.close()


def test_sweep_cli_reports_removed_copies(env, capsys):
    inst, cfg, store = env
    from swe_rlvr.cli import main
    sb = open_sandbox(inst, cfg, store)
    sb.execute("true")
    assert main(["sandbox", "sweep", "--older-than", "0", "--workdir", cfg.workdir]) == 0
    assert sb.copy.tag in capsys.readouterr().out
    assert live_copies(cfg) == []


def test_copy_fallback_without_overlay(env):
    """Where overlayfs is unavailable the copy is a real copy, equally isolated from the base."""
    inst, cfg, store = env
    with open_sandbox(inst, replace(cfg, working_copy="copy"), store) as sb:
        assert not sb.copy.mounted
        sb.write_file("calc/core.py", FIXED)
        assert "a - b" in (sb.copy.base / "calc/core.py").read_text()
        assert "+    return a + b" in sb.diff()


# --------------------------------------------------------------------------- the fixed path

needs_bwrap = pytest.mark.skipif(not isolation.available("bwrap"),
                                 reason="needs bubblewrap (apt-get install bubblewrap)")
LOOK_AROUND = ("pwd; pwd -P; grep -rn 'a - b' .; python -m pytest -p no:cacheprovider tests | grep rootdir; "
               "python -c 'from calc.core import add; print(object(), set(\"abcdefgh\")); add(None, 1)'")
"""A first command whose output names paths four ways (the shell, grep, pytest, a traceback), an
object address and a set's order."""


@needs_bwrap
def test_two_sandboxes_show_the_agent_the_same_bytes(env):
    """Regression: each working copy lives in a random host directory (`copies/wc-XXXX/repo`),
    and commands used to run there, so the system prompt, `pwd`, `grep -rn`, tracebacks and
    pytest's rootdir named it. Two runs with the same seeds then sampled different token ids and
    trained different weights (tests/test_flows.py). The jail now shows every copy at /testbed:
    the prompt and the first observation are byte-identical across sandboxes of one instance.
    (Commands also run with PYTHONHASHSEED fixed and no address randomisation: pytest's assertion
    messages print object addresses and set orders, and guidance quotes them.)"""
    inst, cfg, store = env
    cfg, agent_cfg = replace(cfg, isolation="bwrap"), AgentConfig(scaffold="bash")
    with open_sandbox(inst, cfg, store) as one, open_sandbox(inst, cfg, store) as two:
        assert one.copy.repo != two.copy.repo
        seen = []
        for sb in (one, two):
            assert sb.workdir == REPO_DIR and sb.execute("pwd").output == f"{REPO_DIR}\n"
            seen.append((system_prompt(agent_cfg, sb.workdir),
                         make_tools(sb, agent_cfg).shell(LOOK_AROUND)))
    assert seen[0] == seen[1]
    prompt, observation = seen[0]
    assert f"current directory, {REPO_DIR}." in prompt
    assert observation.startswith(f"{REPO_DIR}\n{REPO_DIR}\n./calc/core.py:2:")
    assert f'File "{REPO_DIR}/calc/core.py", line 2' in observation
    assert f"rootdir: {REPO_DIR}" in observation and "<object object at 0x" in observation
    assert "wc-" not in observation


@needs_bwrap
def test_commands_cannot_reach_the_host_directory(env):
    """The copy's host directory (and the copies root around it) is hidden inside the jail, so
    no command can print, enter or write through the random path."""
    inst, cfg, store = env
    with open_sandbox(inst, replace(cfg, isolation="bwrap"), store) as sb:
        host, copies = sb.copy.repo, sb.copy.path.parent
        probe = sb.execute(f"ls -A {copies}; ls {host} || echo UNSEEN; cd {host} && echo ENTERED; "
                           f"touch {host}/x && echo WROTE; realpath .")
        assert "wc-" not in probe.output.replace(str(host), ""), probe.output  # no copy listed
        assert "UNSEEN" in probe.output and "ENTERED" not in probe.output
        assert "WROTE" not in probe.output and not (host / "x").exists()
        assert probe.output.endswith(f"\n{REPO_DIR}\n")
