"""bench/guidance.py's pure parts: arm overrides, the per-run summary, ratios and the table."""

from __future__ import annotations

import pytest

from bench.guidance import arm_overrides, parse_args, ratio, summarize, table
from swe_rlvr.config import load_config


def test_arm_overrides_are_valid_config_and_pick_the_update():
    cfg = load_config(None, arm_overrides("scripted:weak", "pairs", True))
    assert (cfg.engine.name, cfg.guidance.mode, cfg.guidance.enabled, cfg.algorithm.name) == (
        "scripted:weak", "pairs", True, "dpo")
    assert cfg.agent.max_new_tokens == 2048            # the script's whole-hunk edits fit
    cfg = load_config(None, arm_overrides("hf", "keep", False))
    assert (cfg.guidance.enabled, cfg.algorithm.name) == (False, "rft")


def test_summarize_means_over_iterations_and_takes_first_and_last_pass1():
    metrics = {0: {"pass1": 0.25, "train_resolve_rate": 0.5, "guided_recovery_rate": 1.0},
               1: {"pass1": 0.5, "train_resolve_rate": 0.0, "guided_recovery_rate": 0.5},
               2: {"pass1": 0.75}}
    # train resolve (0.5 + 0.0) / 2; recovery (1.0 + 0.5) / 2; pass@1 of policies 0 and 2.
    assert summarize(metrics) == {"train_resolve": 0.25, "recovery": 0.75, "pass1_start": 0.25,
                                  "pass1_end": 0.75}
    assert summarize({0: {"pass1": 0.0}})["recovery"] is None       # guidance off: none logged


def test_ratio_text():
    assert ratio(0.5, 0.25) == "2.00"
    assert (ratio(0.0, 0.0), ratio(0.5, 0.0)) == ("=", "inf")
    assert ratio(None, 0.5) == ratio(0.5, None) == "-"


def test_table_puts_off_on_and_ratio_side_by_side():
    off = {"train_resolve": 0.0, "recovery": None, "pass1_start": 0.0, "pass1_end": 0.25}
    on = {"train_resolve": 0.0, "recovery": 1.0, "pass1_start": 0.0, "pass1_end": 0.5}
    lines = table({("hf", "pairs", False): off, ("hf", "pairs", True): on}).splitlines()
    assert lines[0].split()[:2] == ["policy", "mode"] and set(lines[1]) <= {"-", " "}
    assert lines[2].split("  ")[0] == "hf" and len(lines) == 3
    cells = [c.strip() for c in lines[2].split("  ") if c.strip()]
    assert cells == ["hf", "pairs", "0.000 | 0.000 | =", "- | 1.000 | -", "0.000 | 0.000 | =",
                     "0.250 | 0.500 | 2.00"]


def test_unknown_mode_is_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--modes", "strip,pair"])
    err = capsys.readouterr().err
    assert "unknown mode(s) ['pair'] in --modes or --sanity-modes" in err
    assert "choose from: strip, keep, pairs" in err
