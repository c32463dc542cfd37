"""bench/iteration.py's accounting on a hand-made manifest: what counts toward the minimum."""

from __future__ import annotations

import pytest

from bench.accounting import (
    cores,
    covered_s,
    cpu_columns,
    necessary,
    span_bytes,
    span_rows,
    stage_rows,
    work,
)
from swe_rlvr.compute import Shape
from swe_rlvr.memory import ModelDims

SHAPE = Shape(params=1000, hidden=8, vocab=50, layers=2)
RATE = 1e6                                                        # FLOP/s


def _t(seconds, tokens, logits, keys):
    return {"seconds": seconds, "calls": 1, "tokens": tokens, "logits": logits, "keys": keys}


MANIFESTS = {
    "rollouts": {"wall_s": 5.0, "peak_rss_mb": 900.0, "finished_at": 1.0,
                 "spans": {"prefill": _t(1.0, 10, 3, 55), "decode": _t(2.0, 4, 4, 20)}},
    "update": {"wall_s": 3.0, "peak_rss_mb": 2048.0, "finished_at": 4.0,
               "spans": {"old_logprobs": _t(0.5, 10, 6, 55),
                         "forward_backward": _t(1.5, 10, 6, 55), "optimizer": _t(0.2, 0, 0, 0)}},
}


def test_the_minimum_counts_generation_and_training_but_not_old_logprobs():
    rows = {r["stage"]: r for r in stage_rows(MANIFESTS, SHAPE, RATE)}
    # prefill: 2*1000*10 + 2*8*50*3 + 4*2*8*55 = 20,000 + 2,400 + 3,520 = 25,920
    # decode:  2*1000*4 + 2*8*50*4 + 4*2*8*20  =  8,000 + 3,200 + 1,280 = 12,480
    assert rows["rollouts"]["min_s"] == (25_920 + 12_480) / RATE
    assert rows["rollouts"]["tokens"] == 14
    # forward+backward: 3 * (20,000 + 2*8*50*6 = 4,800 + 3,520) = 84,960; old log-probs: none
    assert rows["update"]["min_s"] == 84_960 / RATE
    assert rows["update"]["tokens"] == 20                         # both passes ran 10 tokens
    assert [r["stage"] for r in stage_rows(MANIFESTS, SHAPE, RATE)] == ["rollouts", "update"]


def test_outside_is_the_wall_time_no_model_span_covers():
    rows = {r["stage"]: r for r in stage_rows(MANIFESTS, SHAPE, RATE)}
    assert rows["rollouts"]["outside_s"] == 5.0 - (1.0 + 2.0)     # prefill and decode
    assert rows["update"]["outside_s"] == pytest.approx(3.0 - (0.5 + 1.5 + 0.2))  # old log-probs too
    busy = {"x": {**MANIFESTS["update"], "wall_s": 2.0}}          # spans over the wall (beside)
    assert stage_rows(busy, SHAPE, RATE)[0]["outside_s"] == 0.0


def test_each_span_also_counts_at_the_rate_of_its_own_precision():
    """A bf16 engine at 4x and a bf16-autocast trainer at 2x fp32's rate: `min_own_s` divides
    each span's FLOPs by its own rate, `min_s` stays at fp32's."""
    own = lambda span: 2 * RATE if span == "forward_backward" else 4 * RATE   # noqa: E731
    rows = {r["stage"]: r for r in stage_rows(MANIFESTS, SHAPE, RATE, own)}
    assert rows["rollouts"]["min_own_s"] == pytest.approx((25_920 + 12_480) / (4 * RATE))
    assert rows["update"]["min_own_s"] == pytest.approx(84_960 / (2 * RATE))
    assert rows["update"]["min_s"] == 84_960 / RATE


def test_the_roofline_takes_each_span_at_the_larger_of_its_arithmetic_and_its_memory_reads():
    """bf16 weights (2 bytes), K/V width 4, read at 1,000 bytes/s. Each generation span made one
    call: it reads the 1,000 block weights and the 8*50 head once, 2,800 bytes; the decode step
    also reads its 20 cached keys' K and V at both layers, 2 * 4 * 2 * 20 * 2 = 640 bytes.
    prefill: max(25,920 / 1e6, 2,800 / 1,000) = 2.8 s; decode: max(0.0125, 3.44) = 3.44 s;
    training reads nothing here, so it stays at its arithmetic, 84,960 / 1e6 s."""
    dims = ModelDims(shape=SHAPE, total_params=1400, kv_dim=4, intermediate=16)
    spans_ = work(MANIFESTS["rollouts"]) | work(MANIFESTS["update"])
    assert span_bytes(dims, 2, "prefill", spans_["prefill"]) == 2_800
    assert span_bytes(dims, 2, "decode", spans_["decode"]) == 3_440
    assert span_bytes(dims, 2, "forward_backward", spans_["forward_backward"]) == 0.0
    read_s = lambda span, t: span_bytes(dims, 2, span, t) / 1_000          # noqa: E731
    rows = {r["stage"]: r for r in stage_rows(MANIFESTS, SHAPE, RATE, read_s=read_s)}
    assert rows["rollouts"]["roof_s"] == pytest.approx(2.8 + 3.44)
    assert rows["update"]["roof_s"] == pytest.approx(84_960 / RATE)
    table = {r["span"]: r for r in span_rows(spans_, SHAPE, RATE, 0.0,
                                            lambda span, t: span_bytes(dims, 2, span, t), 1_000)}
    assert table["decode"]["read_gb"] == 3_440 / 1e9 and table["decode"]["read_s"] == 3.44
    assert necessary(spans_, SHAPE, RATE)["roof_s"] == pytest.approx((25_920 + 12_480 + 84_960) / RATE)


def test_stages_that_ran_side_by_side_are_marked_and_the_totals_count_their_work_once():
    """An evaluation beside the rollouts (windows [-4, 1] and [-3, 0.5]): each manifest's spans
    hold the process's work while it ran, so the two are marked, the flow's stages covered 5 s of
    [-4, 1] plus 3 s of the update's [1, 4], and the minimum comes from the run's own totals."""
    beside = dict(MANIFESTS, eval_rollouts={"wall_s": 3.5, "peak_rss_mb": 950.0, "finished_at": 0.5,
                                            "spans": MANIFESTS["rollouts"]["spans"]})
    rows = {r["stage"]: r for r in stage_rows(beside, SHAPE, RATE)}
    assert rows["rollouts"]["beside"] and rows["eval_rollouts"]["beside"]
    assert not rows["update"]["beside"]
    assert not any(r["beside"] for r in stage_rows(MANIFESTS, SHAPE, RATE))
    assert covered_s(beside) == 8.0 and covered_s(MANIFESTS) == 8.0
    run = work(MANIFESTS["rollouts"]) | work(MANIFESTS["update"])
    assert necessary(run, SHAPE, RATE)["min_s"] == (25_920 + 12_480 + 84_960) / RATE


def test_the_span_table_is_the_runs_totals_with_the_sandbox_beside_them():
    run = work(MANIFESTS["rollouts"]) | work(MANIFESTS["update"])
    rows = {r["span"]: r for r in span_rows(run, SHAPE, RATE, exec_s=7.0)}
    assert rows["decode"]["tok_s"] == 2.0                          # 4 tokens in 2 s
    assert rows["old_logprobs"]["gflop"] == 28_320 / 1e9           # one forward, counted apart
    assert rows["sandbox commands"]["busy_s"] == 7.0
    assert list(rows)[:3] == ["prefill", "decode", "old_logprobs"]


def test_bench_trainer_counts_a_row_as_the_compute_module_does(tiny_model_dir):
    """bench/trainer.py's MFU numerator is `training_flops` of each packed row."""
    from transformers import AutoModelForCausalLM

    from bench.trainer import useful_flops
    from swe_rlvr.compute import training_flops
    from trainer.episodes import Episode
    from trainer.packing import pack
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    eps = [Episode(tuple(range(3, 3 + n)), (0,) * 2 + (1,) * (n - 2), (0.0,) * n) for n in (5, 7)]
    rows = pack(eps, 64, share_prefix=False)
    assert len(rows) == 1 and rows[0].attended_keys == 15 + 28     # 5*6/2 + 7*8/2
    assert useful_flops(model, rows) == training_flops(Shape.of(model), 12, 8, 43)


def test_a_policy_that_is_not_a_checkpoint_is_refused_and_nothing_is_written_there(tmp_path):
    """The story: a --policy path with a typo in it was filled with a freshly built SmolLM2, and
    the bench timed the base model instead of the policy it was asked for."""
    from bench.iteration import main
    missing = tmp_path / "runs" / "warmup" / "iter_0" / "checkpoint"
    with pytest.raises(SystemExit, match=r"--policy .*: no model checkpoint there \(no config"):
        main(["--policy", str(missing)])
    assert not (tmp_path / "runs").exists()


def test_a_stage_s_cpu_columns_say_how_busy_the_cores_were():
    """A 5 s stage whose process used 4 CPU seconds while the machine used 10: the rest of the
    machine used 6 of the cores' 5 x cores; a manifest from before the CPU was recorded prints
    dashes."""
    recorded = {"rollouts": {**MANIFESTS["rollouts"], "cpu_s": 4.0, "machine_cpu_s": 10.0}}
    row = stage_rows(recorded, SHAPE, RATE)[0]
    assert (row["cpu_s"], row["others_cpu_s"]) == (4.0, 6.0)
    busy = 10.0 / (5.0 * cores())
    assert cpu_columns(row).split() == ["4.0", "6.0", f"{busy:.0%}"]
    assert cpu_columns(stage_rows(MANIFESTS, SHAPE, RATE)[0]).split() == ["-", "-", "-"]
