"""The table that `swe-rlvr train | rft | evaluate | quickstart` print at the end of a run."""

from __future__ import annotations

from flows.cli import summary_table


def test_one_row_per_step_and_only_the_logged_columns():
    metrics = {1: {"pass1": 0.25, "loss": 0.5}, 0: {"pass1": 0.0, "train_resolve_rate": 0.125}}
    lines = summary_table(metrics).splitlines()
    # Columns in STEP_KEYS order (tasks.report), restricted to those some step logged; rows sorted by step;
    # a value a step did not log is "-". Cells are right-aligned to the widest entry.
    assert lines == ["step  pass1  train_resolve_rate   loss",
                     "   0  0.000               0.125      -",
                     "   1  0.250                   -  0.500"]


def test_the_base_row_comes_first():
    lines = summary_table({0: {"pass1": 0.5}}, base={"pass1": 0.0, "eval_submit_rate": 0.25})
    assert lines.splitlines() == ["step  pass1  eval_submit_rate",
                                  "base  0.000             0.250",
                                  "   0  0.500                 -"]


def test_no_metrics_says_so():
    assert summary_table({}) == "no metrics were logged"
    assert summary_table({0: {"something_else": 1.0}}) == "no metrics were logged"
