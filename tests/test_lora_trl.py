"""DAPO with LoRA against TRL's GRPOTrainer (loss_type="dapo") with the same `peft_config`: the
same tiny model, trajectories, advantages and old log-probs, and adapters drawn from the same seed.
peft starts B at zero, so the first step's loss is the base's and only B gets a gradient; after one
clipped AdamW step on each side the adapters, the second step's loss and every adapter gradient
(A's now too) agree."""

from __future__ import annotations

import pytest
import torch

from lora_support import LORA, lora_trainer_config

SEED, LR = 7, 1e-3
TRL_PREFIX = "base_model.model."
"""TRL holds the PeftModel; our engine the HF model inside it."""


@pytest.fixture(scope="module")
def trl_lora(tiny_model_dir, tmp_path_factory):
    """A real tiny GRPOTrainer (eps 0.2/0.28, no KL, AdamW wd 0.1, clip 1.0) with LoRA."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoTokenizer

    from trainer.lora import peft_config
    args = trl.GRPOConfig(output_dir=str(tmp_path_factory.mktemp("trl-lora")), use_cpu=True,
                          per_device_train_batch_size=2, num_generations=2, max_completion_length=4,
                          report_to=[], loss_type="dapo", beta=0.0, epsilon=0.2, epsilon_high=0.28,
                          save_strategy="no", bf16=False, seed=SEED, learning_rate=LR,
                          weight_decay=0.1, max_grad_norm=1.0, lr_scheduler_type="constant")
    tr = trl.GRPOTrainer(model=str(tiny_model_dir), reward_funcs=[lambda completions, **k: [0.0] * 2],
                         args=args, processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
                         train_dataset=Dataset.from_dict({"prompt": ["a"]}),
                         peft_config=peft_config(LORA))
    tr.model.train()
    tr.current_gradient_accumulation_steps = 1
    tr.create_optimizer()
    return tr


def _inputs():
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    return {"prompt_ids": torch.tensor([[5, 6, 7]] * 2), "prompt_mask": torch.ones(2, 3, dtype=torch.long),
            "completion_ids": torch.tensor([[11, 12, 13, 14], [21, 22, 0, 0]]),
            "completion_mask": mask, "advantages": torch.tensor([0.7, -1.3]),
            "num_items_in_batch": mask.sum()}


def _adapters(model, prefix: str = "") -> dict[str, torch.nn.Parameter]:
    return {n.removeprefix(prefix): p for n, p in model.named_parameters() if "lora_" in n}


def _rel(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """|ours - theirs| / |theirs| (Frobenius norms; 0 where both are 0)."""
    return float((ours - theirs).detach().norm() / theirs.detach().norm().clamp(min=1e-12))


def _ours_step(engine, batch, old_packed):
    from trainer.losses import dapo_loss
    logp, _ = engine.logprobs(batch)
    loss, _ = dapo_loss(logp, old_packed, batch.advantages, batch.loss_mask,
                        num_tokens=batch.num_actions, clip_low=0.2, clip_high=0.28)
    engine.backward(loss)
    return loss.item()


TOLERANCE = {1: 1e-4, 2: 1e-3}
"""Relative gradient error per step. Step 2's gradients flow through B after one AdamW step, which
moves every entry by about the learning rate whatever its gradient's size, so the two sides' float
rounding (another reduction order in another CPU's kernels) reaches them: 1.06e-4 at step 2 on a
Xeon with AMX, under 1e-4 on an EPYC. Step 1 (B = 0, the same adapters, the same data) keeps
1e-4, and the losses are compared to 1e-6 at both steps."""


def test_dapo_with_lora_agrees_with_trl_and_peft(trl_lora, tiny_model_dir):
    from trainer.engine_torch import TorchEngine
    from trainer.episodes import Episode
    from trainer.packing import pack
    tr, inputs = trl_lora, _inputs()
    ours = TorchEngine(tiny_model_dir, lora_trainer_config(seed=SEED), lr=LR, total_steps=2)
    theirs_ad, ours_ad = _adapters(tr.model, TRL_PREFIX), _adapters(ours.model)
    assert theirs_ad.keys() == ours_ad.keys() and len(ours_ad) == 28
    for name, p in ours_ad.items():                    # the same seed draws the same adapters
        assert torch.equal(p, theirs_ad[name]), name

    mask = inputs["completion_mask"]
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    with torch.no_grad():
        cur, _, _ = tr._get_per_token_logps_and_entropies(
            tr.model, ids, torch.cat([inputs["prompt_mask"], mask], 1), 4)
    inputs["old_per_token_logps"] = cur + 0.3 * torch.randn(cur.shape,
                                                            generator=torch.Generator().manual_seed(1))
    eps = [Episode(tuple(ids[i, :3 + int(mask[i].sum())].tolist()),
                   (0, 0, 0) + (1,) * int(mask[i].sum()), (0.0,) * (3 + int(mask[i].sum())),
                   advantage=float(inputs["advantages"][i])) for i in range(2)]
    (batch,) = pack(eps, 64)
    old_packed = torch.zeros(batch.num_tokens)
    old_packed[batch.loss_mask.bool()] = inputs["old_per_token_logps"][mask.bool()]

    for step in (1, 2):
        tr.optimizer.zero_grad(set_to_none=True)
        theirs = tr._compute_loss(tr.model, inputs)
        theirs.backward()
        loss = _ours_step(ours, batch, old_packed)
        assert abs(loss - theirs.item()) < 1e-6, step
        for name, p in ours_ad.items():
            assert _rel(p.grad, theirs_ad[name].grad) < TOLERANCE[step], (step, name)
        a_grads = sum(float(p.grad.abs().sum()) for n, p in ours_ad.items() if "lora_A" in n)
        assert (a_grads == 0.0) == (step == 1)         # B = 0 at step 1: no gradient reaches A
        torch.nn.utils.clip_grad_norm_(theirs_ad.values(), 1.0)      # TRL's max_grad_norm
        tr.optimizer.step()
        ours.step()
        # Adam's first step moves each weight by ~LR g / (|g| + 1e-8): an element of B whose gradient
        # is ~4e-7 moves ~1% of LR differently for fp32 noise of ~1e-9 between the sides (4e-4 of
        # B's norm). A, which at step 1 only decays (by LR x 0.1 = 1e-4 of itself), agrees to 1e-6.
        for name, p in ours_ad.items():
            assert _rel(p, theirs_ad[name]) < (1e-5 if "lora_A" in name else 1e-3), (step, name)
