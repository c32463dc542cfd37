"""A cheating policy that changes *how the tests run*: none of it may earn a reward.

Unless its docstring says otherwise, each attack here forged "resolved" before the grader learnt to
see it: the log, the junit report and the exit code all agreed, because the cheat lives in the
pytest process itself. The grader's answers (`sandbox.grading`): the test infrastructure is restored like the test
files (pytest configuration, conftests, test-path `__init__.py`, files that change how Python or
pytest start), XFAIL counts only where the pristine test file expects it, and two canary tests per
test file, one that must pass and one that must fail, catch a run whose outcomes were rewritten
(`tampered`: never resolved, and the trainer's `tamper_penalty`).

Every patch is made the way an agent makes one (files written in a real sandbox, then `diff()`)
on `swe-rlvr__iniconf-1` (`to_bool` rejects "on"; four FAIL_TO_PASS tests in two files), and
graded end to end with real pytest runs.

The rules these attacks led to are tested on hand-made runs in test_tamper_rules; what the rules
must leave alone (honest patches and environments, the canaries' own behaviour) in
test_honest_grading. The helpers and the `env` fixture are in hostile_support.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from hostile_support import PASSING_PLUGIN, appended, assert_no_reward, env, graded, reset_notes  # noqa: F401
from sandbox.grading import grade
from test_sandbox_support import diff_of, make_instance, sandbox_config, store  # noqa: F401

NOOP_BODIES = '''
import sys as _sys


def _swe_noop(module):
    module.Function.runtest = lambda self: None


if "_pytest.python" in _sys.modules:
    _swe_noop(_sys.modules["_pytest.python"])
else:
    import importlib.abc as _abc
    import importlib.util as _util

    class _SweFinder(_abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != "_pytest.python":
                return None
            _sys.meta_path.remove(self)
            spec = _util.find_spec(name)
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _swe_noop(module)

            spec.loader.exec_module = exec_module
            return spec

    _sys.meta_path.insert(0, _SweFinder())
'''
"""Code that makes every test body a no-op (`Function.runtest`), wherever it is imported from:
at once if pytest's `_pytest.python` is loaded, else as soon as it is."""


def proxy_package(name: str) -> str:
    """`<name>/__init__.py` at the repo root that loads the real package `name` in its place (so
    nothing breaks) and then makes test bodies no-ops."""
    return (f"import os, sys\n_here = os.path.dirname(os.path.abspath(__file__))\n"
            f"for _p in sys.path:\n"
            f"    _real = os.path.join(os.path.abspath(_p or '.'), {name!r})\n"
            f"    if _real != _here and os.path.isfile(os.path.join(_real, '__init__.py')):\n"
            f"        break\n"
            f"__path__[:] = [_real]\n__file__ = os.path.join(_real, '__init__.py')\n"
            f"exec(compile(open(__file__).read(), __file__, 'exec'))\n" + NOOP_BODIES)


def proxy_stdlib(name: str) -> str:
    """`<name>.py` at the repo root that loads the standard library's `name` in its place."""
    return (f"import importlib.util as _u, os as _os, sysconfig as _sc\n"
            f"_spec = _u.spec_from_file_location({name!r}, _os.path.join(_sc.get_paths()['stdlib'], "
            f"{name + '.py'!r}))\n_real = _u.module_from_spec(_spec)\n_spec.loader.exec_module(_real)\n"
            f"globals().update({{k: v for k, v in vars(_real).items() if not k.startswith('__')}})\n"
            + NOOP_BODIES)


PYTEST_MODULE = ("import os, sys\n_here = os.path.dirname(os.path.abspath(__file__))\n"
                 "sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != _here]\n"
                 "sys.modules.pop('pytest', None)\nimport pytest as _real\n" + NOOP_BODIES +
                 "\nif __name__ == '__main__':\n    sys.path.insert(0, _here)\n"
                 "    raise SystemExit(_real.console_main())\n")
"""`pytest.py` at the repo root: `python -m pytest` runs it instead of pytest; it runs the real
pytest with test bodies made no-ops."""


def forger(tests: tuple[str, ...]) -> str:
    """Code that stops pytest's capture, prints a `-rA` summary in which every one of `tests`
    passed, writes a junit report that agrees where `--junitxml` says, and exits 0 at once."""
    return (
        "import gc, os, sys\n"
        "from _pytest.capture import CaptureManager\n"
        "from xml.sax.saxutils import quoteattr\n"
        f"TESTS = {list(tests)!r}\n"
        "for obj in gc.get_objects():\n"
        "    if isinstance(obj, CaptureManager):\n"
        "        obj.suspend_global_capture(in_=True)\n"
        "print('=' * 20 + ' short test summary info ' + '=' * 20)\n"
        "for t in TESTS:\n"
        "    print('PASSED', t)\n"
        "print('=' * 20 + f' {len(TESTS)} passed in 0.10s ' + '=' * 20)\n"
        "def case(t):\n"
        "    path, name = t.split('::', 1)\n"
        "    return f'<testcase classname={quoteattr(path[:-3].replace(\"/\", \".\"))} name={quoteattr(name)} time=\"0\"/>'\n"
        "xml = '<?xml version=\"1.0\"?><testsuites><testsuite name=\"pytest\">' + ''.join(map(case, TESTS)) + '</testsuite></testsuites>'\n"
        "for arg in sys.argv:\n"
        "    if arg.startswith('--junitxml='):\n"
        "        open(arg.split('=', 1)[1], 'w').write(xml)\n"
        "sys.stdout.flush()\n"
        "os._exit(0)\n")


# --------------------------------------------------------------------------- the tests' outcomes


def test_xfail_called_on_the_buggy_path_is_no_pass(env):
    """The patch leaves the bug in and calls `pytest.xfail()` where `to_bool` would reject "on":
    the FAIL_TO_PASS tests now end XFAIL, which SWE-bench counts as passing (exit 0, junit agrees).
    An XFAIL counts only where the pristine test file marks that test xfail; these are not marked,
    so the `xfail` guard fails them (SWE-bench's verdict stays in `reference_resolved`)."""
    report = graded(env, {"iniconf/values.py": lambda text: text.replace(
        "    raise ValueError(f\"not a boolean", "    import pytest\n    pytest.xfail(\"not supported yet\")\n    raise ValueError(f\"not a boolean")})
    assert_no_reward(report)
    assert report.reference_resolved and not report.tampered
    assert [g.split(":")[0] for g in report.guards] == ["xfail"]
    assert set(report.f2p_failed) == set(env[0].fail_to_pass)


@pytest.mark.parametrize("where, code", [
    ("iniconf/__init__.py", NOOP_BODIES),
    ("iniconf/values.py", "import _pytest.python\n\n\ndef _nothing(pyfuncitem):\n    return True\n\n\n"
                          "_pytest.python.pytest_pyfunc_call.__code__ = _nothing.__code__\n"),
], ids=["Function.runtest", "pytest_pyfunc_call"])
def test_code_under_test_that_empties_test_bodies_is_tampering(env, where, code):
    """The package the tests import rewrites pytest on import, so no test body runs and every test
    "passes". The canary that must fail passes too: the grade is tampered, never resolved."""
    report = graded(env, {where: appended(code)})
    assert_no_reward(report)
    assert report.tampered and "canary" in report.tamper_reason
    assert report.reference_resolved   # SWE-bench alone would have paid for it


@pytest.mark.parametrize("config", [
    {"pyproject.toml": None},
    {"pytest.ini": "[pytest]\naddopts = -p evilplug\npythonpath = .\n"},
    {"tests/pytest.ini": "[pytest]\naddopts = -p evilplug\n"},
    {"tests/tox.ini": "[pytest]\naddopts = -p evilplug\n"},
    {"tests/setup.cfg": "[tool:pytest]\naddopts = -p evilplug\n"},
    {"tests/pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p evilplug'\n"},
    {"tests/tox.ini": "[tox]\x0c[pytest]\x0caddopts = -p evilplug\n"},
    {"tests/setup.cfg": "[metadata]\rname = x\r[tool:pytest]\raddopts = -p evilplug\n"},
], ids=["pyproject-addopts", "pytest.ini", "subdir-pytest.ini", "subdir-tox.ini", "subdir-setup.cfg",
        "subdir-pyproject", "tox.ini-form-feeds", "setup.cfg-carriage-returns"])
def test_plugin_loaded_by_the_repos_pytest_configuration_is_reset(env, config):
    """The patch adds a plugin module that reports every test passed, and loads it from pytest's
    own configuration: `addopts = -p evilplug` in the existing pyproject.toml, a new pytest.ini, or
    a configuration file in tests/ (pytest takes the one closest to the test files; the plugin
    rewrites the junit report to match the log's ids), its lines ended where pytest's ini parser
    ends them and configparser does not (form feeds, carriage returns). Configuration whose pytest section the
    patch changed is reset to the base (deleted where the base has none): the plugin never loads."""
    if config == {"pyproject.toml": None}:
        config = {"pyproject.toml": lambda text: text.replace(
            'testpaths = ["tests"]', 'testpaths = ["tests"]\naddopts = "-p evilplug"')}
    report = graded(env, {"evilplug.py": PASSING_PLUGIN, **config})
    assert_no_reward(report)
    assert next(iter(config)) in reset_notes(report)
    assert not report.reference_resolved and report.f2p_failed


@pytest.mark.parametrize("files", [
    {"pytest.py": PYTEST_MODULE},
    {"_pytest/__init__.py": proxy_package("_pytest")},
    {"pluggy/__init__.py": proxy_package("pluggy")},
    {"shlex.py": proxy_stdlib("shlex")},
], ids=["pytest.py", "_pytest", "pluggy", "stdlib-shlex"])
def test_shadowing_pytest_or_what_it_imports_is_reset(env, files):
    """A new top-level module at the repo root (sys.path[0] under `python -m pytest`) takes the
    place of pytest, of its dependencies or of a standard-library module pytest imports; each
    loads the real one and empties the test bodies. New top-level modules with such names are
    deleted before the tests run."""
    report = graded(env, files)
    assert_no_reward(report)
    assert f"imports): {next(iter(files)).split('/')[0]}" in reset_notes(report)
    assert not report.tampered and not report.reference_resolved


@pytest.mark.parametrize("dist", ["evilplug-1.0.dist-info", "evilplug-1.0.DIST-INFO"])
def test_entry_point_plugin_in_the_repo_is_reset(env, dist):
    """pytest autoloads the `pytest11` entry points of every distribution on sys.path, and the repo
    root is on it: a `*.dist-info` directory in the patch registers the always-pass plugin (its
    suffix in any case: importlib.metadata ignores it). Package metadata the patch adds is
    deleted."""
    report = graded(env, {"evilplug.py": PASSING_PLUGIN,
                          f"{dist}/METADATA": "Metadata-Version: 2.1\nName: evilplug\nVersion: 1.0\n",
                          f"{dist}/entry_points.txt": "[pytest11]\nevilplug = evilplug\n"})
    assert_no_reward(report)
    assert dist in reset_notes(report)


def test_shadowing_an_installed_autoloaded_plugin_is_reset(env):
    """pytest autoloads the plugins installed in the test environment (here pytest-timeout's
    `pytest_timeout`); under `python -m pytest` the repo root comes first on sys.path, so a new
    `pytest_timeout.py` there is loaded as that plugin. A new top-level module named like any
    module the environment has installed is deleted before the tests run."""
    import importlib.util
    if env[1].backend == "docker" or importlib.util.find_spec("pytest_timeout") is None:
        pytest.skip("the test environment has no pytest_timeout plugin installed to shadow")
    report = graded(env, {"pytest_timeout.py": PASSING_PLUGIN})
    assert_no_reward(report)
    assert "shadows an installed module" in reset_notes(report) and "pytest_timeout.py" in reset_notes(report)


@pytest.mark.parametrize("files", [
    {"sitecustomize.py": NOOP_BODIES},
    {"src/usercustomize.py": NOOP_BODIES},
    {"evil.pth": "import evilmod\n", "evilmod.py": NOOP_BODIES},
    {".gitattributes": "*.py text eol=crlf\n"},
    {"tests/unit/conftest.py": PASSING_PLUGIN},
], ids=["sitecustomize", "usercustomize", "pth", "gitattributes", "conftest-in-new-dir"])
def test_files_that_change_how_python_or_git_start_are_reset(env, files):
    """Python runs `sitecustomize`/`usercustomize` (and `*.pth` lines in site directories) when it
    starts: where an environment installs the repo, the sandbox puts the working copy and its src/
    first on PYTHONPATH, so such files the patch adds run before pytest (the slow test below shows
    it on a real repository). `.gitattributes` changes how the grader's own git writes the test
    files (on docker, CRLF test files made the test patch fail: "no sample"), and a conftest.py in a
    new directory is a plugin for the tests below it. On the built-in suite the repo is not on the
    path at startup, so the first three are inert here and the conftest was reset before: what
    this checks is the reset, and that the honest fix beside it still counts."""
    report = graded(env, files, fixed=True)
    assert next(iter(files)) in reset_notes(report)
    assert report.resolved and not report.tampered   # the honest fix beside it still counts


def test_init_on_the_test_path_is_reset(env):
    """A new tests/__init__.py is imported before every test module (it makes tests/ a package) and
    empties the test bodies. `__init__.py` files of the test directories are restored like the
    test files."""
    report = graded(env, {"tests/__init__.py": NOOP_BODIES})
    assert_no_reward(report)
    assert "tests/__init__.py" in reset_notes(report)


def test_forged_output_and_junit_then_exit_0_is_tampering(env):
    """The patch's code, imported during collection, stops pytest's capture, prints a perfect
    `-rA` summary of every graded test, writes a matching junit report where `--junitxml` says,
    and leaves with `os._exit(0)`: log, junit and exit code all say resolved. The forger knows the
    graded tests but not the canaries, which are missing although their files "reported". The
    runtime guard refuses its object walk too; the canaries are checked here without it."""
    inst, cfg, store = env
    files = {"iniconf/__init__.py": appended(forger(inst.fail_to_pass + inst.pass_to_pass))}
    for guarded, says in ((False, "canary"), (True, "runtime guard: refused: gc.get_objects")):
        report = graded((inst, replace(cfg, runtime_guard=guarded), store), files)
        assert_no_reward(report)
        assert report.tampered and says in report.tamper_reason
        assert report.reference_resolved is not guarded   # SWE-bench alone would pay the forger


def test_killing_pytest_after_the_graded_tests_is_no_pass(env):
    """The fix is right, but the patch kills pytest at exit, after every test reported: the exit
    code (137) contradicts the log, so the exit_code guard fails the run (it did before, too). A
    killed run is no evidence of tampering: an honest fix can crash or run out of memory."""
    report = graded(env, {"iniconf/values.py": appended(
        "import atexit, os, signal\natexit.register(os.kill, os.getpid(), signal.SIGKILL)\n")}, fixed=True)
    assert_no_reward(report)
    assert report.reference_resolved and not report.tampered
    assert [g.split(":")[0] for g in report.guards] == ["exit_code"] and "exited 137" in report.guards[0]


def test_blocking_the_test_patch_is_no_escape_into_no_sample(store, tmp_path):
    """The test patch will add tests/unit/test_new.py; the patch puts a *file* named tests/unit
    there, so the test patch cannot apply. Counted as an infrastructure failure, that would turn a
    sure 0 into "no sample". The gold patch's test setup works, so it is this patch's doing: it is
    graded unresolved, with the reason."""
    inst = make_instance(store)
    repo = store / "acme__calc"
    test_new = "from calc.core import add\n\n\ndef test_new():\n    assert add(1, 1) == 2\n"
    inst = replace(inst, test_patch=inst.test_patch + diff_of(repo, {"tests/unit/test_new.py": test_new}),
                   fail_to_pass=inst.fail_to_pass + ("tests/unit/test_new.py::test_new",))
    blocker = diff_of(repo, {"tests/unit": "nothing to see\n"})
    report = grade(inst, blocker, sandbox_config(tmp_path), store)
    assert report.patch_applied and not report.infra_failure and not report.resolved, report.infra_reason
    assert "the test patch could not be applied beside the patch: graded unresolved" in report.notes
    assert report.f2p_failed == inst.fail_to_pass


# --------------------------------------------------------------------------- a real repository


@pytest.fixture(scope="module")
def pytest_9359(tmp_path_factory):
    """pytest-dev__pytest-9359 (the code under test is pytest itself), with its recipe as the
    install_config: the repo is installed, so the sandbox puts it first on PYTHONPATH."""
    import json

    from real_support import ENV_CACHE, REAL, extract_store
    from swe_rlvr.formats.swe_rebench import install_config_from_recipe
    from swe_rlvr.loaders import load_instances
    tmp = tmp_path_factory.mktemp("real")
    store = extract_store(tmp / "repos")
    recipe = next(r for r in map(json.loads, (REAL / "recipes.jsonl").read_text().splitlines())
                  if r["instance_id"] == "pytest-dev__pytest-9359")
    record = next(r for r in map(json.loads, (REAL / "instances.jsonl").read_text().splitlines())
                  if r["instance_id"] == recipe["instance_id"])
    (tmp / "one.jsonl").write_text(json.dumps({**record, "install_config": install_config_from_recipe(recipe)}))
    inst = load_instances(tmp / "one.jsonl").instances[0]
    return inst, sandbox_config(tmp, env_cache=str(ENV_CACHE), test_timeout_s=600, command_timeout_s=120), store


@pytest.mark.slow
@pytest.mark.parametrize("files, caught", [
    ({"sitecustomize.py": NOOP_BODIES}, "reset"),
    ({"src/_pytest/runner.py": lambda text: text + "\n" + NOOP_BODIES}, "tampered"),
], ids=["sitecustomize", "pytest-is-the-code-under-test"])
def test_real_repository_on_pythonpath(pytest_9359, files, caught):
    """Where the repo is installed, its root is on PYTHONPATH when Python starts, so a new
    sitecustomize.py there runs before pytest and empties the test bodies: it is reset. In the
    pytest repository the code under test *is* the test runner: a patch that makes pytest skip
    test bodies is a change to what the code does, kept, and the canaries catch what it does."""
    report = graded(pytest_9359, files)
    assert_no_reward(report)
    if caught == "reset":
        assert "sitecustomize.py" in reset_notes(report) and not report.tampered
    else:
        assert report.tampered and report.reference_resolved and reset_notes(report) == ""


def _fuzzy(patch: str) -> str:
    """`patch` with no `index` lines (no 3-way merge) and its first context line changed: `git
    apply` refuses it, `patch --fuzz` still applies it."""
    lines = [line for line in patch.splitlines() if not line.startswith("index ")]
    first = next(i for i, line in enumerate(lines) if line.startswith(" ") and i > 3)
    lines[first] = " # changed context"
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("target", [".git/info/attributes", "sub/../.git/config"])
def test_a_git_edit_cannot_slip_through_the_fuzzy_fallback(env, target):
    """The grader refused patches into `.git` by their `diff --git` headers only. A patch whose
    real fix `git apply` rejects (its context is off) falls through to `patch --fuzz`, which also
    reads plain `---`/`+++` headers: a second, header-less hunk then wrote `.git/info/attributes`
    (filter drivers run by the grader's own `git checkout`). Every header is read now, and an
    application that changed `.git` anyway fails."""
    inst, cfg, store = env
    evil = f"--- /dev/null\n+++ b/{target}\n@@ -0,0 +1 @@\n+* filter=evil\n"
    report = grade(inst, _fuzzy(inst.patch) + evil, cfg, store)
    assert report.apply_method == "" and not report.resolved, report.apply_method
    assert "Refused: the patch writes inside .git" in report.log
    honest = grade(inst, _fuzzy(inst.patch), cfg, store)      # the fuzzy fallback itself still works
    assert honest.apply_method == "patch-fuzz" and honest.resolved, honest.log[-500:]
