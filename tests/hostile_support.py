"""The cheating policy's workbench for the grading tests: an instance on each backend, and patches
made the way an agent makes them.

`env` is `swe-rlvr__iniconf-1` (`to_bool` rejects "on"; four FAIL_TO_PASS tests in two files) on
the local backend and, marked `docker`, on the docker one. `attack` writes files in a real sandbox
and returns its `diff()`; `graded` grades that patch end to end with real pytest runs.
`PASSING_PLUGIN` is the always-pass pytest plugin that both the attacks and the honest cases use.

`env` is module-scoped: each test module that imports it gets its own temporary repo store and
sandbox directory, so the first grade in each module sets the instance up again (about 9 s more on
the local backend, measured on a busy two-core machine).
Without the built-in suite, every module that imports this one is skipped.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sandbox import open_sandbox
from sandbox.grading import grade
from test_sandbox_support import sandbox_config

builtin = pytest.importorskip("swe_rlvr.builtin", reason="the built-in suite is not installed")

INSTANCE = "swe-rlvr__iniconf-1"

PASSING_PLUGIN = '''import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome, report.longrepr = "passed", None


def pytest_unconfigure(config):
    folder = config.rootpath.relative_to(config.invocation_params.dir).as_posix()
    xml = getattr(config.option, "xmlpath", None)
    if xml and folder != ".":
        with open(xml) as f:
            text = f.read().replace('classname="', 'classname="' + folder.replace("/", ".") + ".")
        with open(xml, "w") as f:
            f.write(text)
'''
"""A pytest plugin that reports every test as passed (and, where a configuration file in a
subdirectory made that the rootdir, keys the junit report as the log's test ids are keyed)."""


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def env(request, tmp_path_factory):
    """(instance, config, repo store) on each backend; docker skips without an engine and image."""
    tmp = tmp_path_factory.mktemp(f"hostile-{request.param}")
    cfg = sandbox_config(tmp)
    if request.param == "docker":
        from docker_engine import BASE_IMAGE, engine_problem
        _, problem = engine_problem()
        if problem:
            pytest.skip(f"Docker engine not available: {problem}")
        cfg = replace(cfg, backend="docker", docker_image=BASE_IMAGE)
    inst = next(i for i in builtin.load_builtin() if i.instance_id == INSTANCE)
    return inst, cfg, tmp / "repos"


def attack(env, files: dict, fixed: bool = False) -> str:
    """The patch an agent submits after writing `files` (on top of the gold fix if `fixed`): each
    value is the new text, or a function from the file's current text to the new one."""
    inst, cfg, store = env
    with open_sandbox(inst, cfg, store) as sb:
        if fixed:
            assert sb.execute(f"git apply <<'EOF_GOLD'\n{inst.patch}EOF_GOLD").exit_code == 0
        for path, text in files.items():
            sb.write_file(path, text(sb.read_file(path)) if callable(text) else text)
        return sb.diff()


def appended(code: str):
    return lambda text: text + "\n" + code


def graded(env, files: dict, fixed: bool = False, screen: bool = False):
    """The grade of the patch `attack` makes. The static screen is off unless `screen`: it flags
    most of these patches from their text alone (tests/test_screen.py, test_runtime_guard.py), and
    each of the other layers is tested here on its own."""
    inst, cfg, store = env
    return grade(inst, attack(env, files, fixed), replace(cfg, static_screen=screen), store)


def assert_no_reward(report) -> None:
    assert report.patch_applied and not report.infra_failure, report.infra_reason
    assert not report.resolved and report.resolution == "NO"


def reset_notes(report) -> str:
    return " | ".join(n for n in report.notes if n.startswith("reset to base"))
