"""The run's memory estimate (swe_rlvr.memory), worked by hand, and the preflight that refuses a
run whose estimate exceeds what the machine has free, naming the knob."""

from __future__ import annotations

import pytest

from swe_rlvr import memory
from swe_rlvr.compute import Shape
from swe_rlvr.config import load_config

DIMS = memory.ModelDims(Shape(params=1000, hidden=4, vocab=50, layers=3), total_params=1200,
                        kv_dim=2, intermediate=8)


def test_activations_per_token_follow_the_layer_and_checkpointing():
    # per layer and token: 4 bytes x (8*4 + 2*2 + 4*8 = 68 floats) = 272 bytes
    assert memory.activation_bytes(DIMS, 10, checkpointing=False) == 10 * 3 * 272    # 8,160
    # checkpointing: each layer keeps its input (4 floats = 16 bytes), one layer recomputes
    assert memory.activation_bytes(DIMS, 10, checkpointing=True) == 10 * (3 * 16 + 272)  # 3,200


def test_lm_head_holds_three_chunks_of_logits():
    assert memory.head_bytes(DIMS, tokens=10, chunk_rows=7) == 3 * 7 * 50 * 4          # 4,200
    assert memory.head_bytes(DIMS, tokens=5, chunk_rows=7) == 3 * 5 * 50 * 4           # 3,000


def test_kv_cache_is_the_work_within_its_budget():
    # K and V, 3 layers, width 2, fp32: 48 bytes per token
    assert DIMS.kv_bytes_per_token(4) == 48
    assert memory.kv_cache_bytes(DIMS, 4, episodes=2, context_tokens=100, budget_gb=1) == 9_600
    assert memory.kv_cache_bytes(DIMS, 4, episodes=2, context_tokens=100,
                                 budget_gb=1000 / memory.GIB) == 1000


def test_the_peak_is_the_larger_phase_and_names_its_largest_part():
    cfg = load_config(None, ["trainer.pack_tokens=1000", "agent.context_tokens=100",
                             "orchestration.max_workers=2", "engine.max_batch=2"])
    est = memory.estimate(cfg, DIMS, engine_dtype_bytes=4, head_chunk_rows=7,
                          engine_in_process=True, trainer_on_cpu=True)
    # sampling: weights 4,800 + KV 2*100*48 = 9,600 + batch 2*100*48 = 9,600
    assert est.phase("sampling") == memory.RUNTIME_BYTES + 4_800 + 9_600 + 9_600
    # update: 16*1200 = 19,200 + activations 1000*3*272 = 816,000 + head 4,200 = 839,400,
    # and the allocator's and compiler's share of that
    tensors = 19_200 + 816_000 + 4_200
    assert est.phase("update") == (memory.RUNTIME_BYTES + tensors
                                   + int(memory.UPDATE_OVERHEAD * tensors))
    assert est.peak == est.phase("update")
    assert est.largest() == ("activations", 816_000, "trainer.grad_checkpointing")
    sampling_only = memory.estimate(cfg, DIMS, 4, 7, engine_in_process=True, trainer_on_cpu=False)
    assert sampling_only.peak == est.phase("sampling")


def test_packed_weights_hold_a_tied_head_twice_while_sampling():
    """agent.engines.packed packs a tied LM head as a copy: hidden x vocab more (4 x 50 x 4 B)."""
    tied = memory.ModelDims(DIMS.shape, DIMS.total_params, DIMS.kv_dim, DIMS.intermediate,
                            tied_head=True)
    for choice, extra in (("auto", 800), ("packed", 800), ("plain", 0)):
        cfg = load_config(None, [f"engine.packed_weights={choice}"])
        est = memory.estimate(cfg, tied, 4, 7, engine_in_process=True, trainer_on_cpu=False)
        assert est.parts.get("packed LM head", ("", 0, ""))[1] == extra
    untied = memory.estimate(load_config(None, []), DIMS, 4, 7, True, False)
    assert "packed LM head" not in untied.parts


def test_lora_holds_the_frozen_base_once_and_trains_state_only_for_its_adapters():
    # per layer, r x (in + out): q 4+4, k 4+2, v 4+2, o 4+4, gate 4+8, up 4+8, down 8+4 = 64
    assert memory.lora_params(DIMS, 2, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                        "down_proj")) == 3 * 2 * 64                        # 384
    assert memory.lora_params(DIMS, 1, ("q_proj", "v_proj", "lm_head")) == 3 * (8 + 6 + 8)  # 66
    cfg = load_config(None, ["trainer.lora.r=2"])
    est = memory.estimate(cfg, DIMS, 4, 7, engine_in_process=False, trainer_on_cpu=True)
    assert est.parts["frozen base, adapters, AdamW"][1] == 4 * 1200 + 16 * 384          # 10,944
    assert "weights, gradients, AdamW" not in est.parts


def test_smollm2_quickstart_update_estimate_meets_its_measurement():
    """The numbers the quickstart recipe is sized by (SmolLM2-135M: d 576, kv 192, i 1536, 30
    layers, 49,152 vocabulary, 134.5M parameters, 106.2M outside the embedding). Measured by
    bench/iteration.py on rows of ~4,300 tokens: the update grew the process by 7.9 GB without
    checkpointing, and peaked at 5.0 GB with it (the estimate takes full 8,192-token rows, the
    recipe's trainer.pack_tokens then)."""
    from trainer.forward import head_chunk_rows
    dims = memory.ModelDims(Shape(106_203_456, 576, 49_152, 30), 134_515_008, 192, 1536)
    update = {}
    for ckpt in (False, True):
        cfg = load_config("configs/quickstart.yaml", ["trainer.pack_tokens=8192",
                                                      f"trainer.grad_checkpointing={ckpt}"])
        est = memory.estimate(cfg, dims, 4, head_chunk_rows(49_152), False, True)
        update[ckpt] = est.phase("update") / memory.GIB
    assert update[False] > 12 and 4.5 < update[True] < 5.6


def test_a_run_that_would_not_fit_is_refused_before_any_work_naming_the_knob(tmp_path,
                                                                            tiny_model_dir):
    from flows import PreflightError, train
    base = [f"orchestration.run_root={tmp_path}", f"engine.model={tiny_model_dir}"]
    # the tiny model keeps 17 KB per token in its two layers: 10^8 tokens are ~1.6 TiB
    with pytest.raises(PreflightError, match=r"estimated peak memory .* activations .*"
                                             r"trainer\.grad_checkpointing=true"):
        train(None, base + ["trainer.pack_tokens=100000000"])
    with pytest.raises(PreflightError, match=r"KV cache .* lower engine\.prefix_cache_gb"):
        train(None, base + ["engine.prefix_cache_gb=100000", "agent.context_tokens=100000000",
                            "orchestration.max_workers=4096"])
    assert list(tmp_path.iterdir()) == []                       # nothing was started


def test_evaluation_does_not_count_the_update(tiny_model_dir):
    from flows.preflight import PreflightError, preflight
    cfg = load_config(None, [f"engine.model={tiny_model_dir}", "trainer.pack_tokens=100000000"])
    preflight(cfg, check_prefect=False, trains=False)
    with pytest.raises(PreflightError, match="activations"):
        preflight(cfg, check_prefect=False, trains=True)
