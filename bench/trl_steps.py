"""TRL's side of bench/trainer.py: a real GRPOTrainer (loss_type="dapo"), with or without LoRA.

`TrlStep` drives `GRPOTrainer._compute_loss` on padded micro-batches of `micro` sequences with
gradient accumulation, as its training_step would, then clips the gradient norm at 1.0 and takes
an AdamW step over the trainable parameters (the adapters alone under `peft_config`). Under bf16
autocast the loss runs inside `torch.autocast`, as TRL's `bf16=True` runs it through accelerate.
"""

from __future__ import annotations

import contextlib
from pathlib import Path


def trl_trainer(model_dir: Path, micro: int, n_micro: int, out: Path, peft_config=None):
    """A real GRPOTrainer (loss_type='dapo', fp32 weights, no KL, eps 0.2/0.28), used for its loss
    path; `peft_config` wraps its model in peft's adapters, as TRL does."""
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer
    args = trl.GRPOConfig(output_dir=str(out), per_device_train_batch_size=micro,
                          gradient_accumulation_steps=n_micro, num_generations=micro,
                          max_completion_length=8, use_cpu=True, bf16=False, report_to=[],
                          loss_type="dapo", beta=0.0, epsilon=0.2, epsilon_high=0.28,
                          gradient_checkpointing=False, save_strategy="no")
    tr = trl.GRPOTrainer(model=str(model_dir), args=args,
                         reward_funcs=[lambda completions, **k: [0.0] * len(completions)],
                         processing_class=AutoTokenizer.from_pretrained(model_dir),
                         train_dataset=Dataset.from_dict({"prompt": ["x"]}),
                         peft_config=peft_config)
    tr.model.train()
    tr.current_gradient_accumulation_steps = n_micro
    return tr


def trl_micro_batches(episodes, micro: int, pad_id: int):
    """Padded TRL inputs: left-padded prompts, right-padded completions, per micro-batch."""
    import torch
    batches = []
    for i in range(0, len(episodes), micro):
        chunk = episodes[i:i + micro]
        n_prompt = [len(e.token_ids) - e.num_actions for e in chunk]
        P, C = max(n_prompt), max(e.num_actions for e in chunk)
        prompt_ids = torch.full((len(chunk), P), pad_id)
        prompt_mask = torch.zeros(len(chunk), P, dtype=torch.long)
        comp_ids = torch.full((len(chunk), C), pad_id)
        comp_mask = torch.zeros(len(chunk), C, dtype=torch.long)
        for j, (e, p) in enumerate(zip(chunk, n_prompt)):
            prompt_ids[j, P - p:] = torch.tensor(e.token_ids[:p])
            prompt_mask[j, P - p:] = 1
            comp_ids[j, :e.num_actions] = torch.tensor(e.token_ids[p:])
            comp_mask[j, :e.num_actions] = 1
        batches.append({"prompt_ids": prompt_ids, "prompt_mask": prompt_mask,
                        "completion_ids": comp_ids, "completion_mask": comp_mask,
                        "advantages": torch.tensor([e.advantage for e in chunk])})
    return batches


class TrlStep:
    """TRL's DAPO loss over padded micro-batches with accumulation, then clip + AdamW."""

    def __init__(self, model_dir: Path, episodes, micro: int, out: Path, *, peft_config=None,
                 autocast: bool = False):
        import torch
        n_micro = -(-len(episodes) // micro)
        self.tr = trl_trainer(model_dir, micro, n_micro, out, peft_config)
        self.autocast = autocast
        self.batches = trl_micro_batches(episodes, micro, self.tr.processing_class.pad_token_id)
        total = sum(int(b["completion_mask"].sum()) for b in self.batches)
        model = self.tr.model
        for b in self.batches:
            ids = torch.cat([b["prompt_ids"], b["completion_ids"]], 1)
            mask = torch.cat([b["prompt_mask"], b["completion_mask"]], 1)
            with torch.no_grad(), self._precision():
                old, _, _ = self.tr._get_per_token_logps_and_entropies(
                    model, ids, mask, b["completion_ids"].shape[1])
            b["old_per_token_logps"] = old.float()
            b["num_items_in_batch"] = torch.tensor(float(total))
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=1e-6, weight_decay=0.1)

    def _precision(self):
        import torch
        return (torch.autocast("cpu", dtype=torch.bfloat16) if self.autocast
                else contextlib.nullcontext())

    def __call__(self) -> None:
        import torch
        model = self.tr.model
        for b in self.batches:
            with self._precision():
                loss = self.tr._compute_loss(model, b)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def trl_step(model_dir: Path, episodes, micro: int, out: Path, lora: int, autocast: str) -> TrlStep:
    """TRL's side at LoRA rank `lora` (0: full fine-tuning) and trainer.autocast setting `autocast`."""
    import torch

    from swe_rlvr import precision
    from swe_rlvr.config_training import LoraConfig
    from trainer.lora import peft_config
    return TrlStep(model_dir, episodes, micro, out,
                   peft_config=peft_config(LoraConfig(r=lora)) if lora else None,
                   autocast=precision.autocast_enabled(autocast, torch.device("cpu")))
