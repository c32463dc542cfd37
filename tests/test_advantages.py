"""Group advantages, dynamic sampling, curriculum; agreement with TRL's GRPOTrainer."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.advantages import (
    curriculum_filter,
    drgrpo_advantages,
    group_advantages,
    grpo_advantages,
    has_signal,
    rloo_advantages,
)


def test_grpo_uses_sample_std():
    # r = [1, 0, 0, 1]: mean 0.5; sample var = 4 * 0.25 / (4 - 1) = 1/3, std = 0.57735
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), eps=0.0)
    assert adv.tolist() == pytest.approx([0.866025, -0.866025, -0.866025, 0.866025], abs=1e-6)


def test_drgrpo_is_mean_only():
    # r = [2, 0, 1]: mean 1 -> [1, -1, 0]
    assert drgrpo_advantages(torch.tensor([2.0, 0.0, 1.0])).tolist() == [1.0, -1.0, 0.0]


def test_rloo_leave_one_out():
    # r = [3, 0, 0]: baselines (0+0)/2 = 0, (3+0)/2 = 1.5, 1.5 -> [3, -1.5, -1.5]
    assert rloo_advantages(torch.tensor([3.0, 0.0, 0.0])).tolist() == [3.0, -1.5, -1.5]


def test_group_advantages_by_name_and_unknown_name():
    assert group_advantages([1.0, 0.0], "drgrpo", 0.0) == [0.5, -0.5]
    with pytest.raises(ValueError, match="choose one of: grpo, drgrpo, rloo"):
        group_advantages([1.0], "ppo", 0.0)


def test_dynamic_sampling_signal():
    assert has_signal([0.0, 1.0, 0.0])
    assert not has_signal([0.0, 0.0, 0.0])            # all failed: no signal
    assert not has_signal([1.0, 1.0])                 # all solved: no signal
    assert not has_signal([0.7])                      # a single sample has no baseline


def test_curriculum_filter():
    history = {"easy": [1, 1, 1, 0],      # rate 0.75 >= 2/3 -> dropped
               "edge": [1, 1, 0],         # rate 2/3 reaches the threshold -> dropped
               "hard": [0, 0, 0],         # never solved -> dropped
               "mid": [1, 0, 0],          # rate 1/3 -> kept
               "new": []}                 # untried -> kept
    assert curriculum_filter(history, max_rate=2 / 3) == ["mid", "new"]


@pytest.fixture(scope="module")
def trl_trainer(tiny_model_dir, tmp_path_factory):
    """A real (tiny) TRL GRPOTrainer with loss_type='dapo' whose reward function returns REWARDS."""
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoTokenizer

    def reward_fn(completions, **kwargs):
        return list(REWARDS)
    args = trl.GRPOConfig(output_dir=str(tmp_path_factory.mktemp("trl")), per_device_train_batch_size=8,
                          num_generations=4, max_completion_length=2, use_cpu=True, report_to=[],
                          loss_type="dapo", beta=0.0, save_strategy="no", bf16=False)
    return trl.GRPOTrainer(model=str(tiny_model_dir), reward_funcs=[reward_fn], args=args,
                           processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
                           train_dataset=Dataset.from_dict({"prompt": ["a", "b"]}))


REWARDS = [1.0, 0.0, 0.0, 1.0, 0.5, -0.25, 0.0, 2.0]


def test_grpo_advantages_agree_with_trl(trl_trainer):
    """TRL's own advantage code (run through _generate_and_score_completions) vs ours, eps 1e-4."""
    out = trl_trainer._generate_and_score_completions([{"prompt": "a"}] * 4 + [{"prompt": "b"}] * 4)
    theirs = out["advantages"].tolist()
    ours = group_advantages(REWARDS[:4], "grpo", 1e-4) + group_advantages(REWARDS[4:], "grpo", 1e-4)
    assert max(abs(a - b) for a, b in zip(ours, theirs)) < 1e-6
    assert not math.isclose(theirs[0], 0.0)
