"""Losses: hand-derived values and gradients, masks, the three aggregations (`algorithm.loss_agg`)
and agreement with TRL's GRPOTrainer loss types."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.episodes import Episode
from trainer.losses import Normaliser, aggregate, dapo_loss, dpo_loss, k3, mismatch_metrics, policy_loss, sft_loss


def test_sft_loss_token_mean_over_global_count():
    logp = torch.tensor([-1.0, -2.0, -3.0, -4.0])
    mask = torch.tensor([0.0, 1.0, 1.0, 0.0])
    loss, m = sft_loss(logp, mask, norm=Normaliser(num_tokens=2))
    assert loss.item() == pytest.approx(2.5)            # (2 + 3) / 2
    loss4, _ = sft_loss(logp, mask, norm=Normaliser(num_tokens=4))  # a micro-batch of a 4-token step
    assert loss4.item() == pytest.approx(1.25)          # (2 + 3) / 4
    assert m["nll"] == pytest.approx(2.5)


# --------------------------------------------------------------------------- aggregation

# Per-token losses of two sequences and a masked token:
#   seq 0: [1, 2, 3], seq 1: [4, 6], then 100 with mask 0 (seq 1's observation)
PER_TOKEN = [1.0, 2.0, 3.0, 4.0, 6.0, 100.0]
MASK = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0])
SEQS = torch.tensor([0, 0, 0, 1, 1, 1])
STEP = {"num_tokens": 5, "num_seqs": 2, "max_len": 4}


@pytest.mark.parametrize("mode, value, grads", [
    # token_mean (DAPO): (1 + 2 + 3 + 4 + 6) / 5 = 3.2; every action token weighs 1/5
    ("token_mean", 3.2, [0.2] * 5 + [0.0]),
    # seq_mean (GRPO): seq means 6/3 = 2 and 10/2 = 5, mean over 2 seqs = 3.5;
    # weights 1/(3 * 2) on seq 0 and 1/(2 * 2) on seq 1
    ("seq_mean", 3.5, [1 / 6] * 3 + [0.25] * 2 + [0.0]),
    # seq_mean_token_sum_norm (Dr.GRPO): 16 / (2 seqs * max_len 4) = 2.0; every action token 1/8
    ("seq_mean_token_sum_norm", 2.0, [0.125] * 5 + [0.0]),
])
def test_aggregate_hand_values_and_gradients(mode, value, grads):
    x = torch.tensor(PER_TOKEN, requires_grad=True)
    loss = aggregate(x, MASK, Normaliser(mode, **STEP), SEQS)
    assert loss.item() == pytest.approx(value)
    loss.backward()
    assert x.grad.tolist() == pytest.approx(grads)


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean", "seq_mean_token_sum_norm"])
def test_sft_and_policy_loss_take_the_aggregation(mode):
    """SFT's per-token loss is -logp; the policy loss at ratio 1 is -A: both go through aggregate."""
    want = aggregate(torch.tensor(PER_TOKEN), MASK, Normaliser(mode, **STEP), SEQS).item()
    sft, _ = sft_loss(-torch.tensor(PER_TOKEN), MASK, norm=Normaliser(mode, **STEP), seq_ids=SEQS)
    pg, _ = policy_loss(torch.zeros(6), torch.zeros(6), -torch.tensor(PER_TOKEN), MASK,
                        norm=Normaliser(mode, **STEP), seq_ids=SEQS)
    assert sft.item() == pytest.approx(want) and pg.item() == pytest.approx(want)


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean", "seq_mean_token_sum_norm"])
def test_micro_batches_with_the_step_normaliser_give_the_one_pass_gradient(mode):
    """Gradient accumulation: micro-batches divide by the whole step's counts, not their own."""
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(9, generator=g)).requires_grad_(True)
    old = logp.detach() + 0.2 * torch.randn(9, generator=g)
    adv = torch.tensor([1.0] * 4 + [-0.5] * 3 + [2.0] * 2)        # 3 sequences: 4, 3, 2 tokens
    mask = torch.tensor([0, 1, 1, 1, 0, 1, 1, 1, 1.0])
    seqs = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2])
    norm = Normaliser(mode, num_tokens=7, num_seqs=3, max_len=8)

    def grad(parts, norm_of):
        logp.grad = None
        for p in parts:
            loss, _ = policy_loss(logp[p], old[p], adv[p], mask[p], norm=norm_of(p), seq_ids=seqs[p])
            loss.backward()
        return logp.grad.clone()
    whole = grad([slice(0, 9)], lambda p: norm)
    split = grad([slice(0, 4), slice(4, 9)], lambda p: norm)       # seq 0 | seqs 1 and 2
    assert torch.allclose(whole, split, atol=1e-7)
    own = grad([slice(0, 4), slice(4, 9)], lambda p: Normaliser(   # each micro-batch's own counts
        mode, num_tokens=int(mask[p].sum()), num_seqs=len(seqs[p].unique()), max_len=8))
    assert not torch.allclose(whole, own, atol=1e-4)


def test_unknown_aggregation_names_the_choices():
    with pytest.raises(ValueError, match="token_mean, seq_mean, seq_mean_token_sum_norm"):
        Normaliser("sequence_mean")


def _ratios(*r):
    """Log-probs whose ratio to old log-probs 0 is r."""
    return torch.tensor([math.log(x) for x in r], requires_grad=True)


def test_dapo_loss_values_clip_metrics_and_gradients():
    logp = _ratios(1.5, 0.5, 1.0, 1.1, 0.5)
    old = torch.zeros(5)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0])
    loss, m = dapo_loss(logp, old, adv, torch.ones(5), num_tokens=5, clip_low=0.2, clip_high=0.28)
    # per token -min(rA, clip(r)A), clip range [0.8, 1.28]:
    #   r=1.5,A=+1: -min(1.5, 1.28) = -1.28 (high-clipped)
    #   r=0.5,A=+1: -min(0.5, 0.8)  = -0.5
    #   r=1.0,A=-1: -min(-1, -1)    = +1.0
    #   r=1.1,A=-1: -min(-1.1,-1.1) = +1.1
    #   r=0.5,A=-1: -min(-0.5,-0.8) = +0.8 (low-clipped)
    # sum 1.12, token mean over 5 -> 0.224
    assert loss.item() == pytest.approx(0.224, abs=1e-6)
    assert m["clip_frac_high"] == pytest.approx(0.2) and m["clip_frac_low"] == pytest.approx(0.2)
    loss.backward()
    # d/dlogp of -rA/N is -A r / N where unclipped, 0 where the clipped term wins:
    # [0, -0.5/5, 1/5, 1.1/5, 0]
    assert logp.grad.tolist() == pytest.approx([0.0, -0.1, 0.2, 0.22, 0.0], abs=1e-6)


def test_dapo_masked_tokens_get_zero_gradient_and_do_not_count():
    logp = _ratios(1.0, 1.0, 1.0)
    loss, _ = dapo_loss(logp, torch.zeros(3), torch.tensor([1.0, 1.0, 1.0]),
                        torch.tensor([1.0, 0.0, 1.0]), num_tokens=2)
    assert loss.item() == pytest.approx(-1.0)           # (-1 + -1) / 2
    loss.backward()
    assert logp.grad.tolist() == pytest.approx([-0.5, 0.0, -0.5])


def test_dapo_optional_k3_kl():
    logp = torch.zeros(1, requires_grad=True)
    ref = torch.tensor([math.log(2.0)])
    # surrogate with r = 1, A = 0 is 0; k3 = exp(ref - logp) - (ref - logp) - 1 = 2 - ln2 - 1 = 0.306853
    loss, _ = dapo_loss(logp, torch.zeros(1), torch.zeros(1), torch.ones(1), num_tokens=1,
                        ref_logprobs=ref, kl_coef=0.5)
    assert loss.item() == pytest.approx(0.5 * 0.306853, abs=1e-6)
    with pytest.raises(ValueError, match="ref_logprobs"):
        dapo_loss(logp, torch.zeros(1), torch.zeros(1), torch.ones(1), num_tokens=1, kl_coef=0.1)


def test_grpo_loss_is_sequence_mean():
    logp = torch.zeros(3)                               # ratio 1 everywhere
    adv = torch.tensor([1.0, 1.0, -2.0])
    loss, _ = policy_loss(logp, torch.zeros(3), adv, torch.ones(3), seq_ids=torch.tensor([0, 0, 1]),
                          norm=Normaliser("seq_mean", num_seqs=2), clip_high=0.2)
    # per token -A = [-1, -1, 2]; seq 0 mean -1, seq 1 mean 2; mean over 2 seqs = 0.5
    assert loss.item() == pytest.approx(0.5)


def test_dpo_loss_hand_value():
    loss, m = dpo_loss(torch.tensor([-10.0]), torch.tensor([-12.0]), torch.tensor([-11.0]),
                       torch.tensor([-11.0]), beta=0.5, num_pairs=1)
    # margin = 0.5 * (1) - 0.5 * (-1) = 1; -log sigmoid(1) = log(1 + e^-1) = 0.313262
    assert loss.item() == pytest.approx(0.313262, abs=1e-6)
    assert m["dpo_accuracy"] == 1.0


def test_mismatch_metrics_and_k3():
    m = mismatch_metrics(torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -2.0]), torch.ones(2))
    # |delta| = [0.5, 0] -> 0.25; k3(sampler, trainer) = [e^0.5 - 0.5 - 1, 0] = [0.148721, 0] -> 0.074361
    assert m["sampler_mismatch"] == pytest.approx(0.25)
    assert m["sampler_k3"] == pytest.approx(0.0743606, abs=1e-6)
    assert k3(torch.zeros(1), torch.zeros(1)).item() == 0.0


# --------------------------------------------------------------------------- agreement with TRL

# TRL's GRPOTrainer._compute_loss, trl 1.16.0 (trl/trainer/grpo_trainer.py), after the per-token
# loss, transcribed for one process and no gradient accumulation (B sequences x T tokens):
#   "grpo":    ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
#   "bnpo":    (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
#   "dr_grpo": (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length)
#   "dapo":    (per_token_loss * mask).sum() / num_items_in_batch      (action tokens of the
#              generation batch, over every process and accumulation step)
TRL_LOSS_TYPES = {
    "grpo": lambda x, m, max_len: ((x * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean(),
    "bnpo": lambda x, m, max_len: (x * m).sum() / m.sum().clamp(min=1.0),
    "dr_grpo": lambda x, m, max_len: (x * m).sum() / (x.size(0) * max_len),
    "dapo": lambda x, m, max_len: (x * m).sum() / m.sum(),
}
OUR_AGGREGATION = {"grpo": "seq_mean", "bnpo": "token_mean", "dr_grpo": "seq_mean_token_sum_norm",
                   "dapo": "token_mean"}


def _padded_step(seed: int = 0):
    """(B, T) = (3, 5) log-probs, old log-probs around them, a ragged mask, one advantage a row."""
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(3, 5, generator=g) * 3).requires_grad_(True)
    old = logp.detach() + 0.4 * torch.randn(3, 5, generator=g)      # ratios spread over the clips
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.float32)
    return logp, old, mask, torch.tensor([[0.7], [-1.3], [0.4]])


def _our_norm(loss_type: str, mask: torch.Tensor, max_len: int) -> Normaliser:
    return Normaliser(OUR_AGGREGATION[loss_type], num_tokens=int(mask.sum()),
                      num_seqs=mask.shape[0], max_len=max_len)


@pytest.mark.parametrize("loss_type", list(TRL_LOSS_TYPES))
def test_aggregations_equal_trl_loss_type_formulas(loss_type):
    logp, old, mask, adv = _padded_step()
    ratio = torch.exp(logp - old)
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 0.8, 1.28) * adv)   # TRL, two-sided off
    theirs = TRL_LOSS_TYPES[loss_type](per_token, mask, 8)
    (g_theirs,) = torch.autograd.grad(theirs, logp)
    ours, _ = policy_loss(logp, old, adv, mask, norm=_our_norm(loss_type, mask, 8),
                          seq_ids=torch.arange(3)[:, None], clip_low=0.2, clip_high=0.28)
    (g_ours,) = torch.autograd.grad(ours, logp)
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-7)
    assert torch.allclose(g_ours, g_theirs, atol=1e-7)



@pytest.fixture(scope="module")
def trl_trainer(tiny_model_dir, tmp_path_factory):
    """A real tiny TRL GRPOTrainer with loss_type='dapo' (eps_low 0.2, eps_high 0.28, no KL)."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoTokenizer
    args = trl.GRPOConfig(output_dir=str(tmp_path_factory.mktemp("trl")), per_device_train_batch_size=2,
                          num_generations=2, max_completion_length=4, use_cpu=True, report_to=[],
                          loss_type="dapo", beta=0.0, epsilon=0.2, epsilon_high=0.28,
                          save_strategy="no", bf16=False)
    tr = trl.GRPOTrainer(model=str(tiny_model_dir), reward_funcs=[lambda completions, **k: [0.0] * 2],
                         args=args, processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
                         train_dataset=Dataset.from_dict({"prompt": ["a"]}))
    tr.model.train()
    tr.current_gradient_accumulation_steps = 1
    return tr


def _trl_inputs(completion_mask, advantages, old):
    b, c = completion_mask.shape
    return {"prompt_ids": torch.tensor([[5, 6, 7]] * b), "prompt_mask": torch.ones(b, 3, dtype=torch.long),
            "completion_ids": torch.tensor([[11, 12, 13, 14], [21, 22, 0, 0]])[:b, :c],
            "completion_mask": completion_mask, "advantages": advantages,
            "old_per_token_logps": old, "num_items_in_batch": completion_mask.sum()}


@pytest.mark.parametrize("loss_type", list(TRL_LOSS_TYPES))
def test_losses_agree_with_trl_on_fixed_logprobs(trl_trainer, loss_type):
    """TRL's own _compute_loss, its log-prob step replaced by fixed values, vs policy_loss."""
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(2, 4, generator=g) * 3).requires_grad_(True)
    old = (logp.detach() + 0.4 * torch.randn(2, 4, generator=g))    # ratios spread over the clips
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    adv = torch.tensor([0.7, -1.3])
    trl_trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logp, torch.zeros_like(logp), None)
    trl_trainer.loss_type = loss_type
    try:
        theirs = trl_trainer._compute_loss(trl_trainer.model, _trl_inputs(mask, adv, old))
    finally:
        del trl_trainer._get_per_token_logps_and_entropies
        trl_trainer.loss_type = "dapo"
    (g_theirs,) = torch.autograd.grad(theirs, logp)
    norm = _our_norm(loss_type, mask, trl_trainer.max_completion_length)
    ours, _ = policy_loss(logp, old, adv[:, None], mask, norm=norm, seq_ids=torch.arange(2)[:, None],
                          clip_low=0.2, clip_high=0.28)
    (g_ours,) = torch.autograd.grad(ours, logp)
    assert abs(ours.item() - theirs.item()) < 1e-6
    assert (g_ours - g_theirs).abs().max().item() < 1e-6


def test_dapo_update_agrees_with_trl_end_to_end(trl_trainer, tiny_model_dir):
    """Same weights and trajectories: TRL's padded forward + loss vs our packed forward + loss."""
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    from trainer.packing import pack
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    adv = torch.tensor([0.7, -1.3])
    inputs = _trl_inputs(mask, adv, None)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    with torch.no_grad():
        cur, _, _ = trl_trainer._get_per_token_logps_and_entropies(
            trl_trainer.model, ids, torch.cat([inputs["prompt_mask"], mask], 1), 4)
    old = cur + 0.3 * torch.randn(cur.shape, generator=torch.Generator().manual_seed(1))
    inputs["old_per_token_logps"] = old
    trl_trainer.model.zero_grad()
    theirs = trl_trainer._compute_loss(trl_trainer.model, inputs)
    theirs.backward()

    ours_model = load_model(tiny_model_dir, torch.device("cpu"), grad_checkpointing=False)
    eps = [Episode(tuple(ids[i, :3 + int(mask[i].sum())].tolist()),
                   (0, 0, 0) + (1,) * int(mask[i].sum()), (0.0,) * (3 + int(mask[i].sum())),
                   advantage=float(adv[i])) for i in range(2)]
    (batch,) = pack(eps, 64)
    old_packed = torch.zeros(batch.num_tokens)
    old_packed[batch.loss_mask.bool()] = old[mask.bool()]            # rows are in episode order
    logp, _ = packed_logprobs(ours_model, batch)
    ours, _ = dapo_loss(logp, old_packed, batch.advantages, batch.loss_mask,
                        num_tokens=batch.num_actions, clip_low=0.2, clip_high=0.28)
    ours.backward()
    assert abs(ours.item() - theirs.item()) < 1e-6
    theirs_grads = dict(trl_trainer.model.named_parameters())
    for name, p in ours_model.named_parameters():
        assert torch.allclose(p.grad, theirs_grads[name].grad, atol=1e-6, rtol=1e-4), name
