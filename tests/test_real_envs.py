"""Real environments for the real SWE-bench Lite dev set (../shared/data/real), built from the
recipes and from SWE-bench's specs, with each instance's gold patch run against its tests.

The build tests are `slow`: they need PyPI, and Python 3.9 for the spec path. Without the dev set
beside the checkout every test here skips and says so. `real_store` and `real_cfg` are
module-scoped: the repositories are extracted once, and the environments share one cache.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace

import pytest

from real_support import ENV_CACHE, REAL, extract_store
from records_support import write_jsonl
from sandbox import open_sandbox
from sandbox.environments import EnvBuildError
from sandbox.pythons import find_python
from swe_rlvr.env_specs import SWEBENCH
from swe_rlvr.formats.swe_rebench import install_config_from_recipe
from swe_rlvr.loaders import load_instances
from test_sandbox_support import sandbox_config

# --------------------------------------------------------------------------- real data (slow)


needs_real = pytest.mark.skipif(not (REAL / "instances.jsonl").exists(),
                                reason=f"real dev set {REAL} is not beside this checkout")


def real_records() -> list[dict]:
    return [json.loads(line) for line in (REAL / "instances.jsonl").read_text().splitlines()]


def recipes() -> dict[str, dict]:
    rows = [json.loads(line) for line in (REAL / "recipes.jsonl").read_text().splitlines()]
    return {row["instance_id"]: row for row in rows}


REAL_IDS = ["pytest-dev__pytest-9359", "pytest-dev__pytest-11148", "pylint-dev__astroid-1866",
            "pylint-dev__pylint-7114", "pylint-dev__pylint-7228", "sqlfluff__sqlfluff-1517",
            "sqlfluff__sqlfluff-1733", "sqlfluff__sqlfluff-1763", "pydicom__pydicom-1413",
            "pydicom__pydicom-1256"]


@pytest.fixture(scope="module")
def real_store(tmp_path_factory):
    return extract_store(tmp_path_factory.mktemp("real-store"))


@pytest.fixture(scope="module")
def real_cfg(tmp_path_factory):
    root = tmp_path_factory.mktemp("real-envs")
    return sandbox_config(root, env_cache=str(ENV_CACHE), command_timeout_s=600,
                          memory_mb=8192, max_procs=512)


def passed_ids(log: str) -> set[str]:
    """Ids on PASSED/XFAIL lines of pytest's -rA summary."""
    return {m.group(2) for m in re.finditer(r"^(PASSED|XFAIL) (\S+)", log, re.MULTILINE)}


def passes(test_id: str, passed: set[str]) -> bool:
    """A truncated id (README hard case A) stands for the tests whose ids it starts."""
    return test_id in passed or any(p.startswith(test_id) for p in passed)


def run_gold(sb, test_cmd: str) -> str:
    """Apply the test patch and the gold patch, run the tests, return the log."""
    sb.write_file(".git/test.patch", sb.instance.test_patch)
    sb.write_file(".git/gold.patch", sb.instance.patch)
    applied = sb.execute("git apply .git/test.patch && git apply .git/gold.patch && echo OK")
    assert applied.output.strip().endswith("OK"), applied.output
    return sb.execute(test_cmd, timeout=600).output


@pytest.mark.slow
@needs_real
@pytest.mark.parametrize("instance_id", REAL_IDS)
def test_recipe_env_builds_and_gold_passes_fail_to_pass(instance_id, real_store, real_cfg, tmp_path):
    recipe = recipes()[instance_id]
    record = next(r for r in real_records() if r["instance_id"] == instance_id)
    record["install_config"] = install_config_from_recipe(recipe)
    (inst,) = load_instances(write_jsonl(tmp_path / "r.jsonl", [record])).instances
    started = time.time()
    with open_sandbox(inst, real_cfg, real_store) as sb:
        print(f"{instance_id}: environment ready in {time.time() - started:.0f} s")
        # ensurepip's pip, never upgraded: it still falls back to `setup.py develop` (case D)
        bundled, pip = sb.execute("python -c 'import ensurepip; print(ensurepip.version())'; "
                                  "python -m pip --version").output.splitlines()[:2]
        assert pip.startswith(f"pip {bundled} "), (bundled, pip)
        log = run_gold(sb, recipe["test_cmd"])
    assert "minversion" not in log, log[-2000:]
    passed = passed_ids(log)
    assert [t for t in inst.fail_to_pass if not passes(t, passed)] == [], log[-3000:]


@pytest.mark.slow
@needs_real
@pytest.mark.parametrize("instance_id", REAL_IDS)
def test_spec_env_on_python_39(instance_id, real_store, real_cfg, tmp_path):
    """The plain record, SWE-bench's spec, Python 3.9. Every one of the ten builds and its gold
    patch passes FAIL_TO_PASS. Unpinned specs drift, though: pydicom 2.1's bare `pytest` now
    resolves to pytest 8, which dropped nose-style `setup()`, so two of pydicom-1413's
    PASS_TO_PASS tests fail (the recipes pin pytest and resolve fully)."""
    if find_python("3.9") is None:
        pytest.skip("Python 3.9 is not installed (SWE-bench's specs ask for it)")
    record = next(r for r in real_records() if r["instance_id"] == instance_id)
    (inst,) = load_instances(write_jsonl(tmp_path / "p.jsonl", [record])).instances
    assert inst.env.python == "3.9" and inst.env.origin == SWEBENCH
    started = time.time()
    with open_sandbox(inst, real_cfg, real_store) as sb:
        print(f"{instance_id}: environment ready in {time.time() - started:.0f} s")
        assert sb.env_notes == ()
        log = run_gold(sb, f"{inst.env.test_cmd} {' '.join(inst.test_files())}")
    assert "minversion" not in log, log[-2000:]
    passed = passed_ids(log)
    assert [t for t in inst.fail_to_pass if not passes(t, passed)] == [], log[-3000:]


@needs_real
def test_a_real_record_on_a_missing_python_is_an_infra_failure(real_store, tmp_path):
    record = next(r for r in real_records() if r["instance_id"] == "pytest-dev__pytest-9359")
    (inst,) = load_instances(write_jsonl(tmp_path / "p.jsonl", [record])).instances
    inst = replace(inst, env=replace(inst.env, python="3.4"))
    with pytest.raises(EnvBuildError, match=r"Python 3\.4 is needed .*pyenv install 3\.4"):
        open_sandbox(inst, sandbox_config(tmp_path), real_store)
