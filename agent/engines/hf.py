"""The `hf` engine: transformers on CPU or one GPU, with a hand-written sampling loop.

Why not `model.generate`: it applies whatever the checkpoint's generation_config asks for (top-k,
top-p, repetition penalty, ...) and does not return the sampler's own log-probs. This loop runs
the model forward with a KV cache over a left-padded batch and, at each step, computes exactly
what the trainer recomputes: logp = log_softmax(logits.float() / T), samples from exp(logp), and
keeps logp of the sampled id. No other logits processor exists here, so none can switch on.

With `engine.prefix_cache_gb` > 0 (the default), each row's KV cache is kept after a generation
(`agent.engines.kvcache`), so an episode's next turn runs only its new tokens (the reply's
last token and the observation) instead of its whole context: each row is prefilled alone from its
cached prefix, then the rows are left-padded into one batch for decoding. Only the last position's
logits are computed in a prefill, and the KV cache grows in place while decoding (transformers'
DynamicCache would copy all of it at every token). New weights (`load_weights`) empty the cache.
Each batch records its prefill and decode work (`swe_rlvr.spans`: time, tokens, attended keys).

Rows that stopped keep stepping on padding until at most half of the batch still runs; then they
leave it (their KV cache stored first), so the batch shrinks with its stragglers.

Simplifications: one sampling generator per `generate` call (a batch's samples depend on the batch
composition, not only on the seed); every sequence in a batch shares `max_new_tokens`; rows join
a batch only at its start (no continuous batching).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from agent.engines.base import UNFILTERED, Sample, SamplingParams, eos_ids
from agent.engines.kvcache import (PrefixCache, compactable, growing_cache, keep_rows, left_pad_rows,
                                   row_slice)
from swe_rlvr import spans
from swe_rlvr.compute import decode_work, prefill_work

log = logging.getLogger(__name__)


class HFEngine:
    """Transformers policy; `cfg` is an EngineConfig (name "hf")."""

    def __init__(self, cfg: Any) -> None:
        from transformers import AutoTokenizer

        if not cfg.model:
            raise ValueError("engine.model is empty; point it at an HF model directory, "
                             "e.g. one built by `swe-rlvr model tiny runs/tiny`.")
        if cfg.torch_threads > 0:
            torch.set_num_threads(cfg.torch_threads)
        self.cfg = cfg
        self.device = _pick_device(cfg.device)
        self.dtype = _pick_dtype(cfg.dtype, self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        self.policy_version = 0
        self._temperature = cfg.temperature
        self._calls = 0
        self.prefix_cache: PrefixCache | None = None
        self._load(cfg.model)

    # ------------------------------------------------------------------ Engine protocol

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        self._temperature = params.temperature
        seed = params.seed if params.seed is not None else self.cfg.seed * 1_000_003 + self._calls
        self._calls += 1
        generator = torch.Generator(device=self.device).manual_seed(seed)
        stops = set(params.stop_token_ids) | set(self.eos_ids)
        out: list[Sample] = []
        for start in range(0, len(prompts), max(1, self.cfg.max_batch)):
            chunk = prompts[start:start + max(1, self.cfg.max_batch)]
            out.extend(self._generate_batch(chunk, params, stops, generator))
        return out

    def load_weights(self, checkpoint_dir: str) -> None:
        """Reload the policy from an HF checkpoint directory and bump `policy_version`."""
        self._load(checkpoint_dir)
        self.policy_version += 1
        log.info("hf engine: policy version %d from %s", self.policy_version, checkpoint_dir)

    def end_episode(self, ids: list[int]) -> None:
        """An episode whose context is `ids` ended: its cached KV will never be continued."""
        if self.prefix_cache is not None:
            self.prefix_cache.discard(ids)

    def effective_sampling(self) -> dict:
        """What this loop applies: temperature only; there is no code path for the other filters."""
        return {"temperature": self._temperature, **UNFILTERED}

    # ------------------------------------------------------------------ internals

    def _load(self, model_dir: str | Path) -> None:
        from transformers import AutoModelForCausalLM

        with spans.span("model_load"):
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=self.dtype)
            self.model = model.to(self.device).eval()
        self.eos_ids = eos_ids(model.generation_config, self.tokenizer)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0)
        budget = int(self.cfg.prefix_cache_gb * 2 ** 30)
        self.prefix_cache = PrefixCache(budget) if budget > 0 else None   # new weights: empty

    @torch.inference_mode()
    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams, stops: set[int],
                        generator: torch.Generator) -> list[Sample]:
        if any(len(p) == 0 for p in prompts):
            raise ValueError("hf engine: an empty prompt has nothing to condition on; "
                             "start it with at least one token (e.g. the chat template's).")
        lengths = [len(p) for p in prompts]
        with spans.span("prefill") as work:
            if self.prefix_cache is None:
                (cache, mask, logits), cached = self._prefill_padded(prompts), [0] * len(prompts)
            else:
                cache, mask, logits, cached = self._prefill_cached(prompts)
            work.tokens, work.keys = prefill_work(lengths, cached)
            work.logits = len(prompts)                   # the last position's, once per row
        with spans.span("decode") as work:
            samples = self._decode(prompts, cache, mask, logits, params, stops, generator)
            work.tokens, work.keys = decode_work(lengths, [len(s.token_ids) for s in samples])
            work.logits = work.tokens
        return samples

    def _prefill_padded(self, prompts: list[list[int]]):
        """One forward over the left-padded prompts: (cache, mask (B, L), last logits (B, V))."""
        ids, mask = _left_pad(prompts, self.pad_id, self.device)      # (B, L), (B, L)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)                 # (B, L)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         past_key_values=growing_cache(self.model.config), use_cache=True,
                         logits_to_keep=1)
        return out.past_key_values, mask, out.logits[:, -1, :]

    def _prefill_cached(self, prompts: list[list[int]]):
        """Rows with a cached prefix run their new tokens alone; rows without one (every row on a
        first turn) run in one padded batch. Then all rows are left-padded into one batch cache:
        (cache, mask (B, L), last logits (B, V), the tokens each row found cached)."""
        taken = [self.prefix_cache.take(prompt) for prompt in prompts]
        misses = [i for i, (_, kv) in enumerate(taken) if kv is None]
        cached = [n for n, _ in taken]
        if len(misses) == len(prompts):
            return (*self._prefill_padded(prompts), cached)
        rows: list = [None] * len(prompts)
        logits: list = [None] * len(prompts)
        if misses:
            cache, mask, last = self._prefill_padded([prompts[i] for i in misses])
            batch = [(layer.keys, layer.values) for layer in cache.layers]
            width = mask.shape[1]
            for j, (i, real) in enumerate(zip(misses, mask.sum(-1).tolist())):
                rows[i], logits[i] = row_slice(batch, j, width - real, width), last[j]
        for i, (prompt, (n, kv)) in enumerate(zip(prompts, taken)):
            if kv is None:
                continue
            past = growing_cache(self.model.config, kv)
            out = self.model(input_ids=torch.tensor([prompt[n:]], device=self.device),
                             position_ids=torch.arange(n, len(prompt), device=self.device)[None],
                             past_key_values=past, use_cache=True, logits_to_keep=1)
            logits[i] = out.logits[0, -1]                                             # (V,)
            rows[i] = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        batch, pads = left_pad_rows(rows)
        mask = torch.ones(len(prompts), batch[0][0].shape[2], dtype=torch.long, device=self.device)
        for row, pad in enumerate(pads):
            mask[row, :pad] = 0                                                       # (B, L)
        return growing_cache(self.model.config, batch), mask, torch.stack(logits), cached

    def _decode(self, prompts: list[list[int]], cache, mask, logits, params: SamplingParams,
                stops: set[int], generator: torch.Generator) -> list[Sample]:
        """Sample from `logits`, feed each token back, until every row stopped or the limit.
        Rows that stopped leave the batch once at most half of its rows still run (their KV kept
        for the next turn first), so a straggler does not step the whole batch to its end."""
        stop_ids = torch.tensor(sorted(stops), device=self.device, dtype=torch.long)
        rows = list(range(len(prompts)))                   # batch position -> prompt index
        pads = (mask.shape[1] - mask.sum(-1)).tolist()     # per prompt: its left padding
        width = mask.shape[1]                              # L: the prompts' padded width
        tokens: list[list[int]] = [[] for _ in prompts]
        logps: list[list[float]] = [[] for _ in prompts]
        done = torch.zeros(len(prompts), dtype=torch.bool, device=self.device)  # (b,)
        fed = 0                                            # forwards so far: tokens fed per row
        for step in range(params.max_new_tokens):
            token, logp = _sample(logits, params.temperature, generator)              # (b,), (b,)
            for row, t, lp, was_done in zip(rows, token.tolist(), logp.tolist(), done.tolist()):
                if not was_done:
                    tokens[row].append(t)
                    logps[row].append(lp)
            token = torch.where(done, torch.full_like(token, self.pad_id), token)  # a stop is fed
            done |= torch.isin(token, stop_ids)
            if bool(done.all()) or step == params.max_new_tokens - 1:
                break
            running = (~done).nonzero()[:, 0]                                          # (r,)
            if 2 * len(running) <= len(rows) and compactable(cache):
                stopped = [(i, rows[i]) for i in done.nonzero()[:, 0].tolist()]
                self._store(prompts, tokens, cache, stopped, pads, width + fed)
                keep_rows(cache, running)
                mask, token, done = mask[running], token[running], done[running]
                rows = [rows[i] for i in running.tolist()]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)             # (b, L+t)
            out = self.model(input_ids=token[:, None], attention_mask=mask,
                             position_ids=mask.sum(-1, keepdim=True) - 1,
                             past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1, :]
            fed += 1
        self._store(prompts, tokens, cache, list(enumerate(rows)), pads, width + fed)
        return [Sample(token_ids=ids, logprobs=lps,
                       finish_reason="stop" if ids and ids[-1] in stops else "length")
                for ids, lps in zip(tokens, logps)]

    def _store(self, prompts: list[list[int]], tokens: list[list[int]], cache,
               rows: list[tuple[int, int]], pads: list[int], end: int) -> None:
        """Keep the KV cache of `rows` ((batch position, prompt index) pairs) for their next turn:
        the prompt and the sampled tokens fed back before column `end` (a row's last sampled
        token is fed only if a step followed it), without padding or tokens after its stop."""
        if self.prefix_cache is None:
            return
        batch = [(layer.keys, layer.values) for layer in cache.layers]  # (b, H_kv, end, D)
        for position, row in rows:
            start = pads[row] + len(prompts[row])          # the prompt is columns [pad, start)
            fed = min(len(tokens[row]), end - start)
            self.prefix_cache.put(list(prompts[row]) + tokens[row][:fed],
                                  row_slice(batch, position, pads[row], start + fed))


def _sample(logits: torch.Tensor, temperature: float,
            generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one id per row from softmax(logits / T); return it and its log-prob under that same law."""
    logits = logits.float()                                                  # (B, V)
    if temperature <= 0:  # greedy: report log-probs at T = 1
        logp_all = torch.log_softmax(logits, dim=-1)                         # (B, V)
        token = logp_all.argmax(dim=-1)                                      # (B,)
    else:
        logp_all = torch.log_softmax(logits / temperature, dim=-1)           # (B, V)
        token = _inverse_cdf(logp_all.exp(), generator)                      # (B,)
    return token, logp_all.gather(-1, token[:, None])[:, 0]                  # (B,), (B,)


def _inverse_cdf(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One id per row drawn from `probs` (B, V): the first id whose cumulative probability exceeds
    u * total, u ~ U[0, 1). The same law as torch.multinomial, from one uniform per row instead
    of an exponential per vocabulary entry (on CPU those cost ~1 ms per row and step at V = 49k).
    `right=True` never lands on a zero-probability id: its cumulative value equals its predecessor's."""
    cdf = probs.cumsum(-1)                                                   # (B, V)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=cdf.dtype)
    token = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)[:, 0]       # (B,)
    return token.clamp_(max=probs.shape[-1] - 1)


def _left_pad(prompts: list[list[int]], pad_id: int, device: torch.device):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt):] = 1
    return ids.to(device), mask.to(device)


def weights_dtype(cfg: Any) -> str:
    """The dtype this engine would hold `cfg`'s weights in, e.g. "float32"."""
    return str(_pick_dtype(cfg.dtype, _pick_device(cfg.device))).removeprefix("torch.")


def _pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"engine.device={name!r} but torch sees no CUDA GPU; use cpu or auto.")
    return torch.device(name)


def _pick_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    choices = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if name not in choices:
        raise ValueError(f"Unknown engine.dtype {name!r}; choose one of: auto, {', '.join(choices)}.")
    return choices[name]
