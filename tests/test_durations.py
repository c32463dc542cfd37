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
    ordered = sorted(ids, key=lambda i: durations.order_key(i, seconds))
    assert ordered == ["tests/new.py::t", "tests/b.py::t1", "tests/b.py::t2", "tests/c.py::K::t",
                       "tests/a.py::t1", "tests/a.py::t2"]


def test_a_run_overwrites_its_scopes_and_keeps_the_other_tiers():
    old = {"tests/unit.py": 3.0, "tests/e2e.py": 100.0}
    assert durations.merged(old, {"tests/e2e.py": 250.04, "tests/new.py": 1.26}) == {
        "tests/e2e.py": 250.0, "tests/new.py": 1.3, "tests/unit.py": 3.0}


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
    for name, seconds in (("test_short.py", 0.0), ("test_long.py", 0.6), ("test_mid.py", 0.3)):
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
           "--dist", "loadscope", "--no-loadscope-reorder", "-m", "", "-o", "addopts=", str(suite)]
    subprocess.run(run, cwd=tmp_path, env=env, check=True, capture_output=True)
    seconds = json.loads(record.read_text())
    assert set(seconds) == {"tests/test_long.py", "tests/test_mid.py", "tests/test_short.py"}
    assert seconds["tests/test_long.py"] >= 0.6 and seconds["tests/test_mid.py"] >= 0.3
    (suite / "durations.json").write_text(record.read_text())   # the record the next run reads
    log.unlink()
    subprocess.run(run, cwd=tmp_path, env={k: v for k, v in env.items() if k != durations.ENV},
                   check=True, capture_output=True)
    assert log.read_text().split() == ["test_long.py", "test_mid.py", "test_short.py"]
