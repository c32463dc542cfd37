"""Grading on real SWE-bench Lite data (`../shared/data/real/`), against SWE-bench itself.

- The differential test (fast): the recorded gold and empty test logs of the ten real instances
  (tests/data/real_logs, made by the data set's own recipes, without this project) are graded by
  `grade_run` and by SWE-bench's `get_eval_report` on the same log. Per-test statuses of every
  FAIL_TO_PASS / PASS_TO_PASS test and the verdicts must be equal, except where a named guard fired.
- End to end (slow, needs PyPI): `swe-rlvr grade` builds each instance's environment, applies the
  patch and runs the tests in the local sandbox. With the recipes as `install_config`, gold resolves
  all ten and the empty patch none; as plain records, environments come from SWE-bench's specs.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from real_support import ENV_CACHE, REAL, extract_store
from sandbox.grading import grade_run
from sandbox.logparse import OK
from sandbox.suite_run import SuiteRun

LOGS = Path(__file__).parent / "data" / "real_logs"


def real_instances():
    if not (REAL / "instances.jsonl").is_file():
        pytest.skip(f"the real SWE-bench data set is not beside the project ({REAL})")
    from swe_rlvr.loaders import load_instances
    return load_instances(REAL / "instances.jsonl", format="swe-bench").instances


def recorded(instance_id: str, kind: str) -> SuiteRun:
    index = json.loads((LOGS / "index.json").read_text())
    log = gzip.decompress((LOGS / f"{instance_id}.{kind}.log.gz").read_bytes()).decode()
    return SuiteRun(log=log, exit_code=index[instance_id]["exit_code"][kind])


def swebench_verdict(instance, log: str, tmp_path: Path) -> tuple[bool, dict]:
    """SWE-bench's own report for `log`, as its harness computes it from a log file."""
    from swebench.harness.grading import get_eval_report, get_logs_eval
    spec = SimpleNamespace(instance_id=instance.instance_id, repo=instance.repo, version=instance.version,
                           FAIL_TO_PASS=list(instance.fail_to_pass), PASS_TO_PASS=list(instance.pass_to_pass))
    path = tmp_path / f"{instance.instance_id}.log"
    path.write_text(f">>>>> Start Test Output\n{log}\n>>>>> End Test Output\n")
    report = get_eval_report(spec, {"instance_id": instance.instance_id, "model_patch": "x",
                                    "model_name_or_path": "m"}, str(path), include_tests_status=True)
    return report[instance.instance_id]["resolved"], get_logs_eval(spec, str(path))[0]


@pytest.mark.parametrize("kind", ["gold", "empty"])
def test_verdicts_and_statuses_equal_swebench_on_real_logs(kind, tmp_path):
    guarded = []
    for inst in real_instances():
        run = recorded(inst.instance_id, kind)
        ours = grade_run(inst, run, junit=False)
        theirs, status_map = swebench_verdict(inst, run.log, tmp_path)
        assert ours.reference_resolved == theirs, inst.instance_id
        flipped = {t for t in inst.fail_to_pass + inst.pass_to_pass
                   if ours.tests_status.get(t) != status_map.get(t)}
        if flipped or ours.resolved != theirs:
            assert ours.guards, (inst.instance_id, sorted(flipped)[:5])   # a difference is named
            guarded.append(inst.instance_id)
        assert ours.resolved == (kind == "gold"), (inst.instance_id, ours.guards, ours.f2p_failed,
                                                   ours.p2p_failed[:5])
    assert guarded == [], guarded   # on these honest runs no guard has anything to add


def test_real_logs_hold_the_hard_cases():
    """The recorded logs show what the hand-made logs of test_grading_logparse imitate."""
    insts = {i.instance_id: i for i in real_instances()}
    pytest_11148 = recorded("pytest-dev__pytest-11148", "gold")
    assert "\nERROR: file or directory not found: asd" in pytest_11148.log   # captured, not a result
    assert pytest_11148.exit_code == 0 and grade_run(insts["pytest-dev__pytest-11148"], pytest_11148,
                                                      junit=False).resolved
    astroid = insts["pylint-dev__astroid-1866"]
    assert astroid.fail_to_pass[0].endswith("[\\n")                     # an id cut at a space
    statuses = grade_run(astroid, recorded(astroid.instance_id, "gold"), junit=False).tests_status
    assert statuses[astroid.fail_to_pass[0]] in OK


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def repo_store(tmp_path_factory):
    return extract_store(tmp_path_factory.mktemp("real-repos"))


def grade_cli(tmp_path: Path, store: Path, instances: Path, predictions: str, *sets: str) -> list[dict]:
    """`swe-rlvr grade` on the files; its SWE-bench report.json entries and validations rows."""
    import pyarrow.parquet as pq

    from swe_rlvr.cli import main
    out = tmp_path / "out"
    args = ["grade", "--instances", str(instances), "--predictions", predictions, "--repos", str(store),
            "--workers", "2", "--out", str(out), "--run-id", "real",
            "--set", f"sandbox.workdir={tmp_path / 'sandboxes'}",
            "--set", f"sandbox.env_cache={ENV_CACHE}", *[a for s in sets for a in ("--set", s)]]
    assert main(args) == 0
    return pq.read_table(out / "real" / "validations.parquet").to_pylist()


@pytest.mark.e2e
class TestRecipes:  # a class: its own scope for loadscope, so the three run on both workers
    def test_recipes_as_install_config_gold_resolves_all_and_empty_none(self, repo_store, tmp_path):
        from swe_rlvr.formats.swe_rebench import install_config_from_recipe
        recipes = {r["instance_id"]: r for r in map(json.loads, (REAL / "recipes.jsonl").read_text().splitlines())}
        records = [json.loads(line) for line in (REAL / "instances.jsonl").read_text().splitlines()]
        rebench = tmp_path / "rebench.jsonl"
        rebench.write_text("".join(json.dumps({**r, "install_config": install_config_from_recipe(
            recipes[r["instance_id"]])}) + "\n" for r in records))
        empty = tmp_path / "empty.jsonl"
        empty.write_text("".join(json.dumps({"instance_id": r["instance_id"], "model_name_or_path": "empty",
                                             "model_patch": ""}) + "\n" for r in records))
        gold = grade_cli(tmp_path, repo_store, rebench, "gold")
        assert {r["instance_id"] for r in gold if r["resolved"]} == set(recipes), [
            (r["instance_id"], r["infra_reason"][:300], r["guards"], r["f2p_failed"], r["p2p_failed"][:3])
            for r in gold if not r["resolved"]]
        assert all(r["reference_resolved"] and not r["guards"] for r in gold)
        nothing = grade_cli(tmp_path, repo_store, rebench, str(empty))
        assert [(r["instance_id"], r["infra_failure"]) for r in nothing if r["resolved"] or r["infra_failure"]] == []
        assert all(r["f2p_failed"] for r in nothing)


@pytest.mark.e2e
class TestSwebenchSpecs:  # a class: its own scope for loadscope, so the three run on both workers
    def test_plain_records_build_from_swebench_specs_and_resolve_or_name_why(self, repo_store, tmp_path, capsys):
        """No install_config: each environment comes from SWE-bench's spec for its repo and version.
        Every instance either resolves or is an infrastructure failure that names its reason."""
        gold = grade_cli(tmp_path, repo_store, REAL / "instances.jsonl", "gold")
        print(capsys.readouterr().out)
        for row in gold:
            assert row["resolved"] or (row["infra_failure"] and row["infra_reason"]), (
                row["instance_id"], row["guards"], row["f2p_failed"], row["p2p_failed"][:3])


@pytest.fixture
def without_python39(monkeypatch, tmp_path):
    """A machine whose only Python is this one (3.11): pyenv's other versions and shims hidden."""
    import os
    import sys

    from sandbox.pythons import find_python
    home = Path(sys.executable).resolve().parent.parent
    fake = tmp_path / "pyenv" / "versions"
    fake.mkdir(parents=True)
    (fake / home.name).symlink_to(home)
    monkeypatch.setenv("PYENV_ROOT", str(fake.parent))
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                               if ".pyenv" not in p))
    if find_python("3.9"):
        pytest.skip("Python 3.9 is on this machine's system PATH; it cannot be hidden here")


@pytest.mark.e2e
class TestWithoutTheirPython:  # a class: its own scope for loadscope, so the three run on both workers
    def test_plain_records_without_their_python_name_it_or_fall_back(self, repo_store, tmp_path, capsys,
                                                                      without_python39):
        """SWE-bench's specs ask for Python 3.9. Without it every instance is an infrastructure failure
        that names the version and the fix; with `sandbox.python_fallback=true` each builds on the
        nearest Python (3.11 here), carries the warning, and resolves or says why not."""
        missing = grade_cli(tmp_path, repo_store, REAL / "instances.jsonl", "gold")
        for row in missing:
            assert row["infra_failure"] and "Python 3.9 is needed" in row["infra_reason"], row["instance_id"]
            assert "python_fallback" in row["infra_reason"] and "docker" in row["infra_reason"]
        fallback = grade_cli(tmp_path, repo_store, REAL / "instances.jsonl", "gold", "sandbox.python_fallback=true")
        print(capsys.readouterr().out)
        for row in fallback:
            assert row["resolved"] or (row["infra_failure"] and row["infra_reason"]), row["instance_id"]
            if not row["infra_failure"]:
                assert "built with Python 3.11 instead" in row["log_excerpt"], row["instance_id"]
