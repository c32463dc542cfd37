"""LoRA (`trainer.lora`): only the adapters train and hold AdamW state, a fresh adapter is the base
from its seed, checkpoints hold the adapter, its base pointer and the merged model the engines
load, updates continue one adapter on one base, and a resumed run is bitwise the unbroken one."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch

from lora_support import LORA, lora_trainer_config
from swe_rlvr.config import Config, load_config
from trainer.episodes import Episode
from trainer.packing import pack

PROMPT = tuple(range(40, 56))
GOOD = (300, 301, 302, 303, 304, 305)
BAD = (700, 701, 702, 703, 704, 705)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _episode(action, adv=0.0, resolved=False):
    ids = PROMPT + action
    return Episode(ids, (0,) * len(PROMPT) + (1,) * len(action), (0.0,) * len(ids),
                   advantage=adv, resolved=resolved)


def _cfg(*extra: str, r: int = 4) -> Config:
    """A tiny-model training config with LoRA of rank r (LoRA learns at higher rates)."""
    return load_config(overrides=["trainer.device=cpu", "trainer.rft_lr=1e-2", "trainer.lr=1e-2",
                                  "trainer.pack_tokens=256", "trainer.sft_batch_size=4",
                                  f"trainer.lora.r={r}", *extra])


def _row():
    return pack([_episode(GOOD, 1.0), _episode(BAD, -1.0)], 256)[0]


def _engine(model_dir, **fields):
    from trainer.engine_torch import TorchEngine
    return TorchEngine(model_dir, lora_trainer_config(**fields), lr=1e-2, total_steps=4)


def _lora(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def test_only_the_adapters_train_and_hold_optimizer_state(tiny_model_dir):
    """The base has no gradient, no AdamW state and does not move; B (zero at the start) gets a
    gradient and A none (dL/dA = B^T ... = 0), as in peft's own first step."""
    engine = _engine(tiny_model_dir)
    named = dict(engine.model.named_parameters())
    trainable = {n for n, p in named.items() if p.requires_grad}
    # 2 layers x 7 projections x (A, B)
    assert len(trainable) == 28 and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert {id(p) for p in engine.optimizer.param_groups[0]["params"]} == {id(named[n]) for n in trainable}
    base = {n: p.detach().clone() for n, p in named.items() if n not in trainable}
    row = _row()
    logp, _ = engine.logprobs(row)
    engine.backward(-(logp * row.loss_mask).sum())
    assert all(named[n].grad is None for n in base)
    assert all(float(named[n].grad.abs().sum()) == 0.0 for n in trainable if "lora_A" in n)
    assert all(float(named[n].grad.abs().sum()) > 0.0 for n in trainable if "lora_B" in n)
    engine.step()
    assert {id(p) for p in engine.optimizer.state} == {id(named[n]) for n in trainable}
    assert all(torch.equal(named[n], w) for n, w in base.items())
    assert all(float(named[n].detach().abs().sum()) > 0 for n in trainable if "lora_B" in n)


def test_a_fresh_adapter_is_the_base_drawn_from_its_seed(tiny_model_dir):
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    row = _row()
    full = load_model(tiny_model_dir, torch.device("cpu"), grad_checkpointing=False)
    a, b, other = _engine(tiny_model_dir), _engine(tiny_model_dir), _engine(tiny_model_dir, seed=1)
    with torch.no_grad():
        assert torch.equal(a.logprobs(row)[0], packed_logprobs(full, row)[0])     # B = 0
    assert all(torch.equal(w, _lora(b.model)[n]) for n, w in _lora(a.model).items())
    assert not torch.equal(*(_lora(m.model)["model.layers.0.self_attn.q_proj.lora_A.default.weight"]
                             for m in (a, other)))


def test_under_bf16_autocast_the_frozen_base_is_bf16_and_changes_no_log_prob(tiny_model_dir):
    """autocast casts every linear weight to bf16 for its matmul anyway: storing the frozen ones
    in bf16 gives bit for bit the log-probs of full fine-tuning's autocast forward."""
    from trainer.engine_torch import TorchEngine
    from trainer.forward import packed_logprobs
    engine = _engine(tiny_model_dir, autocast="bf16")
    dtypes = {n: p.dtype for n, p in engine.model.named_parameters()}
    assert dtypes["model.layers.0.mlp.down_proj.base_layer.weight"] == torch.bfloat16
    assert dtypes["model.layers.0.self_attn.q_proj.base_layer.bias"] == torch.bfloat16
    for name in ("model.layers.0.mlp.down_proj.lora_B.default.weight", "model.embed_tokens.weight",
                 "model.layers.0.input_layernorm.weight", "model.norm.weight"):
        assert dtypes[name] == torch.float32, name
    full = TorchEngine(tiny_model_dir, dataclasses.replace(lora_trainer_config(autocast="bf16"),
                                                           lora=dataclasses.replace(LORA, r=0)),
                       lr=1e-2, total_steps=4)
    row = _row()
    with torch.no_grad():
        ours = engine.logprobs(row)[0]
        with full.autocast():
            assert torch.equal(ours, packed_logprobs(full.model, row)[0])


def test_adapter_dropout_acts_in_gradient_passes_only(tiny_model_dir):
    engine = _engine(tiny_model_dir, lora=dataclasses.replace(LORA, dropout=0.5))
    with torch.no_grad():
        for n, p in engine.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
        row = _row()
        first, second = engine.logprobs(row)[0], engine.logprobs(row)[0]
    assert torch.equal(first, second)                          # old / reference log-probs
    assert not torch.equal(engine.logprobs(row)[0].detach(), first)


@pytest.mark.parametrize("target", ["qkv_proj", "lm_head"])
def test_a_target_outside_the_decoder_layers_is_refused_with_their_names(tiny_model_dir, target):
    with pytest.raises(ValueError, match=rf"\['{target}'\].*choose among: down_proj, gate_proj"):
        _engine(tiny_model_dir, lora=dataclasses.replace(LORA, targets=("q_proj", target)))


def test_deepspeed_refuses_lora_with_the_fix(tiny_model_dir):
    from trainer.engine_deepspeed import DeepSpeedEngine
    with pytest.raises(ValueError, match="trainer.engine=torch"):
        DeepSpeedEngine(tiny_model_dir, lora_trainer_config(engine="deepspeed"), lr=1e-2,
                        total_steps=1)


def _action_logprob(model_dir, action) -> float:
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    model = load_model(model_dir, torch.device("cpu"), grad_checkpointing=False)
    with torch.no_grad():
        lp, _ = packed_logprobs(model, pack([_episode(action)], 256)[0])
    return float(lp.sum() / len(action))


def test_the_checkpoint_holds_the_adapter_its_base_and_a_merged_model_engines_load(
        tiny_model_dir, tmp_path):
    """RFT with LoRA: `adapter/` (peft's files, the base pointer) beside a merged HF model that
    AutoModelForCausalLM loads as a plain model, whose log-probs are the adapted model's, and
    that the hf engine samples from with the trainer's log-probs."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from trainer.engine_torch import TorchEngine
    from trainer.loops import run_rft
    eps = [_episode(GOOD, resolved=True)] * 8
    ckpt = run_rft(tiny_model_dir, eps, _cfg(), tmp_path).checkpoint
    saved = json.loads((ckpt / "adapter" / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == str(tiny_model_dir.resolve())
    assert (saved["r"], saved["lora_alpha"]) == (4, 32)
    assert all("lora_" in k for k in load_file(ckpt / "adapter" / "adapter_model.safetensors"))
    merged = AutoModelForCausalLM.from_pretrained(ckpt)
    assert not any("lora" in n for n, _ in merged.named_parameters())   # a plain model
    assert _action_logprob(ckpt, GOOD) > _action_logprob(tiny_model_dir, GOOD) + 0.5

    adapted = TorchEngine(ckpt, _cfg().trainer, lr=1e-2, total_steps=1)   # the adapter, continued
    row = pack([_episode(GOOD)], 256)[0]
    with torch.no_grad():
        via_adapter = adapted.logprobs(row)[0]
    assert (via_adapter - _packed(ckpt, row)).abs().max() < 1e-5

    from agent.engines import SamplingParams, make_engine
    from swe_rlvr.config import EngineConfig
    sampler = make_engine(EngineConfig(name="hf", model=str(ckpt), torch_threads=1))
    (sample,) = sampler.generate([list(PROMPT)], SamplingParams(temperature=1.0, max_new_tokens=8,
                                                                seed=0))
    ep = Episode(PROMPT + tuple(sample.token_ids), (0,) * len(PROMPT) + (1,) * len(sample.token_ids),
                 (0.0,) * (len(PROMPT) + len(sample.token_ids)))
    with torch.no_grad():
        trainer_lp = adapted.logprobs(pack([ep], 256)[0])[0][len(PROMPT):]
    assert (trainer_lp - torch.tensor(sample.logprobs)).abs().max() < 1e-4


def _packed(model_dir, row) -> torch.Tensor:
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    with torch.no_grad():
        return packed_logprobs(load_model(model_dir, torch.device("cpu"), False), row)[0]


def _base(ckpt) -> str:
    return json.loads((ckpt / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]


def test_updates_continue_one_adapter_on_one_base(tiny_model_dir, tmp_path):
    """SFT warm-up -> DPO -> DAPO with LoRA train one adapter on the original base; another rank
    starts a fresh adapter on the merged policy."""
    from safetensors.torch import load_file

    from trainer.engine_torch import TorchEngine
    from trainer.loops import run_dapo, run_dpo
    cfg = _cfg("trainer.dpo_batch_pairs=2")
    dpo = run_dpo(tiny_model_dir, [(_episode(GOOD, resolved=True), _episode(BAD))] * 4, cfg,
                  tmp_path / "dpo").checkpoint
    assert [_base(c) for c in (tmp_path / "dpo" / "sft" / "final", dpo)] == [
        str(tiny_model_dir.resolve())] * 2
    saved = load_file(dpo / "adapter" / "adapter_model.safetensors")
    engine = TorchEngine(dpo, cfg.trainer, lr=1e-2, total_steps=1)
    for name, w in _lora(engine.model).items():   # peft's file names drop the adapter name
        assert torch.equal(w, saved["base_model.model." + name.replace(".default", "")]), name
    eps = [_episode(GOOD, adv=1.0), _episode(BAD, adv=-1.0)]
    assert _base(run_dapo(dpo, eps, cfg, tmp_path / "dapo").checkpoint) == str(tiny_model_dir.resolve())
    fresh = run_dapo(dpo, eps, _cfg(r=8), tmp_path / "r8").checkpoint
    assert _base(fresh) == str(dpo.resolve())


def test_a_resumed_lora_run_is_bitwise_the_unbroken_one(tiny_model_dir, tmp_path):
    """Resume from the step-2 checkpoint (adapter, base pointer, AdamW state of the adapters)."""
    from safetensors.torch import load_file

    from trainer.loops import run_dapo
    cfg = _cfg("trainer.minibatches=4", "trainer.save_every=1", "trainer.keep_checkpoints=0")
    eps = [_episode(GOOD, adv=1.0), _episode(BAD, adv=-1.0)] * 2
    whole = run_dapo(tiny_model_dir, eps, cfg, tmp_path / "whole")
    (tmp_path / "broken" / "checkpoints").mkdir(parents=True)
    shutil.copytree(tmp_path / "whole" / "checkpoints" / "step_000002",
                    tmp_path / "broken" / "checkpoints" / "step_000002")
    shutil.copy(tmp_path / "whole" / "old_logprobs.pt", tmp_path / "broken")
    resumed = run_dapo(tiny_model_dir, eps, cfg, tmp_path / "broken")
    assert sorted(p.name for p in (tmp_path / "broken" / "checkpoints").iterdir()) == [
        "step_000002", "step_000003", "step_000004"]                 # steps 1-2 were not rerun
    assert [r["loss"] for r in resumed.metrics] == [r["loss"] for r in whole.metrics]
    for name in ("model.safetensors", "adapter/adapter_model.safetensors"):
        a, b = load_file(resumed.checkpoint / name), load_file(whole.checkpoint / name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
