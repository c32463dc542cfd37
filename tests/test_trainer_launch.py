"""Data-parallel updates under torchrun: two ranks train to the parameters of one process.

`trainer.launch.train` is the update stage's entry point: with `trainer.processes: 2` (CPU) or
`trainer.num_gpus: 2` (GPU) it runs `python -m torch.distributed.run --standalone
--nproc_per_node=2 -m trainer.launch <spec>`, the same path as the README's GPU command. Each rank
runs its share of every step's packed rows, the gradients are summed over the ranks, and every
micro-batch loss is divided by the whole step's count, so the update is the one-process update up
to fp32 summation order. Rank 0 alone writes the checkpoints and the result.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from swe_rlvr.config import Config, load_config
from trainer.engine_torch import shard
from trainer.episodes import Episode
from trainer.launch import command, train, world_size


def _episode(seed: int, n_actions: int, adv: float, instance: str) -> Episode:
    """An 8-token prompt shared by the instance, then `n_actions` random action tokens."""
    prompt = tuple(torch.randint(3, 2000, (8,), generator=torch.Generator().manual_seed(
        sum(map(ord, instance)))).tolist())
    acts = tuple(torch.randint(3, 2000, (n_actions,), generator=torch.Generator().manual_seed(seed))
                 .tolist())
    return Episode(prompt + acts, (0,) * 8 + (1,) * n_actions, (0.0,) * 8 + (-7.5,) * n_actions,
                   advantage=adv, instance_id=instance, resolved=adv > 0)


EPISODES = [_episode(i, 6 + 3 * (i % 4), 1.0 if i % 3 else -1.0, f"i{i % 3}") for i in range(12)]
PAIRS = [(_episode(20 + i, 8, 1.0, f"p{i}"), _episode(40 + i, 10 + i, -1.0, f"p{i}"))
         for i in range(3)]


def _cfg(processes: int) -> Config:
    return load_config(overrides=[
        "trainer.device=cpu", f"trainer.processes={processes}", "trainer.torch_threads=1",
        "trainer.lr=1e-3", "trainer.rft_lr=1e-3", "trainer.minibatches=2", "trainer.pack_tokens=40",
        "trainer.sft_batch_size=2", "trainer.dpo_batch_pairs=2", "trainer.save_every=1"])


def _weights(ckpt) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    return load_file(ckpt / "model.safetensors")


def _assert_same_update(one, two) -> None:
    """Weights within fp32 tolerance, the loss and gradient norm to 1e-5 (they precede AdamW).

    AdamW divides each gradient by its own RMS, so an element whose gradient is rounding noise
    (a key bias gets none at all: softmax ignores a shift) moves by up to lr either way, whatever
    the summation order made of it; at lr 1e-3 two steps differ by at most 3e-6 here.
    """
    w1, w2 = _weights(one.checkpoint), _weights(two.checkpoint)
    assert w1.keys() == w2.keys()
    for name in w1:
        assert torch.allclose(w1[name], w2[name], atol=1e-5, rtol=1e-5), name
    assert [(r["step"], r["phase"], r["tokens"]) for r in one.metrics] == \
        [(r["step"], r["phase"], r["tokens"]) for r in two.metrics]
    for r1, r2 in zip(one.metrics, two.metrics):             # summed over the ranks
        for key in ("loss", "grad_norm", "entropy", "sampler_mismatch", "clip_frac_high"):
            if r1[key] is None:
                assert r2[key] is None, key
            else:
                assert r2[key] == pytest.approx(r1[key], rel=1e-5, abs=1e-6), key


@pytest.mark.parametrize("loop, items", [
    ("dapo", EPISODES),             # 2 steps of 6 episodes in 3 packed rows: ranks run 2 and 1
    ("dpo", PAIRS),                 # SFT warm-up, then DPO; each last step's one row idles rank 1
])
@pytest.mark.e2e
def test_two_gloo_ranks_train_to_the_one_process_parameters(tiny_model_dir, tmp_path, loop, items):
    one = train(loop, tiny_model_dir, items, _cfg(1), tmp_path / "one")
    two = train(loop, tiny_model_dir, items, _cfg(2), tmp_path / "two")
    assert two.checkpoint == (tmp_path / "two" / ("dpo" if loop == "dpo" else "") / "final")
    _assert_same_update(one, two)
    steps = [p.name for p in (two.checkpoint.parent / "checkpoints").iterdir()]
    assert steps == [f"step_{two.metrics[-1]['step']:06d}"]   # keep_checkpoints 1: rank 0 prunes
    assert not [p for p in two.checkpoint.parent.iterdir() if p.name.startswith(".")]


def test_the_launch_command_is_torchrun_on_one_machine(tmp_path):
    cmd = command(tmp_path / "launch_spec.json", 8)
    assert cmd[1:] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=8",
                       "-m", "trainer.launch", str(tmp_path / "launch_spec.json")]
    assert world_size(_cfg(3).trainer) == 3                  # CPU: trainer.processes
    assert world_size(dataclasses.replace(_cfg(1).trainer, num_gpus=8)) == 1  # num_gpus: GPU only


def test_shards_cover_every_row_once_and_lockstep_pads_with_fillers():
    assert [shard(5, r, 2) for r in range(2)] == [[0, 2, 4], [1, 3]]
    assert [shard(5, r, 2, lockstep=True) for r in range(2)] == [[0, 2, 4], [1, 3, None]]
    assert [shard(1, r, 2) for r in range(2)] == [[0], []]   # a rank may have nothing to run
    assert [shard(1, r, 2, lockstep=True) for r in range(2)] == [[0], [None]]


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_two_gpus_train_to_the_one_gpu_parameters(tiny_model_dir, tmp_path):
    """`trainer.num_gpus=2`: nccl ranks, bf16 autocast on both sides, fp32 master weights."""
    def cfg(n):
        return dataclasses.replace(_cfg(1), trainer=dataclasses.replace(
            _cfg(1).trainer, device="cuda", num_gpus=n, compile=False))
    one = train("dapo", tiny_model_dir, EPISODES, cfg(1), tmp_path / "one")
    two = train("dapo", tiny_model_dir, EPISODES, cfg(2), tmp_path / "two")
    w1, w2 = _weights(one.checkpoint), _weights(two.checkpoint)
    for name in w1:
        assert torch.allclose(w1[name], w2[name], atol=1e-4, rtol=1e-3), name
