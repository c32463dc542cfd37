"""DeepSpeed engine (ZeRO-2/3, gloo on CPU) matches the torch engine: one rank in-process on an
RFT run, and two ranks under torchrun (`trainer.launch`) on a DAPO run. Both pack several rows a
step, so gradients accumulate over micro-batches: under ZeRO-3 that needs the micro-step
bookkeeping DeepSpeed's own forward does (`DeepSpeedEngine.logprobs`), without which each
micro-batch's gradient overwrote the previous one's.

On CPU the engine skips DeepSpeed's `deepspeed_shm_comm` op (`trainer.deepspeed_cpu_shm` off),
whose JIT build took minutes on a fresh machine; the collectives run on gloo. With it on, a build
killed midway leaves `<TORCH_EXTENSIONS_DIR>/py311_cpu/deepspeed_shm_comm/lock`, and the next run
waits on it forever: delete that directory. Runs in a subprocess so DS_ACCELERATOR=cpu is set
before DeepSpeed is imported.

`SWE_RLVR_TEST_DEVICE=cuda` runs the one-rank tests on the GPU instead (nccl, DS_ACCELERATOR=cuda,
`infra/gpu/check.sh` does): both engines then compute in bf16 (autocast over fp32 weights against
DeepSpeed's bf16 weights with fp32 master copies), so they agree to bf16, not fp32, tolerances.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

SCRIPT = textwrap.dedent('''
    import json, sys, torch
    torch.set_num_threads(1)
    from swe_rlvr.config import load_config
    from trainer.episodes import Episode
    from trainer.loops import run_rft
    model_dir, out_dir, engine, stage, device = sys.argv[1:6]
    g = torch.Generator().manual_seed(0)
    eps = [Episode(tuple(torch.randint(3, 2000, (24,), generator=g).tolist()), (0,) * 8 + (1,) * 16,
                   (0.0,) * 24, resolved=True) for _ in range(8)]
    cfg = load_config(overrides=[f"trainer.device={device}", "trainer.compile=false",
                                 "trainer.rft_lr=1e-3", "trainer.sft_batch_size=4",
                                 f"trainer.engine={engine}", f"trainer.zero_stage={stage}",
                                 "trainer.save_every=1", "trainer.pack_tokens=48"])  # 2 rows a step
    result = run_rft(model_dir, eps, cfg, out_dir)
    print("METRICS", json.dumps([[m["loss"], m["grad_norm"]] for m in result.metrics]))
''')


pytest.importorskip("deepspeed", reason="deepspeed is not installed (pip install -e '.[deepspeed]')")

DEVICE = os.environ.get("SWE_RLVR_TEST_DEVICE", "cpu")
"""Where the one-rank tests train: cpu (the default, what CI runs) or cuda."""


def test_host_copy_keeps_tied_weights_tied(tiny_model_dir, tmp_path):
    """ZeRO-2 saves from `host_copy(module.state_dict())`. A tensor-by-tensor copy untied the
    embedding and LM head (on a GPU, where `.cpu()` copies), and `save_pretrained` then wrote an
    `lm_head.weight` the torch engine's checkpoint lacks."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from trainer.engine_deepspeed import host_copy
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.tie_word_embeddings
    live = model.state_dict()
    copy = host_copy(live)
    assert copy.keys() == live.keys()
    emb, head = copy["model.embed_tokens.weight"], copy["lm_head.weight"]
    assert emb.untyped_storage().data_ptr() == head.untyped_storage().data_ptr()
    for name, tensor in copy.items():   # a copy: training on cannot change the saved weights
        assert tensor.equal(live[name]) and tensor.data_ptr() != live[name].data_ptr(), name
    norms = [n for n in copy if n.endswith("norm.weight")]
    assert len({copy[n].data_ptr() for n in norms}) == len(norms)   # equal values, not ties
    model.save_pretrained(tmp_path, state_dict=copy, safe_serialization=True)
    assert "lm_head.weight" not in load_file(tmp_path / "model.safetensors")


def _run(script, model_dir, out, engine, stage):
    """(final weights, [[loss, grad_norm] per step]) of SCRIPT with this engine on DEVICE."""
    paths = [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "DS_ACCELERATOR": DEVICE, "TORCH_EXTENSIONS_DIR": str(out.parent / "ext"),
           "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    proc = subprocess.run([sys.executable, str(script), str(model_dir), str(out), engine, str(stage),
                           DEVICE], env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    from safetensors.torch import load_file
    metrics = [line for line in proc.stdout.splitlines() if line.startswith("METRICS ")][-1]
    return load_file(out / "final" / "model.safetensors"), json.loads(metrics.split(" ", 1)[1])


def _assert_same_bf16_update(model_dir, ours, theirs, ours_metrics, theirs_metrics) -> None:
    """CUDA: loss and gradient norm of every step to bf16 tolerance (they precede AdamW, so a
    micro-batch gradient overwritten instead of accumulated shows in the norm), and the whole
    update (weights minus the initial ones, ours rounded to bf16 like DeepSpeed's saved weights)
    to 30% in relative norm: AdamW's first steps move each element by about lr whatever its
    gradient's size, so elements whose gradient is bf16 noise move either way on either side."""
    from safetensors.torch import load_file
    for (l1, g1), (l2, g2) in zip(ours_metrics, theirs_metrics, strict=True):
        assert l2 == pytest.approx(l1, rel=2e-2) and g2 == pytest.approx(g1, rel=5e-2)
    init = load_file(Path(model_dir) / "model.safetensors")
    diff = total = 0.0
    for name in ours.keys() & init.keys():
        step = ours[name].to(torch.bfloat16).float() - init[name].float()
        diff += float((theirs[name].float() - init[name].float() - step).pow(2).sum())
        total += float(step.pow(2).sum())
    assert (diff / total) ** 0.5 < 0.3, (diff / total) ** 0.5


@pytest.mark.e2e
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero_matches_torch_engine(tiny_model_dir, tmp_path, stage):
    if DEVICE == "cuda" and not torch.cuda.is_available():
        pytest.skip("SWE_RLVR_TEST_DEVICE=cuda, but torch sees no CUDA GPU")
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    ours, ours_metrics = _run(script, tiny_model_dir, tmp_path / "torch", "torch", stage)
    theirs, theirs_metrics = _run(script, tiny_model_dir, tmp_path / "ds", "deepspeed", stage)
    assert ours.keys() == theirs.keys()
    if DEVICE == "cuda":
        _assert_same_bf16_update(tiny_model_dir, ours, theirs, ours_metrics, theirs_metrics)
    else:
        for name in ours:
            assert torch.allclose(ours[name], theirs[name].float(), atol=1e-5, rtol=1e-4), name
    assert (tmp_path / "ds" / "checkpoints" / "step_000002" / "deepspeed").is_dir()
    assert not (tmp_path / "ext").exists(), "DeepSpeed JIT-built an op (trainer.deepspeed_cpu_shm)"


@pytest.mark.e2e
def test_two_deepspeed_ranks_under_torchrun_match_the_torch_engine(tiny_model_dir, tmp_path,
                                                                   monkeypatch):
    """ZeRO-3 on 2 gloo ranks: 3 packed rows a step, so rank 1 runs a filler micro-batch to keep
    the weight gathers in step."""
    import dataclasses

    from tests.test_trainer_launch import EPISODES, _cfg
    from trainer.launch import train
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")              # the ranks inherit it
    ds = dataclasses.replace(_cfg(2), trainer=dataclasses.replace(
        _cfg(2).trainer, engine="deepspeed", zero_stage=3))
    two = train("dapo", tiny_model_dir, EPISODES, ds, tmp_path / "ds")
    one = train("dapo", tiny_model_dir, EPISODES, _cfg(1), tmp_path / "torch")
    from safetensors.torch import load_file
    w1 = load_file(one.checkpoint / "model.safetensors")
    w2 = load_file(two.checkpoint / "model.safetensors")
    for name in w1:
        assert torch.allclose(w1[name], w2[name].float(), atol=5e-5, rtol=1e-4), name
    for r1, r2 in zip(one.metrics, two.metrics, strict=True):
        assert r2["loss"] == pytest.approx(r1["loss"], rel=1e-5)
        assert r2["grad_norm"] == pytest.approx(r1["grad_norm"], rel=1e-4)
        assert r2["tokens"] == r1["tokens"]
