"""tests/durations.py: the longest test scopes go to the workers first, from a record a run writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import durations


def test_scope_is_what_loadscope_groups_by():
    assert durations.scope_of("tests/test_a.py::test_x[1-2]") == "tests/test_a.py"
    assert durations.scope_of("tests/test_a.py::TestK::test_y") == "tests/test_a.py::TestK"


def test_longest_recorded_scope_first_and_an_unrecorded_one_before_all():
    seconds = {"tests/a.py": 5.0, "tests/b.py": 300.0, "tests/c.py::K": 40.0}
    ids = ["tests/a.py::t1", "tests/b.py::t1", "tests/c.py::K::t", "tests/new.py::t", "tests/a.py::t2",
           "tests/b.py::t2"]
    order = [ids[i] for i in durations.ordered(ids, seconds)]
    assert order == ["tests/new.py::t", "tests/b.py::t1", "tests/b.py::t2", "tests/c.py::K::t",
                     "tests/a.py::t1", "tests/a.py::t2"]


def test_without_a_record_most_tests_first_and_each_scope_stays_together():
    ids = ["tests/a.py::t1", "tests/b.py::t1", "tests/c.py::t", "tests/a.py::t2", "tests/b.py::t2",
           "tests/b.py::t3"]
    order = [ids[i] for i in durations.ordered(ids, {})]
    assert order == ["tests/b.py::t1", "tests/b.py::t2", "tests/b.py::t3", "tests/a.py::t1",
                     "tests/a.py::t2", "tests/c.py::t"]


def test_a_run_overwrites_its_stages_scopes_and_keeps_the_rest():
    old = {"unit": {"tests/a.py": 3.0, "tests/b.py": 7.0}, "e2e": {"tests/a.py": 100.0}}
    assert durations.merged(old, "e2e", {"tests/a.py": 250.04, "tests/new.py": 1.26}) == {
        "e2e": {"tests/a.py": 250.0, "tests/new.py": 1.3},
        "unit": {"tests/a.py": 3.0, "tests/b.py": 7.0}}       # the same module, another stage
    assert durations.merged({}, "unit", {"tests/b.py": 2.0}) == {"unit": {"tests/b.py": 2.0}}


def test_an_xdist_run_records_every_scope_and_the_next_one_runs_the_longest_first(tmp_path):
    """A real pytest-xdist run of a small suite under this conftest (one worker, so the order it
    runs in is the queue's): the record it writes holds each scope's seconds, and the next run
    hands the longest scope out first."""
    suite = tmp_path / "tests"
    suite.mkdir()
    here = Path(__file__).parent
    for name in ("conftest.py", "durations.py"):
        (suite / name).write_text((here / name).read_text())
    log = tmp_path / "order.log"
    for name, seconds in (("test_a_short.py", 0.0), ("test_b_mid.py", 0.3), ("test_c_long.py", 0.6)):
        (suite / name).write_text(textwrap.dedent(f"""
            import time
            def test_one():
                with open({str(log)!r}, "a") as f:
                    f.write({name!r} + "\\n")
                time.sleep({seconds})
            """))
    record = tmp_path / "durations.json"
    env = {**os.environ, durations.ENV: str(record)}
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1",
           "--dist", "loadscope", "--no-loadscope-reorder", "-m", "not slow", "-o", "addopts=",
           "-o", "markers=slow", str(suite)]
    subprocess.run(run, cwd=tmp_path, env=env, check=True, capture_output=True)
    assert list(json.loads(record.read_text())) == ["not slow"]        # the stage's own table
    seconds = json.loads(record.read_text())["not slow"]
    assert set(seconds) == {"tests/test_a_short.py", "tests/test_b_mid.py", "tests/test_c_long.py"}
    assert seconds["tests/test_c_long.py"] >= 0.6 and seconds["tests/test_b_mid.py"] >= 0.3
    (suite / "durations.json").write_text(record.read_text())   # the record the next run reads
    log.unlink()
    subprocess.run(run, cwd=tmp_path, env={k: v for k, v in env.items() if k != durations.ENV},
                   check=True, capture_output=True)
    # collection order would be a, b, c: the record reverses it
    assert log.read_text().split() == ["test_c_long.py", "test_b_mid.py", "test_a_short.py"]
