"""DeepSpeed engine (ZeRO-2/3, gloo on CPU) matches the torch engine: one rank in-process on an
RFT run, and two ranks under torchrun (`trainer.launch`) on a DAPO run. Both pack several rows a
step, so gradients accumulate over micro-batches: under ZeRO-3 that needs the micro-step
bookkeeping DeepSpeed's own forward does (`DeepSpeedEngine.logprobs`), without which each
micro-batch's gradient overwrote the previous one's.

On CPU, DeepSpeed JIT-compiles its `deepspeed_shm_comm` op at `init_distributed` the first time
(both stages took 5 min on 2 busy cores with the compile; the build is cached in
TORCH_EXTENSIONS_DIR, ~/.cache/torch_extensions, for later runs). A build
killed midway leaves `<TORCH_EXTENSIONS_DIR>/py311_cpu/deepspeed_shm_comm/lock`, and the next run
waits on it forever: delete that directory. Runs in a subprocess so DS_ACCELERATOR=cpu is set
before DeepSpeed is imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

SCRIPT = textwrap.dedent('''
    import sys, torch
    torch.set_num_threads(1)
    from swe_rlvr.config import load_config
    from trainer.episodes import Episode
    from trainer.loops import run_rft
    model_dir, out_dir, engine, stage = sys.argv[1:5]
    g = torch.Generator().manual_seed(0)
    eps = [Episode(tuple(torch.randint(3, 2000, (24,), generator=g).tolist()), (0,) * 8 + (1,) * 16,
                   (0.0,) * 24, resolved=True) for _ in range(8)]
    cfg = load_config(overrides=["trainer.device=cpu", "trainer.rft_lr=1e-3", "trainer.sft_batch_size=4",
                                 f"trainer.engine={engine}", f"trainer.zero_stage={stage}",
                                 "trainer.save_every=1", "trainer.pack_tokens=48"])  # 2 rows a step
    print("RESULT", run_rft(model_dir, eps, cfg, out_dir).checkpoint)
''')


pytest.importorskip("deepspeed", reason="deepspeed is not installed (pip install -e '.[deepspeed]')")


def _run(script, model_dir, out, engine, stage):
    paths = [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    proc = subprocess.run([sys.executable, str(script), str(model_dir), str(out), engine, str(stage)],
                          env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    from safetensors.torch import load_file
    return load_file(out / "final" / "model.safetensors")


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero_matches_torch_engine(tiny_model_dir, tmp_path, stage):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    ours = _run(script, tiny_model_dir, tmp_path / "torch", "torch", stage)
    theirs = _run(script, tiny_model_dir, tmp_path / "ds", "deepspeed", stage)
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert torch.allclose(ours[name], theirs[name].float(), atol=1e-5, rtol=1e-4), name
    assert (tmp_path / "ds" / "checkpoints" / "step_000002" / "deepspeed").is_dir()


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
