"""FLOP accounting (swe_rlvr.compute) and work spans (swe_rlvr.spans), with counts worked by hand,
and the records the hf engine and the trainer leave for bench/iteration.py."""

from __future__ import annotations

import threading
import time

import pytest

from swe_rlvr import spans
from swe_rlvr.compute import Shape, causal_keys, decode_work, forward_bytes, forward_flops, prefill_work, training_flops

SHAPE = Shape(params=1000, hidden=8, vocab=50, layers=2)


def test_forward_flops_add_the_weights_the_head_and_the_attention():
    # 2*1000*10 = 20,000 (weights) + 2*8*50*3 = 2,400 (head on 3 positions)
    # + 4*2*8*55 = 3,520 (attention over 55 keys) = 25,920
    assert forward_flops(SHAPE, tokens=10, logits=3, keys=55) == 25_920
    assert training_flops(SHAPE, tokens=10, logits=3, keys=55) == 3 * 25_920


def test_forward_bytes_read_every_weight_per_call_and_each_cached_key_at_every_layer():
    # 3 calls x (1000 block weights + 8*50 head) = 4,200 values; 20 cached keys x K and V
    # (2 x kv width 4) x 2 layers = 320 values; 4,520 values x 2 bytes (bf16) = 9,040 bytes
    assert forward_bytes(SHAPE, kv_width=4, dtype_bytes=2, calls=3, cached_keys=20) == 9_040
    assert forward_bytes(SHAPE, kv_width=4, dtype_bytes=4, calls=1, cached_keys=0) == 5_600


def test_causal_keys_sum_the_positions_after_the_cache():
    assert causal_keys(4) == 1 + 2 + 3 + 4 == 10
    assert causal_keys(4, cached=2) == 3 + 4 == 7
    assert causal_keys(3, cached=3) == 0


def test_prefill_counts_only_uncached_tokens():
    # prompt of 4, nothing cached: 4 tokens, keys 1+2+3+4 = 10; prompt of 5 with 3 cached: 2
    # tokens at positions 4 and 5, keys 9
    assert prefill_work([4, 5], [0, 3]) == (6, 19)


def test_decode_runs_one_forward_per_token_but_the_first():
    # a prompt of 3 and 3 sampled tokens: the first from the prefill's logits, then forwards at
    # positions 4 and 5 (keys 4 + 5 = 9); a row that sampled 1 token runs none
    assert decode_work([3, 7], [3, 1]) == (2, 9)


def test_shape_counts_parameters_outside_embedding_and_head(tiny_model_dir):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    shape = Shape.of(model)
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    total = sum(p.numel() for p in model.parameters())     # a tied head is counted once
    outside = embed.numel() + (0 if head is embed else head.numel())
    assert shape.params == total - outside > 0
    assert (shape.hidden, shape.vocab) == (model.config.hidden_size, model.config.vocab_size)


def test_spans_sum_per_name_and_delta_keeps_one_window():
    before = spans.totals()
    with spans.span("test-a", tokens=3) as s:
        s.logits, s.keys = 2, 5
    spans.record("test-a", 0.5, tokens=1)
    work = spans.delta(before, spans.totals())
    assert work["test-a"].calls == 2
    assert (work["test-a"].tokens, work["test-a"].logits, work["test-a"].keys) == (4, 2, 5)
    assert work["test-a"].seconds >= 0.5
    assert "test-b" not in work


def test_spans_from_threads_add_up():
    before = spans.totals()

    def one():
        with spans.span("test-threads", tokens=1):
            pass
    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert spans.delta(before, spans.totals())["test-threads"].tokens == 8


def test_rss_window_sees_a_peak_that_is_gone_by_its_end():
    with spans.rss_window() as w:
        block = bytearray(200 * 2 ** 20)                    # 200 MiB, touched below
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(3 * spans.SAMPLE_S)
        del block
    assert w.peak_mb >= w.start_mb + 150
    assert spans.peak_rss_mb() >= w.peak_mb - 1


BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"
"""A child's body: 0.4 s of CPU."""


def test_cpu_seconds_count_this_process_its_watched_children_and_the_machine():
    """A child's 0.4 s (here behind a shell, as sandbox commands are behind bubblewrap) is the
    machine's time, not this process's; a watched child (a model's process) is this process's."""
    import subprocess
    import sys
    own, machine = spans.cpu_seconds()
    subprocess.run(["sh", "-c", f"{sys.executable} -c '{BURN}' & wait"], check=True)
    start = time.process_time()
    while time.process_time() - start < 0.3:                                # this process
        pass
    after_own, after_machine = spans.cpu_seconds()
    assert after_machine - machine >= 0.4 + 0.3 - 0.05           # /proc/stat counts in ticks
    assert 0.28 <= after_own - own < 0.35 + 0.3                  # not the child's (and some slack)
    child = subprocess.Popen([sys.executable, "-c", BURN + "\ntime.sleep(60)"])
    try:
        spans.watch(child.pid)
        mine = time.process_time()
        deadline = time.monotonic() + 60           # its 0.4 s of CPU, however busy the machine
        while True:                                # the child's share: all but this process's own
            watched = spans.cpu_seconds()[0] - after_own - (time.process_time() - mine)
            if watched >= 0.35 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert watched >= 0.35
    finally:
        spans.unwatch(child.pid)
        child.kill()
        child.wait()


def test_a_stage_manifest_records_the_cpu_it_and_the_machine_used(tmp_path):
    import subprocess
    import sys

    from tasks import store
    with store.stage(str(tmp_path), "probe", "key") as st:
        subprocess.run([sys.executable, "-c", BURN], check=True)
        st.output("main", str(tmp_path / "out"), "0")
    (tmp_path / "out").write_text("")
    manifest = store.Stage(str(tmp_path), "probe", "key").manifest()
    assert manifest["machine_cpu_s"] >= 0.35 and manifest["cpu_s"] >= 0.0


def test_hf_engine_records_what_it_ran(tiny_model_dir):
    from agent.engines import SamplingParams, make_engine
    from swe_rlvr.config import EngineConfig
    engine = make_engine(EngineConfig(name="hf", model=str(tiny_model_dir), torch_threads=1,
                                      max_batch=8, prefix_cache_gb=0))
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
    before = spans.totals()
    samples = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=6, seed=1))
    work = spans.delta(before, spans.totals())
    assert (work["prefill"].tokens, work["prefill"].keys) == prefill_work([3, 5], [0, 0]) == (8, 21)
    assert work["prefill"].logits == 2
    lengths = [len(s.token_ids) for s in samples]
    assert (work["decode"].tokens, work["decode"].keys) == decode_work([3, 5], lengths)
    assert work["decode"].logits == work["decode"].tokens == sum(n - 1 for n in lengths)
    # the batch was assembled once (both rows join at once): timed, no model work of its own
    assert (work["batch"].calls, work["batch"].tokens, work["batch"].keys) == (1, 0, 0)


@pytest.mark.parametrize("share_prefix", [False, True])
def test_attended_keys_of_a_packed_row_follow_its_segments(share_prefix):
    import torch

    from trainer.packing import PackedBatch
    row = PackedBatch(input_ids=torch.zeros(7, dtype=torch.long), position_ids=torch.zeros(7),
                      cu_seqlens=torch.tensor([0, 3, 7]), loss_mask=torch.zeros(7),
                      sampler_logprobs=torch.zeros(7), advantages=torch.zeros(7),
                      seq_ids=torch.zeros(7), episodes=[0, 1],
                      attn_cu=torch.tensor([0, 4, 9]) if share_prefix else None)
    # segments 3 and 4: 6 + 10 keys; virtual segments 4 and 5: 10 + 15
    assert row.attended_keys == (25 if share_prefix else 16)
