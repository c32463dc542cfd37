"""Resume: a DAPO run SIGKILLed after step 2 and resumed ends bitwise-equal to an unbroken run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

SCRIPT = textwrap.dedent('''
    import sys, time, torch
    torch.set_num_threads(1)
    from swe_rlvr.config import load_config
    from trainer.episodes import Episode
    from trainer.loops import run_dapo
    model_dir, out_dir = sys.argv[1], sys.argv[2]
    g = torch.Generator().manual_seed(0)
    eps = []
    for i in range(12):                 # 2 instances of 6 episodes sharing an 8-token prompt
        prompt = tuple(torch.randint(3, 2000, (8,), generator=torch.Generator().manual_seed(i // 6)).tolist())
        ids = prompt + tuple(torch.randint(3, 2000, (16,), generator=g).tolist())
        eps.append(Episode(ids, (0,) * 8 + (1,) * 16, (0.0,) * 8 + (-7.5,) * 16,
                           advantage=1.0 if i % 2 else -1.0, instance_id=f"i{i // 6}"))
    cfg = load_config(overrides=["trainer.device=cpu", "trainer.minibatches=6", "trainer.lr=1e-3",
                                 "trainer.warmup_steps=2", "trainer.save_every=1"])
    result = run_dapo(model_dir, eps, cfg, out_dir, on_step=lambda k: (print('STEP', k, flush=True), time.sleep(0.2)))
    print("DONE", result.checkpoint)
''')


def _start(script: Path, model_dir: Path, out_dir: Path) -> subprocess.Popen:
    paths = [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    return subprocess.Popen([sys.executable, str(script), str(model_dir), str(out_dir)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    return load_file(ckpt / "model.safetensors")


@pytest.mark.e2e
def test_sigkill_mid_run_then_resume_is_bitwise_identical(tiny_model_dir, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    broken, whole = tmp_path / "broken", tmp_path / "whole"

    proc = _start(script, tiny_model_dir, broken)
    deadline = time.time() + 300
    while not (broken / "checkpoints" / "step_000002").exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < deadline, "the run never reached step 2"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)                 # lands in step 3 (or its 0.2 s pause)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (broken / "final").exists()            # really interrupted

    resumed = _start(script, tiny_model_dir, broken)
    unbroken = _start(script, tiny_model_dir, whole)
    outs = []
    for p in (resumed, unbroken):
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out
        outs.append([int(line.split()[1]) for line in out.splitlines() if line.startswith("STEP ")])
    assert outs[0][0] >= 3 and outs[0][-1] == 6       # the resumed run skipped finished steps
    assert outs[1] == [1, 2, 3, 4, 5, 6]
    a, b = _weights(broken / "final"), _weights(whole / "final")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    state_a = torch.load(broken / "checkpoints" / "step_000006" / "trainer_state.pt", weights_only=False)
    state_b = torch.load(whole / "checkpoints" / "step_000006" / "trainer_state.pt", weights_only=False)
    assert [r["loss"] for r in state_a["rows"]] == [r["loss"] for r in state_b["rows"]]
    assert [r["grad_norm"] for r in state_a["rows"]] == [r["grad_norm"] for r in state_b["rows"]]
