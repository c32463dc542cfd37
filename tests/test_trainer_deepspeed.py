"""DeepSpeed engine (ZeRO-2/3, one CPU rank, gloo) matches the torch engine on the same RFT run.

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
                                 "trainer.save_every=1"])
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
