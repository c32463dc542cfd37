"""Packing: first-fit-decreasing, segment bounds, and packed == unpacked loss and gradients."""

from __future__ import annotations

import pytest
import torch

from lora_support import grads, lora_model, stock_with_adapters
from trainer.episodes import Episode, strip_guidance, trim_tail
from trainer.losses import dapo_loss
from trainer.packing import first_fit_decreasing, instance_units, pack, shared_prefix


def _ep(n, n_prompt=2, adv=1.0, seed=0, vocab=2048):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (n,), generator=g).tolist()
    return Episode(tuple(ids), (0,) * n_prompt + (1,) * (n - n_prompt),
                   tuple(torch.randn(n, generator=g).clamp(max=0).tolist()), advantage=adv)


def test_first_fit_decreasing_hand_case():
    # lengths 5,4,3,3,2,1 into budget 8, longest first:
    # 5 -> bin0 (3 left); 4 -> bin1 (4 left); 3 -> bin0 (0 left); 3 -> bin1 (1 left);
    # 2 -> bin2 (6 left); 1 -> bin1 (0 left)
    assert first_fit_decreasing([5, 4, 3, 3, 2, 1], 8) == [[0, 2], [1, 3, 5], [4]]


def test_oversize_item_gets_its_own_bin():
    assert first_fit_decreasing([10, 2], 8) == [[0], [1]]


def test_pack_positions_bounds_and_no_padding():
    eps = [_ep(5, seed=1), _ep(3, seed=2), _ep(4, seed=3)]
    rows = pack(eps, 8)
    assert [r.episodes for r in rows] == [[0, 1], [2]]
    row = rows[0]
    assert row.position_ids.tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    assert row.cu_seqlens.tolist() == [0, 5, 8]
    assert row.seq_ids.tolist() == [0] * 5 + [1] * 3
    assert sum(r.num_tokens for r in rows) == 12          # 5 + 3 + 4: no padding anywhere


def test_pack_keeps_groups_together():
    eps = [_ep(4, seed=i) for i in range(4)]
    rows = pack(eps, 8, groups=[[0, 1], [2, 3]])
    assert sorted(r.episodes for r in rows) == [[0, 1], [2, 3]]


def _grouped(instance, prompt, own, first_action=0, adv=1.0):
    """An episode of `instance`: `prompt` tokens (no loss), then `own` tokens whose loss starts
    `first_action` tokens in."""
    mask = (0,) * (len(prompt) + first_action) + (1,) * (len(own) - first_action)
    lps = tuple(-0.1 * (i % 7) if m else 0.0 for i, m in enumerate(mask))
    return Episode(tuple(prompt) + tuple(own), mask, lps, advantage=adv, instance_id=instance)


def test_shared_prefix_stops_before_any_action_and_leaves_each_member_a_token():
    a = Episode((1, 2, 3, 4, 5), (0, 0, 0, 1, 1), (0.0,) * 5)
    b = Episode((1, 2, 3, 4, 6), (0, 0, 1, 1, 1), (0.0,) * 5)      # acts from token 2
    c = Episode((1, 2, 3), (0, 0, 0), (0.0,) * 3)                   # no action, 3 tokens
    assert shared_prefix([a]) == 0                                  # nothing to share with
    assert shared_prefix([a, a]) == 3                               # stops at a's first action
    assert shared_prefix([a, b]) == 2                               # ... and at b's
    assert shared_prefix([a, c]) == 2                               # c keeps 1 token of its own
    assert shared_prefix([a, Episode((1, 9, 3, 4, 5), a.loss_mask, a.logprobs)]) == 1


def test_shared_prefix_row_layout_hand_case():
    # a = 1 2 3 | 4 5 and b = 1 2 3 | 6 7 8 share the prompt 1 2 3 (instance x); c is alone.
    # Stored: a whole, then b's own 6 7 8 (positions 3..5, continuing the prefix), then c.
    # Virtual row (attention): a = 1 2 3 4 5, b = 1 2 3 6 7 8, c = 9 9 9 9 -> stored positions
    # 0 1 2 3 4 | 0 1 2 5 6 7 | 8 9 10 11. b's first own token (stored 5) is predicted by the
    # prefix's last token (stored 2); a's tokens take their outputs from virtual 0..4, b's from
    # virtual 5 + 3 .. 5 + 5 = 8..10, c's from 11..14.
    a = _grouped("x", [1, 2, 3], [4, 5])
    b = _grouped("x", [1, 2, 3], [6, 7, 8])
    c = Episode((9, 9, 9, 9), (0, 1, 1, 1), (0.0,) * 4)
    (row,) = pack([a, b, c], 100)
    assert row.input_ids.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9]
    assert row.position_ids.tolist() == [0, 1, 2, 3, 4, 3, 4, 5, 0, 1, 2, 3]
    assert row.cu_seqlens.tolist() == [0, 5, 8, 12]
    assert row.seq_ids.tolist() == [0] * 5 + [1] * 3 + [2] * 4
    assert row.loss_mask.tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1]
    assert row.prev_index.tolist() == [-1, 0, 1, 2, 3, 2, 5, 6, 7, 8, 9, 10]
    assert row.attn_index.tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 5, 6, 7, 8, 9, 10, 11]
    assert row.attn_cu.tolist() == [0, 5, 11, 15]
    assert row.out_index.tolist() == [0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 14]
    assert (row.num_tokens, row.episode_tokens) == (12, 15)
    assert row.input_ids[row.attn_index].tolist() == [*a.token_ids, *b.token_ids, *c.token_ids]
    (plain,) = pack([a, b, c], 100, share_prefix=False)
    assert plain.num_tokens == plain.episode_tokens == 15 and plain.attn_index is None
    (pair,) = pack([a, b], 100, groups=[[0, 1]])          # a DPO pair shares its prompt too
    assert pair.input_ids.tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert pair.attn_index.tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 5, 6, 7]


def test_an_instance_over_the_budget_is_cut_into_units_that_each_store_the_prefix():
    # lengths 10, 8, 6 with a 4-token prompt, budget 14, longest first:
    # 10 opens a unit (10 stored); 8 adds its own 4 -> 14; 6 would add 2 -> 16 > 14: a unit of
    # its own, alone, so it shares nothing.
    eps = [_grouped("x", [1, 2, 3, 4], list(range(10, 10 + n))) for n in (6, 4, 2)]
    assert instance_units(eps, 14) == [(4, [0, 1]), (0, [2])]
    assert [r.num_tokens for r in pack(eps, 14)] == [14, 6]


def test_lone_episodes_of_a_row_share_their_common_prefix():
    # one episode per instance (expert episodes): a = 1 2 3 7 | 4 5, b = 1 2 3 8 | 6 6,
    # c = 1 2 9 | 9 9 have 1 2 in common (a system prompt): stored a whole, then b from 3 and c
    # from 9, positions continuing from 2. A fourth starting elsewhere leaves them unmerged.
    a = _grouped("p", [1, 2, 3, 7], [4, 5])
    b = _grouped("q", [1, 2, 3, 8], [6, 6])
    c = _grouped("r", [1, 2, 9], [9, 9])
    (row,) = pack([a, b, c], 100)
    assert row.input_ids.tolist() == [1, 2, 3, 7, 4, 5, 3, 8, 6, 6, 9, 9, 9]
    assert row.position_ids.tolist() == [0, 1, 2, 3, 4, 5, 2, 3, 4, 5, 2, 3, 4]
    assert row.input_ids[row.attn_index].tolist() == [*a.token_ids, *b.token_ids, *c.token_ids]
    assert (row.num_tokens, row.episode_tokens) == (13, 17)
    (apart,) = pack([a, b, c, _grouped("s", [5], [5, 5])], 100)
    assert apart.attn_index is None and apart.num_tokens == 20
    assert [r.num_tokens for r in pack([a, b, c], 7)] == [6, 6, 5]   # a row each: nothing to share


def _model(model_dir, lora: bool):
    """The trainer's model of `model_dir`: plain, or with LoRA adapters (B random)."""
    from trainer.engine_torch import load_model
    return lora_model(model_dir) if lora else load_model(model_dir, torch.device("cpu"), False)


def _shared_rows_loss_and_grads(model_dir, eps, budget, share, lora):
    from trainer.forward import packed_logprobs
    model = _model(model_dir, lora)
    n = sum(e.num_actions for e in eps)
    total, per_token = 0.0, {}
    for row in pack(eps, budget, share_prefix=share):
        logp, _ = packed_logprobs(model, row)
        loss, _ = dapo_loss(logp, row.sampler_logprobs, row.advantages, row.loss_mask, num_tokens=n)
        loss.backward()
        total += loss.item()
        for t in row.loss_mask.nonzero().squeeze(-1).tolist():      # (episode, token) -> log-prob
            ep = int(row.seq_ids[t])
            per_token[(ep, int(row.position_ids[t]))] = float(logp[t].detach())
    return total, per_token, grads(model)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("budget", [512, 60])
def test_shared_prefix_changes_no_log_prob_loss_or_gradient(tiny_model_dir, budget, lora):
    """Two instances of three episodes each (one continuation acts on its very first token)
    and two lone episodes, all starting with one system prompt: sharing each instance's prompt,
    and the lone episodes' system prompt, gives the plain packing's per-token log-probs, DAPO
    loss and every gradient. Budget 60 cuts instances into several units."""
    g = torch.Generator().manual_seed(0)
    rand = lambda n: torch.randint(3, 2048, (n,), generator=g).tolist()  # noqa: E731
    system = rand(6)                                               # every prompt starts with it
    eps = []
    for inst, plen in (("x", 11), ("y", 3)):
        prompt = system + rand(plen)
        eps += [_grouped(inst, prompt, rand(12), 2, 1.0), _grouped(inst, prompt, rand(20), 0, -1.0),
                _grouped(inst, prompt, rand(7), 3, 0.5)]
    eps += [_grouped("", system + rand(5), rand(9), 1, -0.3),   # lone episodes share the system
            _grouped("z", system + rand(2), rand(6), 0, 0.8)]   # prompt (merge_lone)
    plain_loss, plain_lp, plain_grads = _shared_rows_loss_and_grads(tiny_model_dir, eps, budget,
                                                                    False, lora)
    loss, lp, shared_grads = _shared_rows_loss_and_grads(tiny_model_dir, eps, budget, True, lora)
    rows = pack(eps, budget)
    assert any(r.attn_index is not None for r in rows)
    assert sum(r.num_tokens for r in rows) < sum(len(e.token_ids) for e in eps)
    assert lp.keys() == plain_lp.keys() and len(lp) == sum(e.num_actions for e in eps)
    assert max(abs(lp[k] - plain_lp[k]) for k in lp) < 1e-5
    assert abs(loss - plain_loss) < 1e-6
    assert shared_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        assert torch.allclose(shared_grads[name], grad, atol=1e-7, rtol=1e-5), name


def test_strip_guidance_shifts_masks_and_logprobs():
    ep = Episode((1, 2, 9, 9, 3, 4), (0, 0, 0, 0, 1, 1), (0.0, 0.0, 0.0, 0.0, -0.5, -0.7),
                 guidance_span=(2, 4))
    out = strip_guidance(ep)
    assert out.token_ids == (1, 2, 3, 4)
    assert out.loss_mask == (0, 0, 1, 1) and out.logprobs == (0.0, 0.0, -0.5, -0.7)
    with pytest.raises(ValueError, match="guidance tokens carry loss_mask 1"):
        strip_guidance(Episode((1, 2, 3), (0, 1, 1), (0.0,) * 3, guidance_span=(1, 3)))


def test_trim_tail_cuts_after_the_last_action():
    # tokens: prompt 1 2 | action 3 4 | observation 5 | action 6 | observation 7 8
    ep = Episode((1, 2, 3, 4, 5, 6, 7, 8), (0, 0, 1, 1, 0, 1, 0, 0),
                 (0.0, 0.0, -0.1, -0.2, 0.0, -0.3, 0.0, 0.0), guidance_span=(4, 5))
    out = trim_tail(ep)
    assert out.token_ids == (1, 2, 3, 4, 5, 6)                 # the last action is token 6
    assert out.loss_mask == (0, 0, 1, 1, 0, 1) and out.logprobs[-1] == -0.3
    assert out.guidance_span == (4, 5)                          # before the cut: kept as is
    assert trim_tail(out) is out                                # nothing after the last action
    no_action = Episode((1, 2, 3), (0, 0, 0), (0.0,) * 3)
    assert trim_tail(no_action) is no_action
    tail_guidance = Episode((1, 2, 3, 9, 9), (0, 0, 1, 0, 0), (0.0,) * 5, guidance_span=(3, 5))
    assert trim_tail(tail_guidance).guidance_span is None       # the span went with the tail


def _unpacked_logprobs(model, ep):
    """Plain HF forward of one episode (stock SDPA, no packing): (T,) log-probs on actions."""
    ids = torch.tensor([ep.token_ids])
    logits = model(input_ids=ids, use_cache=False).logits[0]           # (T, V)
    lp = torch.log_softmax(logits[:-1].float(), -1).gather(-1, ids[0, 1:, None]).squeeze(-1)  # (T-1,)
    return torch.cat([torch.zeros(1), lp]) * torch.tensor(ep.loss_mask, dtype=torch.float32)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_packed_equals_unpacked_loss_and_gradients(tiny_model_dir, lora):
    """A stock HF forward per episode (with the same adapters under LoRA) against ours."""
    from transformers import AutoModelForCausalLM

    from trainer.forward import packed_logprobs
    eps = [_ep(37, 5, 1.0, 1), _ep(20, 3, -0.5, 2), _ep(50, 10, 0.8, 3)]
    olds = [torch.tensor(e.logprobs) * torch.tensor(e.loss_mask) for e in eps]
    n = sum(e.num_actions for e in eps)

    model = _model(tiny_model_dir, lora)
    ref = stock_with_adapters(tiny_model_dir, model) if lora else AutoModelForCausalLM.from_pretrained(
        tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    ref_loss = sum(dapo_loss(_unpacked_logprobs(ref, e), o, torch.tensor(e.advantage),
                             torch.tensor(e.loss_mask), num_tokens=n)[0] for e, o in zip(eps, olds))
    ref_loss.backward()

    (row,) = pack(eps, 128)
    logp, _ = packed_logprobs(model, row)
    old = torch.cat([olds[i] for i in row.episodes])
    loss, _ = dapo_loss(logp, old, row.advantages, row.loss_mask, num_tokens=n)
    loss.backward()
    assert abs(loss.item() - ref_loss.item()) < 1e-6
    ours, ref_grads = grads(model), grads(ref)
    assert ours.keys() == ref_grads.keys() and (not lora or all("lora_" in k for k in ours))
    for name, g in ours.items():
        assert torch.allclose(g, ref_grads[name], atol=1e-7, rtol=1e-5), name


def test_trimmed_tail_changes_no_loss_or_gradient(tiny_model_dir):
    """Episodes with 15 tokens of observation after their last action: DAPO loss and gradients
    on the trimmed rows equal those on the full rows (causal attention, no loss on the tail)."""
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs

    def with_tail(ep, seed):
        tail = torch.randint(3, 2048, (15,), generator=torch.Generator().manual_seed(seed)).tolist()
        return Episode(ep.token_ids + tuple(tail), ep.loss_mask + (0,) * 15,
                       ep.logprobs + (0.0,) * 15, advantage=ep.advantage)

    eps = [with_tail(_ep(25, 4, 1.0, 1), 7), with_tail(_ep(15, 3, -0.5, 2), 8)]
    n = sum(e.num_actions for e in eps)
    runs = []
    for batch in (eps, [trim_tail(e) for e in eps]):
        model = load_model(tiny_model_dir, torch.device("cpu"), grad_checkpointing=False)
        (row,) = pack(batch, 128)
        logp, _ = packed_logprobs(model, row)
        old = torch.cat([torch.tensor(batch[i].logprobs) for i in row.episodes])
        loss, _ = dapo_loss(logp, old, row.advantages, row.loss_mask, num_tokens=n)
        loss.backward()
        runs.append((row.input_ids.numel(), loss.item(), [p.grad for p in model.parameters()]))
    (full_len, full_loss, full_grads), (cut_len, cut_loss, cut_grads) = runs
    assert (full_len, cut_len) == (70, 40)
    assert abs(full_loss - cut_loss) < 1e-6
    for a, b in zip(full_grads, cut_grads):
        assert torch.allclose(a, b, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_attention_never_crosses_segments(tiny_model_dir, lora):
    """Changing every token of episode A leaves the log-probs of B (packed after A) unchanged."""
    from trainer.forward import packed_logprobs
    model = _model(tiny_model_dir, lora)
    a1, a2, b = _ep(30, seed=1), _ep(30, seed=9), _ep(20, seed=2)
    with torch.no_grad():
        lp1, _ = packed_logprobs(model, pack([a1, b], 64)[0])
        lp2, _ = packed_logprobs(model, pack([a2, b], 64)[0])
    assert not torch.equal(lp1[:30], lp2[:30])
    assert torch.equal(lp1[30:], lp2[30:])


def test_chunked_lm_head_matches_single_chunk():
    """The chunked, recomputed LM head gives the same log-probs and gradients as one chunk."""
    from trainer.forward import head_logprobs
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    hidden = torch.randn(10, 8, generator=g, requires_grad=True)
    targets = torch.randint(0, 50, (10,), generator=g)
    lp1, ent1 = head_logprobs(hidden, head, targets, chunk=64)
    (g1,) = torch.autograd.grad(lp1.sum(), hidden)
    lp3, ent3 = head_logprobs(hidden, head, targets, chunk=3)           # chunks 3, 3, 3, 1
    (g3,) = torch.autograd.grad(lp3.sum(), hidden)
    assert torch.allclose(lp1, lp3, atol=1e-6) and torch.allclose(ent1, ent3, atol=1e-6)
    assert torch.allclose(g1, g3, atol=1e-6)


def test_head_chunk_rows_fill_the_logits_budget():
    from trainer.forward import LOGITS_BUDGET, head_chunk_rows
    assert LOGITS_BUDGET == 8_388_608                                   # 2^23 fp32 logits = 32 MiB
    assert head_chunk_rows(151_936) == 55                               # 2^23 // 151,936 (Qwen2)
    assert head_chunk_rows(49_152) == 170                               # 2^23 // 49,152 (SmolLM2)
    assert head_chunk_rows(10, budget=25) == 2 and head_chunk_rows(10, budget=5) == 1


def test_compile_setting():
    from trainer.engine_torch import compile_enabled
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert (compile_enabled("auto", cpu), compile_enabled("auto", cuda)) == (False, True)
    assert compile_enabled(True, cpu) and not compile_enabled(False, cuda)
    with pytest.raises(ValueError, match="trainer.compile must be true, false or auto"):
        compile_enabled("yes", cpu)


@pytest.mark.e2e
def test_compiled_layers_match_eager_loss_and_gradients(tiny_model_dir):
    """trainer.compile changes how the layers run, not what they compute: packed rows of
    different lengths (dynamic T), one of them with a shared prefix, give eager's loss and
    gradients."""
    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    prompt = list(range(100, 111))
    rows = pack([_ep(37, 5, 1.0, 1), _ep(20, 3, -0.5, 2), _ep(50, 10, 0.8, 3),
                 _grouped("x", prompt, list(range(5, 25)), 1), _grouped("x", prompt, [7] * 9)], 64)
    assert len({r.num_tokens for r in rows}) > 1 and any(r.attn_index is not None for r in rows)
    grads = []
    for compiled in (False, True):
        model = load_model(tiny_model_dir, torch.device("cpu"), grad_checkpointing=False,
                           compile=compiled)
        for row in rows:
            logp, _ = packed_logprobs(model, row)
            (logp * row.loss_mask * row.advantages).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, eager in grads[0].items():
        # fp32 sums in another order (the compiled kernels vectorise by the CPU's ISA: AVX2 or
        # AVX512) differ by a few ulps of the largest summand, not of each element: the tied
        # embedding's gradient (max ~30) differs by ~4e-6 on an AVX512 CPU
        atol = 1e-6 + 1e-6 * eager.abs().max().item()
        assert torch.allclose(grads[1][name], eager, atol=atol, rtol=1e-4), (
            name, (grads[1][name] - eager).abs().max().item(), atol)


@pytest.mark.e2e
def test_compiled_layers_do_not_recompile_for_new_segment_layouts(tiny_model_dir):
    """Every optimiser step packs different rows; a compiled layer that specialised on the segment
    lengths would recompile at each one (and fall back to eager after dynamo's limit)."""
    import torch._dynamo

    from trainer.engine_torch import load_model
    from trainer.forward import packed_logprobs
    model = load_model(tiny_model_dir, torch.device("cpu"), grad_checkpointing=False, compile=True)
    first, *others = [pack(eps, 256)[0] for eps in (
        [_ep(37, 5, seed=1), _ep(20, 3, seed=2)],
        [_ep(50, 10, seed=3), _ep(11, 2, seed=4), _ep(29, 4, seed=5)],
        [_ep(64, 9, seed=6)])]
    packed_logprobs(model, first)[0].sum().backward()          # compiles (dynamic T)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for row in others:                                      # new T, new segment count
            packed_logprobs(model, row)[0].sum().backward()


@pytest.mark.parametrize("blockwise", [False, True], ids=["sdpa", "blockwise"])
@pytest.mark.parametrize("length", [70, 128])
def test_padded_segment_attention_equals_plain_sdpa(length, blockwise):
    """A CPU segment is padded to a multiple of SEGMENT_ALIGN after its last token: its outputs
    and gradients, by either kernel, are those of causal SDPA on the segment alone."""
    import torch.nn.functional as F

    from trainer.forward import SEGMENT_ALIGN, _causal_segment
    assert SEGMENT_ALIGN == 64
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, h, length, 8, generator=g, requires_grad=True) for h in (4, 2, 2))
    runs = []
    for fn in (lambda: _causal_segment(q, k, v, None, True, blockwise),
               lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)):
        out = fn()
        runs.append((out, *torch.autograd.grad((out * out).sum(), (q, k, v))))
    assert runs[0][0].shape == (1, 4, length, 8)
    for a, b in zip(*runs):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)
