"""Environments of plain SWE-bench records from SWE-bench's own specs, and recipes as
install_configs: which `EnvSpec` a record gets when it loads.

The tests use hand-made specs and records (expected values worked out in comments) and swebench's
real tables. How such an environment is then built (pretend versions, requirements, missing
Pythons, the install's generated files) is tested in test_env_builds; real environments for the
real SWE-bench Lite dev set, in test_real_envs.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from records_support import swe_bench_record, write_jsonl
from sandbox import open_sandbox
from sandbox.environments import EnvBuildError, satisfied_by_running
from swe_rlvr.env_specs import SWEBENCH, env_from_spec, swebench_env
from swe_rlvr.formats.swe_rebench import install_config_from_recipe
from swe_rlvr.instances import DEFAULT_TEST_CMD, EnvSpec
from swe_rlvr.loaders import load_instances
from test_sandbox_support import make_instance, sandbox_config, store  # noqa: F401

# --------------------------------------------------------------------------- spec -> EnvSpec


def test_a_requirements_spec_maps_field_by_field():
    spec = {"python": "3.9", "packages": "requirements.txt", "pip_packages": ["pytest==7.1"],
            "pre_install": ["apt-get install -y libxml2", "sed -i 's/a/b/' setup.cfg"],
            "install": "python -m pip install -e .", "test_cmd": "pytest -rA", "nano_cpus": 2}
    env = env_from_spec(spec, "o/r", "1.0", ("requirements_test.txt", "requirements.txt"),
                        eval_script="#!/bin/bash\n")
    assert env == EnvSpec(python="3.9", reqs_path=("requirements_test.txt", "requirements.txt"),
                          pip_packages=("pytest==7.1",),
                          pre_install=("apt-get install -y libxml2", "sed -i 's/a/b/' setup.cfg"),
                          install="python -m pip install -e .", test_cmd="pytest -rA",
                          eval_script="#!/bin/bash\n", origin=SWEBENCH, build_error="")


def test_other_packages_strings_become_pip_requirements_ahead_of_pip_packages():
    # scikit-learn 1.3's conda packages, shell-quoted in the spec: shlex-split, then pip_packages
    spec = {"python": "3.9", "packages": "'numpy==1.19.2' 'pandas<2.0.0' pytest",
            "pip_packages": ["joblib"], "test_cmd": ["make a", "make b"]}
    env = env_from_spec(spec, "o/r", "1.3")
    assert env.pip_packages == ("numpy==1.19.2", "pandas<2.0.0", "pytest", "joblib")
    assert env.reqs_path == () and env.install == "" and env.build_error == ""
    assert env.test_cmd == "make a && make b"


def test_a_conda_spec_is_a_build_error_naming_the_fix():
    env = env_from_spec({"python": "3.9", "packages": "environment.yml"}, "o/r", "2.0",
                        image="swebench/sweb.eval.x86_64.o_1776_r-1:latest")
    assert "environment.yml" in env.build_error and "conda" in env.build_error
    assert "sandbox.backend=docker" in env.build_error
    assert "swebench/sweb.eval.x86_64.o_1776_r-1:latest" in env.build_error


def test_a_spec_without_python_is_a_build_error():
    env = env_from_spec({"install": "npm ci", "test_cmd": "npm test"}, "chartjs/Chart.js", "4.0")
    assert "chartjs/Chart.js" in env.build_error and "not a Python environment" in env.build_error
    assert env.test_cmd == DEFAULT_TEST_CMD


def test_real_specs_come_from_swebench_unchanged():
    """A differential check against swebench's own table, not a copy of it."""
    from swebench.harness.constants import MAP_REPO_TO_REQS_PATHS, MAP_REPO_VERSION_TO_SPECS

    for repo, version in (("pytest-dev/pytest", "7.0"), ("pylint-dev/pylint", "2.15"),
                          ("pydicom/pydicom", "2.1"), ("sqlfluff/sqlfluff", "0.6")):
        spec, env = MAP_REPO_VERSION_TO_SPECS[repo][version], swebench_env(repo, version)
        assert (env.python, env.install, env.test_cmd) == (spec["python"], spec["install"],
                                                           spec["test_cmd"])
        conda = () if spec.get("packages") in (None, "requirements.txt") else (spec["packages"],)
        assert env.pip_packages == conda + tuple(spec.get("pip_packages", ()))
        if spec.get("packages") == "requirements.txt":
            assert env.reqs_path == tuple(MAP_REPO_TO_REQS_PATHS[repo])
        assert env.origin == SWEBENCH and not env.build_error


def test_no_spec_names_repo_version_and_fix():
    env = swebench_env("oemof/tespy", "0.7", image="img:1")
    for part in ("oemof/tespy", "'0.7'", "install_config", "sandbox.backend=docker", "img:1"):
        assert part in env.build_error
    assert "no version" in swebench_env("pytest-dev/pytest", "").build_error


# --------------------------------------------------------------------------- loading


def test_a_plain_record_without_spec_loads_and_fails_at_sandbox_time(store, tmp_path):
    """It used to run its tests in swe-rlvr's own .venv (default EnvSpec) and fail silently."""
    (inst,) = load_instances(write_jsonl(tmp_path / "p.jsonl", [swe_bench_record()])).instances
    assert inst.env.build_error and not satisfied_by_running(inst.env)
    local = replace(make_instance(store), env=inst.env)
    with pytest.raises(EnvBuildError, match=r"oemof/tespy with version '0\.7'.*install_config"):
        open_sandbox(local, sandbox_config(tmp_path), store)


def test_install_config_wins_over_the_spec(tmp_path):
    record = swe_bench_record(repo="pytest-dev/pytest", version="7.0",
                              install_config={"python": "3.11", "install": "pip install -e ."})
    (inst,) = load_instances(write_jsonl(tmp_path / "r.jsonl", [record])).instances
    assert (inst.env.python, inst.env.origin, inst.env.build_error) == ("3.11", "", "")
    (plain,) = load_instances(write_jsonl(tmp_path / "p.jsonl", [
        swe_bench_record(repo="pytest-dev/pytest", version="7.0")])).instances
    assert (plain.env.python, plain.env.origin) == ("3.9", SWEBENCH)


def test_builtin_suite_is_unaffected():
    envs = {i.env for i in load_instances("builtin").instances}
    assert {(e.origin, e.build_error, e.python) for e in envs} == {("", "", "3.11")}


def _imports_swebench(path: Path) -> tuple[bool, float]:
    code = ("import sys, time; from swe_rlvr.loaders import load_instances; t = time.time(); "
            f"load_instances({str(path)!r}); print('swebench' in sys.modules, time.time() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.split()
    return out[0] == "True", float(out[1])


def test_swebench_is_imported_only_for_plain_records(tmp_path):
    """The import costs seconds; a SWE-rebench file (here: the recipes) never pays it."""
    rebench = write_jsonl(tmp_path / "r.jsonl", [swe_bench_record(
        install_config={"python": "3.11", "install": "pip install -e ."})])
    plain = write_jsonl(tmp_path / "p.jsonl", [swe_bench_record()])
    (rebench_imports, rebench_s), (plain_imports, _) = _imports_swebench(rebench), _imports_swebench(plain)
    assert not rebench_imports and plain_imports
    assert rebench_s < 1.0


# --------------------------------------------------------------------------- recipes


def test_recipe_becomes_an_install_config():
    recipe = {"instance_id": "pytest-dev__pytest-9359", "python": "3.11",
              "pinned_requirements": ["attrs==21.2.0", "py==1.11.0"],
              "test_cmd": "pytest -rA testing/code/test_source.py", "install_cmd": "pip install -e .",
              "install_env": {"SETUPTOOLS_SCM_PRETEND_VERSION": "7.0.0.dev332+ge2ee3144e"}}
    assert install_config_from_recipe(recipe) == {
        "python": "3.11", "pip_packages": ["attrs==21.2.0", "py==1.11.0"],
        # '+' and '.' are shell-safe, so shlex.quote leaves the value bare
        "install": "SETUPTOOLS_SCM_PRETEND_VERSION=7.0.0.dev332+ge2ee3144e pip install -e .",
        "test_cmd": "pytest -rA testing/code/test_source.py"}
    spaced = install_config_from_recipe({**recipe, "install_env": {"B": "x y", "A": "1"}})
    assert spaced["install"] == "A=1 B='x y' pip install -e ."  # sorted, quoted
    assert install_config_from_recipe({**recipe, "install_env": {}})["install"] == "pip install -e ."


def test_a_bad_recipe_names_the_field():
    with pytest.raises(ValueError, match="'python'"):
        install_config_from_recipe({"install_cmd": "pip install .", "test_cmd": "pytest"})
    with pytest.raises(ValueError, match="'install_env'"):
        install_config_from_recipe({"python": "3.11", "install_cmd": "x", "test_cmd": "y",
                                    "install_env": {"A B": "1"}})
