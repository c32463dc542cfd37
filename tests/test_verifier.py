"""The best-of-k verifier: hand-derived losses, pairing, and toy learning on the tiny model."""

from __future__ import annotations

import math

import pytest
import torch

from swe_rlvr.config import VerifierConfig
from trainer.verifier import (
    VerifierExample,
    instance_pairs,
    pairwise_loss,
    pick_best,
    pointwise_loss,
    score_texts,
    train_verifier,
    verifier_text,
)


def test_pointwise_loss_by_hand():
    # Logit 0 means p = 0.5, so each example costs log 2 whatever its label.
    loss, m = pointwise_loss(torch.tensor([0.0, 0.0]), torch.tensor([1.0, 0.0]))
    assert loss.item() == pytest.approx(math.log(2))
    # pos_weight 3 triples the positive's term: (3 log 2 + log 2) / 2 = 2 log 2.
    loss, _ = pointwise_loss(torch.tensor([0.0, 0.0]), torch.tensor([1.0, 0.0]), pos_weight=3.0)
    assert loss.item() == pytest.approx(2 * math.log(2))
    # Accuracy thresholds the logit at 0: (2 > 0) == 1 right, (1 > 0) != 0 wrong.
    _, m = pointwise_loss(torch.tensor([2.0, 1.0]), torch.tensor([1.0, 0.0]))
    assert m["accuracy"] == 0.5


def test_pairwise_loss_by_hand():
    # -log sigmoid(2 - 0) = log(1 + e^-2) = 0.126928...; equal scores give log 2.
    loss, m = pairwise_loss(torch.tensor([2.0, 1.0]), torch.tensor([0.0, 1.0]))
    assert loss.item() == pytest.approx((math.log1p(math.exp(-2)) + math.log(2)) / 2)
    assert m["pair_accuracy"] == 0.5


def test_instance_pairs_and_pick_best():
    ex = [VerifierExample("A", "a1", "", 1.0), VerifierExample("A", "a2", "", 0.0),
          VerifierExample("B", "b1", "", 0.0), VerifierExample("A", "a3", "", 0.0)]
    # Only A has both labels: a1 against a2 and a3; B contributes nothing.
    assert instance_pairs(ex) == [(0, 1), (0, 3)]
    assert pick_best({"A": [("a1", 0.1), ("a2", 0.7)], "B": [("b1", -1.0)]}) == {"A": "a2", "B": "b1"}


def toy_examples() -> list[VerifierExample]:
    """Resolved patches use `<=`, unresolved ones `<` or no change: a pattern a verifier can learn."""
    out = []
    for i in range(6):
        issue = f"check_limit({i}) rejects the boundary value {i}."
        good = f"-    return value < limit\n+    return value <= limit  # {i}"
        bad = f"-    return value < limit\n+    return value < limit + 0  # {i}"
        out.append(VerifierExample(f"I{i}", f"I{i}/ok", verifier_text(issue, good), 1.0))
        out.append(VerifierExample(f"I{i}", f"I{i}/bad", verifier_text(issue, bad), 0.0))
        out.append(VerifierExample(f"I{i}", f"I{i}/empty", verifier_text(issue, ""), 0.0))
    return out


@pytest.mark.parametrize("objective", ["pointwise", "pairwise"])
def test_verifier_learns_to_rank_resolved_patches_first(tiny_model_dir, tmp_path, objective):
    examples = toy_examples()
    cfg = VerifierConfig(objective=objective, lr=3e-3, epochs=8, max_tokens=128, batch=6)
    out = train_verifier(tiny_model_dir, examples, tmp_path / "verifier", cfg, seed=0)
    scores = score_texts(out, [ex.text for ex in examples], max_tokens=128)
    by_instance: dict[str, list[tuple[str, float]]] = {}
    for ex, s in zip(examples, scores):
        by_instance.setdefault(ex.instance_id, []).append((ex.episode_id, s))
    picks = pick_best(by_instance)
    # best-of-3 picks the resolved patch for every instance once the verifier has learned.
    assert all(episode.endswith("/ok") for episode in picks.values()), picks


def test_verifier_refuses_one_sided_data(tiny_model_dir, tmp_path):
    only_bad = [ex for ex in toy_examples() if ex.label == 0.0]
    with pytest.raises(ValueError, match="both resolved and unresolved"):
        train_verifier(tiny_model_dir, only_bad, tmp_path / "v")
    with pytest.raises(ValueError, match="verifier.objective"):
        train_verifier(tiny_model_dir, toy_examples(), tmp_path / "v", VerifierConfig(objective="x"))
