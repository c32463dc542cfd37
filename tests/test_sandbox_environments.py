"""Per-instance environments: the running interpreter when it suffices, a cached venv otherwise."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

from sandbox import open_sandbox
from sandbox.environments import EnvBuildError, satisfied_by_running
from swe_rlvr.instances import EnvSpec
from test_sandbox_support import make_instance, sandbox_config, store  # noqa: F401

RUNNING = f"{sys.version_info.major}.{sys.version_info.minor}"


def test_fast_path_reuses_the_running_interpreter(store, tmp_path):
    assert satisfied_by_running(EnvSpec(python=RUNNING, pip_packages=("pytest",)))
    assert not satisfied_by_running(EnvSpec(python=RUNNING, pip_packages=("surely-not-installed-pkg",)))
    assert not satisfied_by_running(EnvSpec(python=RUNNING, install="pip install -e ."))
    assert not satisfied_by_running(EnvSpec(python="2.7"))
    with open_sandbox(make_instance(store), sandbox_config(tmp_path), store) as sb:
        out = sb.execute("python -c 'import sys, pytest; print(sys.prefix)'").output.strip()
    assert out == sys.prefix


def test_pytest_in_the_running_interpreter_loads_only_the_specs_plugins(store, tmp_path):
    """The running interpreter holds this project's pytest plugins (xdist, pytest-timeout); a
    sandbox on it loads none that the instance did not ask for, and one it asks for is loaded."""
    from importlib import metadata

    from sandbox.environments import plugins_of
    installed = {d.metadata["Name"].lower() for d in metadata.distributions()}
    if not {"pytest-xdist", "pytest-timeout"} <= installed:
        pytest.skip("needs pytest-xdist and pytest-timeout installed (make test installs them)")
    assert plugins_of(("pytest",)) == ()
    assert plugins_of(("pytest", "pytest-timeout>=2")) == ("pytest_timeout",)
    probe = "python -m pytest --co -q -p no:cacheprovider tests/test_core.py"
    plain = make_instance(store)
    timed = replace(plain, env=EnvSpec(pip_packages=("pytest", "pytest-timeout")))
    for instance, timeout_loaded in ((plain, False), (timed, True)):
        with open_sandbox(instance, sandbox_config(tmp_path), store) as sb:
            assert sb.execute(probe).exit_code == 0
            assert (sb.execute(f"{probe} --timeout=5").exit_code == 0) == timeout_loaded
            assert sb.execute(f"{probe} -n 0").exit_code != 0     # xdist's option: not loaded


def test_a_planted_module_named_like_a_plugin_is_not_imported_by_pytest(store, tmp_path):
    """A policy's file named like an installed plugin's module (xdist's, first on sys.path under
    `python -m pytest`) is not imported: autoloading is off for a pytest-only spec."""
    from importlib import metadata
    if "pytest-xdist" not in {d.metadata["Name"].lower() for d in metadata.distributions()}:
        pytest.skip("needs pytest-xdist installed (make test installs it)")
    with open_sandbox(make_instance(store), sandbox_config(tmp_path), store) as sb:
        sb.execute("mkdir -p xdist && : > xdist/__init__.py && "
                   "echo 'open(\"/tmp/planted\", \"w\").close()' > xdist/plugin.py")
        sb.execute("python -m pytest -q -p no:cacheprovider tests/test_core.py")
        assert sb.execute("test -e /tmp/planted").exit_code != 0


def test_missing_python_version_names_it_and_how_to_install(store, tmp_path):
    inst = make_instance(store, env=EnvSpec(python="2.1"))
    with pytest.raises(EnvBuildError, match=r"Python 2\.1 is needed.*install Python 2\.1"):
        open_sandbox(inst, sandbox_config(tmp_path), store)


def other_python() -> str:
    for version in ("3.12", "3.10", "3.13", "3.9"):
        if version != RUNNING and shutil.which(f"python{version}"):
            return version
    pytest.skip("no second Python version on PATH to build a virtualenv with")


def test_venv_is_built_once_and_first_on_path(store, tmp_path):
    """A spec asking for another Python gets a virtualenv built once and cached by spec hash."""
    version = other_python()
    inst = make_instance(store, env=EnvSpec(python=version))
    cfg = sandbox_config(tmp_path)
    try:
        with open_sandbox(inst, cfg, store) as sb:
            out = sb.execute("python -c 'import sys; print(sys.version_info[:2])'").output
    except EnvBuildError as exc:
        pytest.skip(f"python{version} cannot build a venv here: {str(exc)[:200]}")
    assert out.strip() == str(tuple(int(x) for x in version.split(".")))
    envs = [p for p in (tmp_path / "sandboxes" / "envs").glob("acme__calc-*") if p.is_dir()]
    assert len(envs) == 1 and (envs[0] / ".ready").exists()
    with open_sandbox(replace(inst, problem_statement="other"), cfg, store):
        pass
    assert [p for p in (tmp_path / "sandboxes" / "envs").glob("acme__calc-*") if p.is_dir()] == envs


def test_an_environment_of_an_old_python_still_runs_commands(store, tmp_path):
    """SWE-bench's specs ask for Python 3.5 and 3.6 (older Django, astropy, pydicom). The
    sandbox's command runner needs 3.8+, so it must not be the environment's interpreter; the
    commands themselves still get the old Python first on PATH."""
    from sandbox.pythons import find_python
    if not find_python("3.6"):
        pytest.skip("no Python 3.6 here to build an old environment with")
    inst = make_instance(store, env=EnvSpec(python="3.6"))
    with open_sandbox(inst, sandbox_config(tmp_path), store) as sb:
        result = sb.execute("python -c 'import sys; print(sys.version_info[:2])'")
    assert result.exit_code == 0 and result.output.strip() == "(3, 6)", result.output


def _wheel(folder, name: str, version: str, module_source: str):
    """A pure-Python wheel of one module, written by hand (no build backend needed)."""
    import base64
    import hashlib
    import zipfile
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}.py": module_source,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    def digest(text: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record = [f"{path},sha256={digest(text)},{len(text.encode())}" for path, text in files.items()]
    record.append(f"{dist}/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, text in {**files, f"{dist}/RECORD": "\n".join(record) + "\n"}.items():
            whl.writestr(path, text)


@pytest.mark.e2e
def test_environment_builds_use_the_hosts_pip_settings(store, tmp_path, monkeypatch):
    """A cluster without PyPI points pip at a wheel folder (or its mirror) through PIP_*; the
    build must see those settings. The package exists only in the folder, so a build that
    ignored them would look for it on the index and fail."""
    _wheel(tmp_path / "wheelhouse", "swe_rlvr_probe", "1.0", "VALUE = 42\n")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheelhouse"))
    inst = make_instance(store, env=EnvSpec(python=RUNNING, pip_packages=("swe_rlvr_probe==1.0",)))
    with open_sandbox(inst, sandbox_config(tmp_path), store) as sb:
        out = sb.execute("python -c 'import swe_rlvr_probe; print(swe_rlvr_probe.VALUE)'").output
    assert out.strip() == "42"


def system_python_outside_the_tools() -> str:
    """A `/usr/bin/pythonX.Y` that runs and that the jail's fixed tool set does not name."""
    import glob

    from sandbox import view
    for path in sorted(glob.glob("/usr/bin/python3.[0-9]*")):
        name = path.rsplit("/", 1)[1]
        if name.replace(".", "").replace("python", "").isdigit() and name not in view.TOOLS:
            if subprocess.run([path, "-c", "import venv"], capture_output=True).returncode == 0:
                return name.removeprefix("python")
    pytest.skip("no system Python under /usr/bin to build an environment with")


@pytest.mark.parametrize("isolation", ["bwrap", "unshare"])
def test_an_environment_built_from_a_system_python_runs_in_the_jail(store, tmp_path, monkeypatch,
                                                                     isolation):
    """A GPU image's `python3` is a venv over an interpreter in /usr/bin that the jail's tool
    set does not name, so the instance environments built from it link `python` there. The jail
    shows only a fixed tool set of /usr/bin, so that link dangled and every test command failed
    with "python: command not found". The environment's interpreter must be shown."""
    from sandbox import isolation as isolation_
    if not isolation_.available(isolation):
        pytest.skip(f"isolation {isolation} is not available here")
    version = system_python_outside_the_tools()
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # find_python picks /usr/bin/python<version>
    inst = make_instance(store, env=EnvSpec(python=version, pre_install=("true",)))
    cfg = sandbox_config(tmp_path, isolation=isolation)
    with open_sandbox(inst, cfg, store) as sb:
        result = sb.execute("python -c 'import sys; print(sys.version_info[:2], sys.prefix)'")
        shown = set(sb.execute("ls -A /usr/bin").output.split())
        write = sb.execute(f"echo x > /usr/bin/python{version} && echo wrote")
    assert result.exit_code == 0, result.output
    assert result.output.split(")")[0] + ")" == str(tuple(int(x) for x in version.split(".")))
    assert "/envs/" in result.output
    from sandbox import view
    assert shown - set(view.TOOLS) == {f"python{version}"}      # that one file, nothing else
    assert "wrote" not in write.output                            # and read-only
