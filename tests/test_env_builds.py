"""Building an instance's environment: setuptools_scm's pretend versions, requirements read as
SWE-bench reads them, the Python that builds it (or the nearest one, or an infrastructure failure
naming the fix), and the install's generated files in working copies.

Hand-made checkouts and specs (expected values worked out in comments); the sandboxes are real
ones on the local backend. Which `EnvSpec` a record gets is tested in test_env_specs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox import open_sandbox
from sandbox.environments import EnvBuildError, env_key, install_variables
from sandbox.pythons import find_python, installed_versions, nearest_python
from swe_rlvr.env_specs import (
    SWEBENCH,
    distribution_name,
    pretend_version,
    pretend_version_vars,
    requirements_text,
    scm_pretend_env,
)
from swe_rlvr.instances import EnvSpec
from test_sandbox_support import git, make_instance, sandbox_config, store  # noqa: F401

RUNNING = f"{sys.version_info.major}.{sys.version_info.minor}"


# --------------------------------------------------------------------------- build-time pieces


def test_pretend_version_pads_to_three_parts():
    assert [pretend_version(v) for v in ("7.0", "2", "2.13", "1.2.3")] == \
        ["7.0.0", "2.0.0", "2.13.0", "1.2.3"]


def test_pretend_version_variable_names():
    prefix = "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_"
    assert pretend_version_vars("pytest") == (prefix + "PYTEST",)
    # PEP 503: runs of -_. become "-", then "-" -> "_"; setuptools_scm 6 only replaced "-"
    assert pretend_version_vars("zope.interface") == (prefix + "ZOPE_INTERFACE",
                                                      prefix + "ZOPE.INTERFACE")
    assert pretend_version_vars("Foo_Bar-baz") == (prefix + "FOO_BAR_BAZ",)


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_distribution_name_from_each_metadata_file(tmp_path):
    assert distribution_name(write_tree(tmp_path / "a", {
        "pyproject.toml": '[project]\nname = "astroid"\n'})) == "astroid"
    assert distribution_name(write_tree(tmp_path / "b", {
        "pyproject.toml": "[build-system]\n", "setup.cfg": "[metadata]\nname = pytest\n"})) == "pytest"
    assert distribution_name(write_tree(tmp_path / "c", {
        "setup.py": 'setup(\n    name="sqlfluff",\n)\n'})) == "sqlfluff"
    assert distribution_name(write_tree(tmp_path / "d", {"setup.py": "setup(name=NAME)\n"})) == ""


def test_scm_pretend_env_only_for_setuptools_scm_repos(tmp_path):
    scm = write_tree(tmp_path / "scm", {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools-scm[toml]>=6.2.3"]\n',
        "setup.cfg": "[metadata]\nname = pytest\n"})
    assert scm_pretend_env(scm, "7.0") == (("SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PYTEST", "7.0.0"),)
    assert scm_pretend_env(scm, "") == ()
    plain = write_tree(tmp_path / "plain", {"setup.py": 'setup(name="sqlfluff")\n'})
    assert scm_pretend_env(plain, "0.6") == ()
    assert scm_pretend_env(scm, "main") == scm_pretend_env(scm, "7.0-rc") == ()  # no release


def test_a_records_own_install_gets_the_pretend_version_too(tmp_path, store):
    """A user-written install_config (`pip install -e .`) on a tagless clone of a setuptools_scm
    project would install version 0.1.dev1, and pytest's own minversion check then stops the
    suite, so gold scores an infrastructure failure: every install gets the record's version."""
    scm = write_tree(tmp_path / "scm", {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools_scm"]\n',
        "setup.cfg": "[metadata]\nname = pytest\n"})
    var = (("SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PYTEST", "5.4.0"),)
    for origin in (SWEBENCH, "record"):
        inst = replace(make_instance(store, env=EnvSpec(python="3.9", install="pip install -e .",
                                                        origin=origin)), version="5.4")
        assert install_variables(inst, scm) == var, origin
    no_install = replace(make_instance(store, env=EnvSpec(python="3.9")), version="5.4")
    assert install_variables(no_install, scm) == ()


def test_pretend_version_is_part_of_the_env_key(store):
    inst = make_instance(store, env=EnvSpec(python="3.9", install="pip install -e .",
                                            origin=SWEBENCH))
    var = (("SETUPTOOLS_SCM_PRETEND_VERSION_FOR_CALC", "7.0.0"),)
    assert env_key(inst, "3.9", var) != env_key(inst, "3.9", ())
    assert env_key(inst, "3.9", var) != env_key(replace(inst, version="8.0"), "3.9",
                                                (("SETUPTOOLS_SCM_PRETEND_VERSION_FOR_CALC", "8.0.0"),))


def test_requirements_read_as_swebench_reads_them(tmp_path):
    checkout = write_tree(tmp_path, {
        "requirements_test.txt": "-r requirements_min.txt\n-e .\n# tools\npytest~=7.0\n"
                                 "types-pkg_resources==0.1.3\n",
        "requirements_min.txt": "astroid==2.12.2\n-e .[test]\n"})
    # first candidate missing -> the second. The include's text comes first ("astroid==2.12.2\n":
    # "-e .[test]" starts with "-e ." and goes), joined by "\n" to the file's own lines (the
    # "-e ." and "#" lines go), and swebench's clean_requirements swaps the yanked
    # types-pkg_resources for types-setuptools, dropping its pin.
    path, text = requirements_text(checkout, ("requirements-dev.txt", "requirements_test.txt"))
    assert path == "requirements_test.txt"
    assert text == "astroid==2.12.2\n\npytest~=7.0\ntypes-setuptools\n"
    assert requirements_text(checkout, ("nope.txt",)) is None


# --------------------------------------------------------------------------- Pythons


def test_nearest_python_same_major_closest_minor_older_on_tie():
    assert nearest_python("3.4", ["3.6", "3.9", "3.11"]) == "3.6"
    assert nearest_python("3.10", ["3.9", "3.11"]) == "3.9"     # |1| each: the older
    assert nearest_python("3.12", ["3.9", "3.11", "3.13"]) == "3.11"
    assert nearest_python("3.9", ["3.9", "3.10"]) == "3.9"
    assert nearest_python("2.6", ["3.9"]) is None              # never across majors
    assert nearest_python("3", ["3.9"]) is None


def test_find_python_skips_a_shim_that_fails(tmp_path, monkeypatch):
    """pyenv's shim for a version that is not selected exists on PATH and exits 127."""
    shims, root = tmp_path / "shims", tmp_path / "pyenv"
    (shims).mkdir()
    (shims / "python3.77").write_text("#!/bin/sh\necho 'pyenv: python3.77: command not found'\nexit 127\n")
    (shims / "python3.77").chmod(0o755)
    real = root / "versions" / "3.77.1" / "bin" / "python3.77"
    real.parent.mkdir(parents=True)
    real.symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{shims}:/usr/bin:/bin")
    monkeypatch.setenv("PYENV_ROOT", str(root))
    assert find_python("3.77") == str(real)
    assert "3.77" in installed_versions()


def test_a_missing_python_is_an_infra_failure_naming_it(store, tmp_path):
    inst = make_instance(store, env=EnvSpec(python="3.4", pip_packages=("pytest",)))
    with pytest.raises(EnvBuildError) as err:
        open_sandbox(inst, sandbox_config(tmp_path), store)
    for part in ("Python 3.4", "pyenv install 3.4", "sandbox.backend=docker",
                 "sandbox.python_fallback=true"):
        assert part in str(err.value)


def test_python_fallback_builds_with_the_nearest_and_says_so(store, tmp_path):
    nearest = nearest_python("3.4", installed_versions())
    if nearest is None:
        pytest.skip("no Python 3 interpreter besides the running one can build a venv here")
    inst = make_instance(store, env=EnvSpec(python="3.4"))
    with open_sandbox(inst, sandbox_config(tmp_path, python_fallback=True), store) as sb:
        notes = sb.env_notes
    assert len(notes) == 1 and "Python 3.4 is not installed" in notes[0] and nearest in notes[0]
    # keyed by the Python actually used. Checked on the host: the sandbox's command runner needs
    # Python >= 3.8, and here the nearest to 3.4 may be older (see the report)
    (env,) = [p for p in (tmp_path / "sandboxes" / "envs").glob(f"acme__calc-py{nearest}-*")
              if p.is_dir()]
    out = subprocess.run([env / "bin" / "python", "-c", "import sys; print('%d.%d' % "
                          "sys.version_info[:2])"], capture_output=True, text=True).stdout
    assert out.strip() == nearest


# --------------------------------------------------------------------------- generated files


INSTALL = ("mkdir -p calc.egg-info && echo 'Version: 7.0.0' > calc.egg-info/PKG-INFO && "
           "echo 'version = \"7.0.0\"' > calc/_version.py && echo junk > stray.txt && "
           "echo '# rewritten' >> README.md")


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["copy", "auto"])
def test_working_copy_gets_the_installs_ignored_files_and_diff_ignores_them(store, tmp_path, mode):
    """The install's ignored outputs (egg-info, _version.py) reach the tests; the stray untracked
    file and the rewritten tracked one would show in diff(), so they stay out."""
    make_instance(store, repo="acme/gen")
    write_tree(store / "acme__gen", {".gitignore": "*.egg-info/\ncalc/_version.py\n"})
    git(store / "acme__gen", "add", "-A")
    git(store / "acme__gen", "commit", "-qm", "ignore build outputs")
    inst = make_instance(store, repo="acme/gen", env=EnvSpec(python=RUNNING, install=INSTALL))
    with open_sandbox(inst, sandbox_config(tmp_path, working_copy=mode), store) as sb:
        assert sb.read_file("calc/_version.py") == 'version = "7.0.0"\n'
        assert sb.read_file("calc.egg-info/PKG-INFO") == "Version: 7.0.0\n"
        assert sb.execute("ls stray.txt; grep -c rewritten README.md").output.split()[-1] == "0"
        assert sb.diff() == ""
        sb.write_file("calc/core.py", sb.read_file("calc/core.py").replace("a - b", "a + b"))
        sb.execute("echo 'version = \"9\"' > calc/_version.py")  # an ignored file: never a change
        assert re.findall(r"^diff --git a/(\S+)", sb.diff(), re.MULTILINE) == ["calc/core.py"]


def test_pre_install_runs_as_one_script_without_apt_lines(store, tmp_path, caplog):
    """SWE-bench's matplotlib specs set a variable on one pre_install line and read it on the next."""
    inst = make_instance(store, env=EnvSpec(python=RUNNING, pre_install=(
        "apt-get install -y surely-not-a-package", 'V="7.0.0"', 'echo "$V" > marker.txt')))
    with caplog.at_level("WARNING", logger="sandbox.environments"):
        with open_sandbox(inst, sandbox_config(tmp_path), store):
            pass
    (marker,) = (tmp_path / "sandboxes" / "envs").glob("acme__calc-*/src/marker.txt")
    assert marker.read_text() == "7.0.0\n"
    assert "skipped `apt-get install -y surely-not-a-package`" in caplog.text
