"""best@k by hand, the verifier's training examples, the `coin` script's draw, and the guards.

The end-to-end check (a verifier trained in the flow reranks a real evaluation) lives in
`test_guidance_flow.py`; these are the pure pieces with hand-derived values.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

import pytest

from agent.scripted import NOOP, coin_fixes
from swe_rlvr.config import load_config
from tasks.metrics import best_of_k, eval_summary
from trainer.verifier import verifier_examples, verifier_text


@contextmanager
def warnings_of(name: str, caplog):
    """caplog's handler on logger `name` itself (Prefect's logging setup stops propagation)."""
    logger = logging.getLogger(name)
    logger.addHandler(caplog.handler)
    try:
        yield
    finally:
        logger.removeHandler(caplog.handler)


def row(iid: str, run: int, resolved: bool, score: float | None) -> dict:
    return {"instance_id": iid, "run": run, "episode_id": f"{iid}/s{run}", "resolved": resolved,
            "infra_failure": False, "termination": "submitted", "turns": 2, "format_errors": 0,
            "verifier_score": score}


def test_best_of_k_picks_the_top_score_per_block_of_k():
    rows = [row("A", 0, False, 0.9), row("A", 1, True, 0.2),   # block A0: run 0 (0.9) -> no
            row("A", 2, True, 0.5), row("A", 3, False, 0.1),   # block A1: run 2 (0.5) -> yes
            row("B", 1, True, 0.7), row("B", 0, False, 0.3)]   # block B0 (by run): run 1 -> yes
    # 2 of the 3 submissions resolve.
    assert best_of_k(rows, 2) == (pytest.approx(2 / 3), 3)
    # k = 4: only A has a full block (runs 0-3, top 0.9 unresolved); B's 2 runs are left out.
    assert best_of_k(rows, 4) == (0.0, 1)
    # k = 1 submits every run: best@1 is the plain resolve rate, 3 of 6.
    assert best_of_k(rows, 1) == (0.5, 6)


def test_best_of_k_ties_go_to_the_lowest_run_and_bad_input_names_the_fix():
    tied = [row("A", 1, True, 0.4), row("A", 0, False, 0.4)]
    assert best_of_k(tied, 2) == (0.0, 1)                       # run 0 wins the tie
    with pytest.raises(ValueError, match="eval.best_of_k > 0"):
        best_of_k([row("A", 0, True, None)], 1)
    with pytest.raises(ValueError, match="eval.best_of_k >= 1"):
        best_of_k(tied, 0)


def test_eval_summary_adds_best_at_k_only_for_scored_rows():
    scored = [row("A", 0, False, 1.0), row("A", 1, True, 2.0),
              row("B", 0, False, 0.0), row("B", 1, False, 1.0)]
    out = eval_summary(scored, k=2, best_k=2)
    # pass@1: runs 0 and 1 resolve 0/2 and 1/2 -> 0.25; pass@2: A yes, B no -> 0.5;
    # best@2: A picks run 1 (resolved), B picks run 1 (not) -> 0.5 over 2 submissions.
    assert out["pass1"] == 0.25 and out["pass2"] == 0.5
    assert out["best2"] == 0.5 and out["best2_submissions"] == 2.0
    assert "best2" not in eval_summary(scored, k=2)             # best-of-k off
    unscored = [dict(r, verifier_score=None) for r in scored]
    assert "best2" not in eval_summary(unscored, k=2, best_k=2)  # no verifier at this step


def _rollout(eid: str, iid: str, patch: str, guided: bool = False) -> dict:
    return {"episode_id": eid, "instance_id": iid, "patch": patch, "guided": guided,
            "termination": "submitted"}


def _grade(eid: str, resolved: bool, infra: bool = False) -> dict:
    return {"episode_id": eid, "resolved": resolved, "infra_failure": infra}


def test_verifier_examples_keep_guided_episodes_and_drop_infra_failures():
    rollouts = [_rollout("a/0", "a", ""), _rollout("a/g", "a", "+fix", guided=True),
                _rollout("b/0", "b", "+x"), _rollout("b/1", "b", "+y")]
    grades = [_grade("a/0", False), _grade("a/g", True), _grade("b/0", False, infra=True)]
    out = verifier_examples(rollouts, grades, {"a": "Issue A", "b": "Issue B"})
    # b/0 failed on infrastructure (no sample) and b/1 was never graded: both left out.
    assert [(e.episode_id, e.label) for e in out] == [("a/0", 0.0), ("a/g", 1.0)]
    assert out[0].text == verifier_text("Issue A", "") and "(empty patch)" in out[0].text
    assert out[1].text == "Issue:\nIssue A\n\nPatch:\n+fix\n"


def test_coin_draw_is_seeded_and_later_turns_follow_the_first():
    draws = [coin_fixes("prompt", 0, seed) for seed in range(40)]
    assert True in draws and False in draws                     # both sides of the coin
    assert draws == [coin_fixes("other prompt", 0, seed) for seed in range(40)]  # seed alone
    assert coin_fixes("prompt", 0, None)                        # unseeded: behave like gold
    noop_first = f"... Step 1.\n```bash\n{NOOP}\n``` ..."
    assert not coin_fixes(noop_first, 1, seed=0) and coin_fixes("Step 1.\n```bash\npython -", 1, 0)


def test_preflight_refuses_best_of_k_above_the_runs(tmp_path, tiny_model_dir):
    from flows.preflight import PreflightError, preflight
    base = [f"orchestration.run_root={tmp_path}", f"engine.model={tiny_model_dir}", "eval.runs=3"]
    preflight(load_config(None, base + ["eval.best_of_k=3"]), check_prefect=False)
    with pytest.raises(PreflightError, match=r"eval.best_of_k \(4\) .* eval.runs \(3\)"):
        preflight(load_config(None, base + ["eval.best_of_k=4"]), check_prefect=False)


def test_evaluate_ignores_a_missing_verifier_with_a_warning(tmp_path, caplog):
    from tasks.evaluate import _usable_verifier
    on = load_config(None, ["eval.best_of_k=2"])
    with warnings_of("tasks.evaluate", caplog):
        assert _usable_verifier(str(tmp_path / "iter_0" / "verifier"), on) is None
    assert "reports no best@2" in caplog.text
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "_SUCCESS").write_text("{}")
    assert _usable_verifier(str(tmp_path / "v"), on) == str(tmp_path / "v")
    assert _usable_verifier(str(tmp_path / "v"), load_config(None, [])) is None   # best-of-k off


def test_verifier_task_trains_nothing_when_off_or_one_sided(tmp_path, caplog):
    from swe_rlvr.loaders import load_instances
    from tasks import store
    from tasks.verifier import verifier
    inst = [i for i in load_instances("builtin").instances if i.split == "train"][0]
    run = str(tmp_path / "run")
    insts = store.join(run, "iter_0", "instances.parquet")
    store.write_table(insts, "instances", [inst.to_row()])
    from test_tasks import _episode
    pairs = [_episode(inst.instance_id, r, False) for r in range(2)]
    rolls, grades = store.join(run, "iter_0", "r.parquet"), store.join(run, "iter_0", "v.parquet")
    store.write_table(rolls, "rollouts", [p[0] for p in pairs])
    store.write_table(grades, "validations", [p[1] for p in pairs])
    off = load_config(None, [])
    assert verifier.fn(run, 0, [rolls], [grades], insts, "unused", off) == ""
    stale = tmp_path / "run" / "iter_0" / "verifier"     # sealed by an earlier run's inputs
    stale.mkdir()
    (stale / "_SUCCESS").write_text("{}")
    with warnings_of("tasks.verifier", caplog):
        on = load_config(None, ["eval.best_of_k=2"])
        assert verifier.fn(run, 0, [rolls], [grades], insts, "unused", on) == ""
    assert "0 of 2 graded patches resolved" in caplog.text
    assert not stale.exists()                                  # never reranks with it


def test_evaluate_with_a_verifier_needs_best_of_k_and_a_trained_one(tmp_path):
    from flows.api import _check_verifier
    from swe_rlvr.config import ConfigError
    sealed = tmp_path / "iter_0" / "verifier"
    sealed.mkdir(parents=True)
    with pytest.raises(ConfigError, match="not a trained verifier"):
        _check_verifier(sealed, load_config(None, ["eval.best_of_k=2"]))
    (sealed / "_SUCCESS").write_text("{}")
    _check_verifier(sealed, load_config(None, ["eval.best_of_k=2"]))
    with pytest.raises(ConfigError, match="eval.best_of_k=0; set eval.best_of_k"):
        _check_verifier(sealed, load_config(None, []))
