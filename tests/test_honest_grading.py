"""What the tamper guards must leave alone: honest patches, honest environments, and canaries
that never leak or misfire.

The other side of test_hostile_grading: a fix that touches configuration outside pytest's sections
keeps its reward; the gold patch is never tampered; canaries are the same on a rerun, absent from
the excerpt the policy sees, and left out when the test command stops at the first failure; an
environment whose own conftest fools the canaries is an infrastructure failure, never a penalty.
Graded end to end with real pytest runs (`env`: `swe-rlvr__iniconf-1`, see hostile_support).
"""

from __future__ import annotations

import re
from dataclasses import replace

from hostile_support import PASSING_PLUGIN, attack, env, graded, reset_notes  # noqa: F401
from sandbox.grade_report import hide_canaries
from sandbox.grading import grade
from test_sandbox_support import git, make_instance, sandbox_config, store, write  # noqa: F401

# --------------------------------------------------------------------------- kept changes


def test_changes_outside_pytests_sections_are_kept(env):
    """A fix that also edits pyproject.toml outside its pytest section, adds a setup.cfg with only
    a flake8 section and a module that imports `json` changes nothing about how tests run: nothing
    is reset, it resolves, and the canaries see an honest run. (No attack: this must stay true.)"""
    report = graded(env, {"pyproject.toml": lambda text: text.replace("A small INI", "A tiny INI"),
                          "setup.cfg": "[flake8]\nmax-line-length = 100\n",
                          "iniconf/helpers.py": "import json\n"}, fixed=True, screen=True)
    assert report.resolved and not report.tampered and reset_notes(report) == ""


def test_gold_is_never_tampered_and_canaries_stay_out_of_the_report(env):
    """The gold patch's run holds two canaries per test file, one passed and one failed (so pytest
    exits 1, which agrees with its summary), and the hidden variant tests, all passed; they are
    read, and left out of `tests_status`."""
    from sandbox.reference import statuses
    from swe_rlvr.builtin.variants import variants_of
    inst, cfg, store = env
    report = grade(inst, inst.patch, cfg, store)
    assert report.resolved and not report.tampered and report.tamper_reason == "" and report.guards == ()
    listed = set(inst.fail_to_pass + inst.pass_to_pass)
    assert set(report.tests_status) == listed
    planted = {t: s for t, s in statuses(inst, report.log).items() if t not in listed}
    assert set(planted) == set(report.canaries)
    graded_files = {"tests/test_config.py", "tests/test_values.py"}
    canaries = {t: s for t, s in planted.items() if t.split("::")[0] in graded_files}
    assert sorted(canaries.values()) == ["FAILED", "FAILED", "PASSED", "PASSED"]
    variants = {t: s for t, s in planted.items() if t not in canaries}  # the hidden variant tests
    assert len(variants) == len(variants_of(inst.instance_id, inst.patch)) and set(variants.values()) == {"PASSED"}


def test_an_episode_graded_twice_gets_the_same_canaries_and_its_excerpt_shows_none(env):
    """Canaries are drawn from the gold and test patches and the episode id: a rerun (or a resumed
    run) writes the same log, another episode gets other canaries, and the excerpt that guidance
    shows the policy names none of them."""
    inst, cfg, store = env
    patch = attack(env, {})                                 # the unfixed checkout: tests fail
    first, again = (grade(inst, patch, cfg, store, episode_id="e/i0/s0") for _ in range(2))
    other = grade(inst, patch, cfg, store, episode_id="e/i0/s1")
    assert first.canaries and first.canaries == again.canaries != other.canaries
    timeless = lambda r: re.sub(r" in [0-9.]+s ", " in *s ", r.to_row()["log_excerpt"])  # noqa: E731
    assert timeless(first) == timeless(again)
    names = [t.rsplit("::", 1)[-1] for t in first.canaries]
    assert all(n in first.log for n in names)
    assert not any(n in first.to_row()["log_excerpt"] for n in names)


def test_hide_canaries_drops_their_lines_and_failure_sections():
    log = ("tests/t.py::test_real FAILED\ntests/t.py::test_sort_keeps_empty_rows FAILED\n"
           "=== FAILURES ===\n____ test_real ____\n    assert 1 == 2\n"
           "____ test_sort_keeps_empty_rows ____\n    values = [3, 4]\n    assert sum(values) == 9\n"
           "=== short test summary info ===\nFAILED tests/t.py::test_real - assert 1 == 2\n"
           "FAILED tests/t.py::test_sort_keeps_empty_rows - assert 7 == 9\n== 2 failed in 0.1s ==\n")
    assert hide_canaries(log, ("tests/t.py::test_sort_keeps_empty_rows",)) == (
        "tests/t.py::test_real FAILED\n=== FAILURES ===\n____ test_real ____\n    assert 1 == 2\n"
        "=== short test summary info ===\nFAILED tests/t.py::test_real - assert 1 == 2\n"
        "== 2 failed in 0.1s ==\n")
    assert hide_canaries(log, ()) == log


def test_a_test_command_that_stops_at_the_first_failure_gets_no_canaries(store, tmp_path):
    """With `-x` the failing canary would end the run before the graded tests of later files;
    such a run gets no canaries, and the report says so."""
    inst = make_instance(store, env=replace(make_instance(store).env,
                                            test_cmd="python -m pytest -rA -x -p no:cacheprovider"))
    report = grade(inst, inst.patch, sandbox_config(tmp_path), store)
    assert report.resolved and not report.tampered
    assert "no canary tests: the test command stops or selects tests (-x)" in report.notes


def test_an_environment_where_canaries_fail_even_for_gold_is_an_infrastructure_failure(store, tmp_path):
    """The repository's own conftest.py (at the base: no patch put it there) reports every test
    passed. The canary that must fail passes for the gold patch too, so a "tampered" verdict would
    punish a patch for the environment: every patch of this instance is an infrastructure failure
    that names the canaries, never a sample."""
    inst = make_instance(store, repo="acme/calcplugin")
    repo = store / "acme__calcplugin"
    write(repo, {"conftest.py": PASSING_PLUGIN})
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a conftest that passes everything")
    inst = replace(inst, base_commit=git(repo, "rev-parse", "HEAD").strip())
    for patch in (inst.patch, "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n"
                              "@@ -1 +1 @@\n-calc\n+calc!\n"):
        report = grade(inst, patch, sandbox_config(tmp_path), store)
        assert report.infra_failure and not report.tampered and not report.resolved
        assert "canary" in report.infra_reason and "sandbox.canaries=false" in report.infra_reason
