"""Update loops on the tiny model: toy learning (RFT, DAPO, DPO), masks, metrics, checkpoints."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from lora_support import grads, lora_model
from swe_rlvr.artifacts import TRAIN_METRICS, table
from swe_rlvr.config import Config, load_config
from trainer.episodes import Episode, episodes_from_rows
from trainer.losses import dapo_loss
from trainer.packing import pack

PROMPT = tuple(range(40, 56))          # 16 prompt tokens
GOOD = (300, 301, 302, 303, 304, 305)  # the rewarded action
BAD = (700, 701, 702, 703, 704, 705)   # the penalised action


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _cfg(**trainer) -> Config:
    base = {"device": "cpu", "rft_lr": 1e-3, "lr": 1e-3, "pack_tokens": 256, "sft_batch_size": 4}
    return load_config(overrides=[f"trainer.{k}={v}" for k, v in {**base, **trainer}.items()])


def _episode(action, adv=0.0, resolved=False, logprobs=None):
    ids = PROMPT + action
    mask = (0,) * len(PROMPT) + (1,) * len(action)
    return Episode(ids, mask, logprobs or (0.0,) * len(ids), advantage=adv, resolved=resolved)


def _action_logprob(model_dir, action) -> float:
    """Mean log-prob of the action tokens after PROMPT under the model in model_dir."""
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    model = load_model(model_dir, torch.device("cpu"), grad_checkpointing=False)
    ep = _episode(action)
    with torch.no_grad():
        lp, _ = packed_logprobs(model, pack([ep], 256)[0])
    return float(lp.sum() / ep.num_actions)


def test_rft_raises_logprob_of_resolved_actions(tiny_model_dir, tmp_path):
    eps = [_episode(GOOD, resolved=True)] * 8 + [_episode(BAD, resolved=False)] * 8
    before = _action_logprob(tiny_model_dir, GOOD), _action_logprob(tiny_model_dir, BAD)
    result = __import__("trainer.loops").loops.run_rft(tiny_model_dir, eps, _cfg(), tmp_path)
    after = _action_logprob(result.checkpoint, GOOD), _action_logprob(result.checkpoint, BAD)
    assert after[0] > before[0] + 0.5                  # trained on: up
    assert len(result.metrics) == 2                    # 8 resolved episodes / 4 per step
    assert set(result.metrics[0]) == set(TRAIN_METRICS.names)
    table("train_metrics", result.metrics)             # the rows fit the artifact schema
    assert result.metrics[0]["phase"] == "rft" and result.metrics[0]["tokens"] == 4 * 22


def test_dapo_raises_rewarded_and_lowers_penalised(tiny_model_dir, tmp_path):
    from trainer.loops import run_dapo
    eps = [_episode(GOOD, adv=1.0)] * 4 + [_episode(BAD, adv=-1.0)] * 4
    before = _action_logprob(tiny_model_dir, GOOD), _action_logprob(tiny_model_dir, BAD)
    result = run_dapo(tiny_model_dir, eps, _cfg(minibatches=2, epochs=2), tmp_path)
    after = _action_logprob(result.checkpoint, GOOD), _action_logprob(result.checkpoint, BAD)
    assert after[0] > before[0] and after[1] < before[1]
    assert [r["step"] for r in result.metrics] == [1, 2, 3, 4]
    first = result.metrics[0]
    assert first["phase"] == "dapo" and first["approx_kl"] == pytest.approx(0.0, abs=1e-9)
    assert first["clip_frac_low"] == 0.0 and first["entropy"] > 0
    table("train_metrics", result.metrics)


def test_dpo_prefers_chosen(tiny_model_dir, tmp_path):
    from trainer.loops import run_dpo
    pairs = [(_episode(GOOD, resolved=True), _episode(BAD))] * 4
    cfg = _cfg(dpo_batch_pairs=2, dpo_sft_warmup=False)
    cfg = dataclasses.replace(cfg, algorithm=dataclasses.replace(cfg.algorithm, dpo_beta=0.5))
    result = run_dpo(tiny_model_dir, pairs, cfg, tmp_path)
    margin = _action_logprob(result.checkpoint, GOOD) - _action_logprob(result.checkpoint, BAD)
    margin0 = _action_logprob(tiny_model_dir, GOOD) - _action_logprob(tiny_model_dir, BAD)
    assert margin > margin0
    assert [r["phase"] for r in result.metrics] == ["dpo", "dpo"]


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_masked_tokens_contribute_exactly_zero_gradient(tiny_model_dir, lora):
    """Observation, guidance and format-error tokens (loss_mask 0) get exactly zero gradient."""
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    spans = {"prompt": (0, 8, 0), "action": (8, 14, 1), "observation": (14, 22, 0),
             "guidance": (22, 30, 0), "format_error": (30, 36, 0), "action2": (36, 42, 1)}
    mask = [0] * 42
    for start, end, m in spans.values():
        mask[start:end] = [m] * (end - start)
    ep = Episode(tuple(range(100, 142)), tuple(mask), (-1.0,) * 42, advantage=1.0)
    model = (lora_model(tiny_model_dir) if lora
             else load_model(tiny_model_dir, torch.device("cpu"), grad_checkpointing=False))
    row = pack([ep], 64)[0]
    logp, _ = packed_logprobs(model, row)
    logp.retain_grad()
    loss, _ = dapo_loss(logp, row.sampler_logprobs, row.advantages, row.loss_mask, num_tokens=12)
    loss.backward()
    for name in ("observation", "guidance", "format_error", "prompt"):
        start, end, _ = spans[name]
        assert torch.count_nonzero(logp.grad[start:end]) == 0, name
        assert torch.count_nonzero(logp[start:end].detach()) == 0, name   # the head never ran there
    assert torch.count_nonzero(logp.grad[8:14]) == 6


def test_strip_mode_removes_guidance_and_reports_mismatch(tiny_model_dir, tmp_path):
    from trainer.loops import run_dapo
    guidance = tuple(range(900, 910))
    ids = PROMPT + guidance + GOOD
    mask = (0,) * (len(PROMPT) + len(guidance)) + (1,) * len(GOOD)
    ep = Episode(ids, mask, (0.0,) * (len(ids) - 6) + (-1.0,) * 6, advantage=1.0,
                 guidance_span=(len(PROMPT), len(PROMPT) + len(guidance)))
    bad = dataclasses.replace(ep, token_ids=PROMPT + guidance + BAD, advantage=-1.0)
    cfg = _cfg()
    cfg = dataclasses.replace(cfg, guidance=dataclasses.replace(cfg.guidance, mode="strip"))
    result = run_dapo(tiny_model_dir, [ep, bad], cfg, tmp_path)
    assert result.metrics[0]["tokens"] == 2 * (len(PROMPT) + 6)     # guidance gone
    assert result.metrics[0]["sampler_mismatch"] > 1.0               # sampler said -1.0; model ~ -7.6


def test_final_checkpoint_is_hf_format_with_tokenizer(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.loops import run_rft
    result = run_rft(tiny_model_dir, [_episode(GOOD, resolved=True)] * 2, _cfg(), tmp_path)
    names = {p.name for p in result.checkpoint.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= names
    assert "swe_rlvr" not in json.dumps(json.loads((result.checkpoint / "config.json").read_text()))
    AutoModelForCausalLM.from_pretrained(result.checkpoint)
    AutoTokenizer.from_pretrained(result.checkpoint)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temp dirs left


def test_every_optimiser_step_gives_its_freed_memory_back(tiny_model_dir, tmp_path, monkeypatch):
    """A step's freed activations would stay resident as heap fragments under the next step's
    peak, so each step ends with `swe_rlvr.memory.trim` (malloc_trim)."""
    from swe_rlvr import memory
    from trainer.loops import run_rft
    calls = []
    monkeypatch.setattr(memory, "trim", lambda: calls.append(1))
    result = run_rft(tiny_model_dir, [_episode(GOOD, resolved=True)] * 4,
                     _cfg(sft_batch_size=1, rft_epochs=1, keep_freed_pages=False), tmp_path)
    assert len(result.metrics) == 4 and len(calls) >= 4


def test_keep_freed_pages_runs_the_loop_inside_the_kept_block(tiny_model_dir, tmp_path,
                                                              monkeypatch):
    """`trainer.keep_freed_pages` (the default): the step loop runs inside
    `memory.kept_under_ceiling` at `trainer.freed_pages_ceiling_gb` (entered once, its call made
    after every step, left before the final save) instead of trimming; 0 GiB asks for its own
    ceiling (None)."""
    import contextlib

    from swe_rlvr import memory
    from trainer.loops import run_rft
    events = []

    @contextlib.contextmanager
    def kept(ceiling):
        events.append(("enter", ceiling))
        yield lambda: events.append("step")
        events.append("leave")

    monkeypatch.setattr(memory, "kept_under_ceiling", kept)
    monkeypatch.setattr(memory, "trim", lambda: events.append("trim"))
    episodes = [_episode(GOOD, resolved=True)] * 3
    result = run_rft(tiny_model_dir, episodes, _cfg(sft_batch_size=1, rft_epochs=1,
                                                    freed_pages_ceiling_gb=1.5), tmp_path / "a")
    assert len(result.metrics) == 3
    assert events == [("enter", 3 << 29), "step", "step", "step", "leave"]
    events.clear()
    run_rft(tiny_model_dir, episodes, _cfg(sft_batch_size=1, rft_epochs=1), tmp_path / "b")
    assert events[0] == ("enter", None)


def test_episodes_from_rows_joins_and_filters():
    rollouts = [{"episode_id": "e1", "instance_id": "i", "token_ids": [1, 2, 3], "loss_mask": [0, 1, 1],
                 "logprobs": [0.0, -0.1, -0.2], "guidance_start": -1, "guidance_end": -1},
                {"episode_id": "e2", "instance_id": "i", "token_ids": [1, 2], "loss_mask": [0, 1],
                 "logprobs": [0.0, -0.3], "guidance_start": 1, "guidance_end": 1}]
    rewards = [{"episode_id": "e1", "advantage": 0.5, "kept": True, "reward": 1.0, "reward_resolved": 1.0},
               {"episode_id": "e2", "advantage": 0.0, "kept": False, "reward": 0.0, "reward_resolved": 0.0}]
    (ep,) = episodes_from_rows(rollouts, rewards)
    assert ep.advantage == 0.5 and ep.resolved and ep.guidance_span is None
    assert len(episodes_from_rows(rollouts, rewards, kept_only=False)) == 2


def test_unknown_engine_error_names_the_choices(tiny_model_dir, tmp_path):
    """The config refuses the name first; the trainer's registry refuses it too."""
    from trainer.loops import run_rft
    cfg = _cfg()
    cfg = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, engine="jax"))
    with pytest.raises(ValueError, match="choose one of: torch, deepspeed"):
        run_rft(tiny_model_dir, [_episode(GOOD, resolved=True)], cfg, tmp_path)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_gradient_checkpointing_gives_the_same_gradients(tiny_model_dir, lora):
    """Also under LoRA, where a frozen base's checkpointed layers need an input that requires
    grad (`enable_input_require_grads`) for the adapters to get any."""
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    row = pack([_episode(GOOD, adv=1.0), _episode(BAD, adv=-1.0)], 256)[0]
    runs = []
    for ckpt in (False, True):
        model = (lora_model(tiny_model_dir, grad_checkpointing=ckpt) if lora
                 else load_model(tiny_model_dir, torch.device("cpu"), grad_checkpointing=ckpt))
        assert model.is_gradient_checkpointing == ckpt
        logp, _ = packed_logprobs(model, row)
        loss, _ = dapo_loss(logp, logp.detach() - 0.1, row.advantages, row.loss_mask, num_tokens=12)
        loss.backward()
        runs.append(grads(model))
    assert runs[0].keys() == runs[1].keys() and len(runs[0]) == (28 if lora else 26)
    for name, g in runs[0].items():
        assert torch.allclose(g, runs[1][name], atol=1e-7, rtol=1e-5), name


def test_dapo_with_k3_kl_runs_and_starts_at_zero_kl(tiny_model_dir, tmp_path):
    from trainer.loops import run_dapo
    cfg = _cfg()
    cfg = dataclasses.replace(cfg, algorithm=dataclasses.replace(cfg.algorithm, kl_coef=0.1))
    result = run_dapo(tiny_model_dir, [_episode(GOOD, adv=1.0), _episode(BAD, adv=-1.0)], cfg, tmp_path)
    # one step from the reference weights: ratio 1 and KL 0, so the loss is the plain surrogate
    # -(sum of A over 12 action tokens)/12 = -(6 - 6)/12 = 0
    assert result.metrics[0]["loss"] == pytest.approx(0.0, abs=1e-7)
    assert (tmp_path / "ref_logprobs.pt").is_file()


# --------------------------------------------------------------------------- pinned numbers

PIN_EPISODES = [(GOOD, 1.0, True, "a"), (BAD + (706, 707), -1.0, False, "a"),
                (GOOD[:3], 0.5, True, "b"), (BAD[:5], -0.5, False, "b")] * 2
PINNED = {  # the loops' losses, grad norms and sum |w| of the result, before the MicroBatch rewrite
    "rft": ([7.506291389465332], [9.580456733703613], 9524.82979097751),
    "dapo": ([-0.3181818276643753, 0.48344823718070984], [5.5723042488098145, 3.0273311138153076],
             9535.965635451004),
    "grpo": ([-0.24999991059303284, 0.12826117873191833], [5.302529811859131, 2.0436434745788574],
             9535.722709169235),
    "dpo": ([7.506291389465332, 0.6931471824645996, 0.4955211579799652],
            [9.580456733703613, 2.8474984169006348, 2.0832812786102295], 9555.21733896435),
}


def _pin_cfg(name: str, **trainer) -> Config:
    base = {"device": "cpu", "rft_lr": 1e-3, "lr": 1e-3, "pack_tokens": 40, "sft_batch_size": 4}
    agg = ["algorithm.loss_agg=seq_mean"] if name == "grpo" else []
    return load_config(overrides=[f"trainer.{k}={v}" for k, v in {**base, **trainer}.items()]
                       + [f"algorithm.name={name}"] + agg)


@pytest.mark.parametrize("loop", list(PINNED))
def test_loops_reproduce_their_pinned_numbers(tiny_model_dir, tmp_path, loop):
    """Two instances, prompts shared, rows of <= 40 tokens: several micro-batches a step."""
    from safetensors.torch import load_file

    from trainer import loops
    eps = [Episode(PROMPT + act, (0,) * len(PROMPT) + (1,) * len(act),
                   (-0.5,) * (len(PROMPT) + len(act)), advantage=adv, resolved=ok, instance_id=i)
           for act, adv, ok, i in PIN_EPISODES]
    if loop == "rft":
        result = loops.run_rft(tiny_model_dir, eps, _pin_cfg("dapo"), tmp_path)
    elif loop == "dpo":
        pairs = [(eps[0], eps[1]), (eps[2], eps[3])] * 2
        result = loops.run_dpo(tiny_model_dir, pairs, _pin_cfg("dpo", dpo_batch_pairs=2), tmp_path)
    else:
        result = loops.run_dapo(tiny_model_dir, eps, _pin_cfg(loop, minibatches=2), tmp_path)
    losses, norms, total = PINNED[loop]
    assert [r["loss"] for r in result.metrics] == pytest.approx(losses, rel=1e-5, abs=1e-6)
    assert [r["grad_norm"] for r in result.metrics] == pytest.approx(norms, rel=1e-5)
    weights = load_file(result.checkpoint / "model.safetensors")
    assert sum(float(w.double().abs().sum()) for w in weights.values()) == pytest.approx(total, rel=1e-7)


# --------------------------------------------------------------------------- loss aggregation


@pytest.mark.parametrize("lora", [0, 4], ids=["full", "lora"])
@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean", "seq_mean_token_sum_norm"])
def test_a_step_in_several_rows_has_the_one_row_gradient(tiny_model_dir, loss_agg, lora):
    """Gradient accumulation over packed rows divides by the whole step's count, not each row's:
    the loop's own pieces (normalisers, micro-batches, step loss, engine) on 4 rows or 1."""
    import functools

    from trainer.engine_torch import TorchEngine
    from trainer.loops import micro_batches, prepare, step_normalisers
    from trainer.microbatch import policy_step_loss
    eps = prepare([_episode(GOOD, adv=1.0), _episode(BAD, adv=-1.0), _episode(GOOD[:2], adv=0.5),
                   _episode(BAD[:4], adv=-0.5)], "strip")
    runs = []
    for budget in (24, 256):                        # 4 rows of one episode, or all 4 in one row
        cfg = _cfg(pack_tokens=budget, share_prefix=False, **{"lora.r": lora})
        cfg = dataclasses.replace(cfg, algorithm=dataclasses.replace(
            cfg.algorithm, name="dapo" if loss_agg == "token_mean" else "grpo", loss_agg=loss_agg),
            agent=dataclasses.replace(cfg.agent, context_tokens=32))   # Dr.GRPO's constant
        rows = [pack(eps, budget, share_prefix=False)]
        assert len(rows[0]) == (4 if budget == 24 else 1)
        engine = TorchEngine(tiny_model_dir, cfg.trainer, lr=1e-3, total_steps=1)
        norms = step_normalisers(cfg, rows, [[0, 1, 2, 3]])
        (step,) = micro_batches(rows, [list(range(len(rows[0])))], norms)
        loss_fn = functools.partial(policy_step_loss, clip_low=0.2, clip_high=0.28)
        for mb in step:
            logp, _ = engine.logprobs(mb.row)
            old = logp.detach() - 0.1 * mb.mask       # ratio e^0.1 on actions: inside the clip
            loss, _ = loss_fn(dataclasses.replace(mb, old_logprobs=old), logp)
            engine.backward(loss)
        runs.append(grads(engine.model))
    assert runs[0].keys() == runs[1].keys()
    atol = 1e-6 if lora else 1e-7     # B's gradients run to 0.4: fp32 summation order, ~1e-6 of it
    for name, g in runs[1].items():
        assert torch.allclose(runs[0][name], g, atol=atol, rtol=1e-4), name


def test_grpo_with_a_token_mean_is_refused_with_the_fix(tiny_model_dir, tmp_path):
    from trainer.loops import run_dapo
    cfg = _cfg()
    cfg = dataclasses.replace(cfg, algorithm=dataclasses.replace(cfg.algorithm, name="grpo"))
    with pytest.raises(ValueError, match="algorithm.loss_agg=seq_mean"):
        run_dapo(tiny_model_dir, [_episode(GOOD, adv=1.0)], cfg, tmp_path)


def test_sampler_old_logprobs_stand_in_only_where_they_are_policy_ks(tiny_model_dir, tmp_path):
    """trainer.old_logprobs=sampler skips the old log-probs' forward: the first step's ratio is
    then against the sampler's log-probs (here a made-up -2.0, so the mismatch metric, old vs
    sampler, is 0). A sampler at another temperature, or a row whose guidance the trainer strips,
    was not sampling policy k in that context, and is recomputed; so is a bf16 sampler, or any
    sampler of a trainer under bf16 autocast (not the same numerics)."""
    from trainer.loops import run_dapo
    lp = (0.0,) * len(PROMPT) + (-2.0,) * len(GOOD)
    eps = [_episode(GOOD, adv=1.0, logprobs=lp), _episode(BAD, adv=-1.0, logprobs=lp)]
    mismatch = lambda cfg, out: run_dapo(tiny_model_dir, eps, cfg, tmp_path / out  # noqa: E731
                                         ).metrics[0]["sampler_mismatch"]
    assert mismatch(_cfg(old_logprobs="sampler"), "sampler") == 0.0
    assert mismatch(_cfg(), "recompute") > 1.0                     # the model's ~-7.6, not -2.0
    hot = load_config(overrides=["trainer.device=cpu", "trainer.old_logprobs=sampler",
                                 "trainer.pack_tokens=256", "engine.temperature=0.7"])
    assert mismatch(hot, "hot") > 1.0
    for precision in ("engine.dtype=bfloat16", "trainer.autocast=bf16"):   # not the trainer's fp32
        bf16 = load_config(overrides=["trainer.device=cpu", "trainer.old_logprobs=sampler",
                                      "trainer.pack_tokens=256", precision])
        assert mismatch(bf16, precision.split("=")[0]) > 1.0
    guided = [dataclasses.replace(e, token_ids=PROMPT + (900,) * 4 + e.token_ids[len(PROMPT):],
                                  loss_mask=(0,) * 4 + e.loss_mask, logprobs=(0.0,) * 4 + lp,
                                  guidance_span=(len(PROMPT), len(PROMPT) + 4)) for e in eps]
    cfg = _cfg(old_logprobs="sampler")
    strip = dataclasses.replace(cfg, guidance=dataclasses.replace(cfg.guidance, mode="strip"))
    assert run_dapo(tiny_model_dir, guided, strip, tmp_path / "strip"
                    ).metrics[0]["sampler_mismatch"] > 1.0
    keep = dataclasses.replace(cfg, guidance=dataclasses.replace(cfg.guidance, mode="keep"))
    assert run_dapo(tiny_model_dir, guided, keep, tmp_path / "keep"
                    ).metrics[0]["sampler_mismatch"] == 0.0


def test_bf16_autocast_keeps_no_weight_cache(tiny_model_dir):
    """The trainer's bf16 autocast casts each weight where it is used and keeps no bf16 copies
    (they held 125-270 MB of an update's peak); the log-probs are those of a cached autocast."""
    from trainer.engine_torch import TorchEngine
    from trainer.forward import packed_logprobs
    engine = TorchEngine(tiny_model_dir, _cfg(autocast="bf16").trainer, lr=1e-3, total_steps=1)
    row = pack([_episode(GOOD), _episode(BAD)], 256)[0]
    with engine.autocast():
        assert torch.is_autocast_enabled("cpu") and not torch.is_autocast_cache_enabled()
    uncached, _ = engine.logprobs(row)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cached, _ = packed_logprobs(engine.model, row)
    assert torch.equal(uncached, cached)
