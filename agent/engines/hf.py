"""The `hf` engine: transformers on CPU or one GPU, with a hand-written sampling loop.

Why not `model.generate`: it applies whatever the checkpoint's generation_config asks for (top-k,
top-p, repetition penalty, ...) and does not return the sampler's own log-probs. This loop runs
the model forward with a KV cache over a left-padded batch and, at each step, computes exactly
what the trainer recomputes: logp = log_softmax(logits.float() / T), samples from exp(logp), and
keeps logp of the sampled id. No other logits processor exists here, so none can switch on.

Generation is continuously batched (`agent.engines.continuous`): concurrent calls' prompts join
one decode batch at any step and leave it the step they stop.

With `engine.prefix_cache_gb` > 0 (the default), each row's KV cache is kept after a generation
(`agent.engines.kvcache`), so an episode's next turn runs only its new tokens (the reply's
last token and the observation) instead of its whole context: each row is prefilled alone from its
cached prefix (rows without one, as on a first turn, in one padded batch). Only the last
position's logits are computed in a prefill, and the KV cache grows in place while decoding
(transformers' DynamicCache would copy all of it at every token). New weights (`load_weights`)
empty the cache. Prefills and decode steps record their work (`swe_rlvr.spans`: time, tokens,
attended keys). On a CPU the linear layers' weights are packed once per load into oneDNN's
layout (`engine.packed_weights`, `agent.engines.packed`), and a decode step runs as straight tensor
code over the model's weights instead of transformers' modules (`engine.decode_forward`,
`agent.engines.lean`). With `engine.process` the engine runs in a child process of its own
(`agent.engines.process`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import torch

from agent.engines import attention, lean, packed
from agent.engines.base import UNFILTERED, Sample, SamplingParams, eos_ids
from agent.engines.continuous import Request, Scheduler, overlaps
from agent.engines.kvcache import PrefixCache, RowKV, growing_cache, row_view
from swe_rlvr import spans
from swe_rlvr.precision import engine_dtype, pick_device, warn_if_emulated

log = logging.getLogger(__name__)


class HFEngine:
    """Transformers policy; `cfg` is an EngineConfig (name "hf")."""

    continuous = True
    """The `Batcher` sends each episode's call at once: this engine batches continuously."""

    def __init__(self, cfg: Any) -> None:
        from transformers import AutoTokenizer

        require_model(cfg)
        if cfg.torch_threads > 0:
            torch.set_num_threads(cfg.torch_threads)
        self.threads = torch.get_num_threads()
        """torch threads of prefills (`engine.torch_threads`, else torch's default)."""
        self.decode_threads = cfg.decode_threads or self.threads
        """torch threads of decode steps (`engine.decode_threads`, else `threads`)."""
        self.cfg = cfg
        self.device = pick_device(cfg.device, "engine.device")
        self.dtype = engine_dtype(cfg.dtype, self.device)
        self.overlap = overlaps(cfg.overlap_prefill, self.device)
        """Prefills run beside the decode steps (`engine.overlap_prefill`)."""
        if cfg.dtype == "bfloat16":
            warn_if_emulated("engine.dtype=bfloat16", self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        self.policy_version = 0
        self._temperature = cfg.temperature
        self._requests = 0
        self._seeds = threading.Lock()
        self.prefix_cache: PrefixCache | None = None
        self.scheduler = Scheduler()
        self._load(cfg.model)

    # ------------------------------------------------------------------ Engine protocol

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        """Sample one reply per prompt; callable from many threads at once. Prompt i of a call
        samples from seed `params.seed + i` (without a seed: from the engine's own sequence)."""
        if any(len(p) == 0 for p in prompts):
            raise ValueError("hf engine: an empty prompt has nothing to condition on; "
                             "start it with at least one token (e.g. the chat template's).")
        if params.max_new_tokens <= 0:
            return [Sample(token_ids=[], logprobs=[], finish_reason="length") for _ in prompts]
        with self._seeds:
            self._temperature = params.temperature
            seed = params.seed if params.seed is not None else \
                self.cfg.seed * 1_000_003 + self._requests
            self._requests += len(prompts)
        stops = frozenset(params.stop_token_ids) | frozenset(self.eos_ids)
        requests = [Request(list(p), params, stops,
                            torch.Generator(device=self.device).manual_seed(seed + i))
                    for i, p in enumerate(prompts)]
        self.scheduler.submit(self, requests)
        return [r.future.result() for r in requests]

    def load_weights(self, checkpoint_dir: str) -> None:
        """Reload the policy from an HF checkpoint directory and bump `policy_version`."""
        with self.scheduler.paused():
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
            model = AutoModelForCausalLM.from_pretrained(
                model_dir, dtype=self.dtype,
                attn_implementation=attention.implementation(self.cfg.decode_attention, self.device))
            self.model = model.to(self.device).eval()
            if packed.wanted(self.cfg.packed_weights, self.device):
                packed.pack_linears(self.model, max(1, self.cfg.max_batch))
            self.lean = lean_decoder(self.cfg, self.model, self.device)
        self.eos_ids = eos_ids(model.generation_config, self.tokenizer)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0)
        budget = int(self.cfg.prefix_cache_gb * 2 ** 30)
        self.prefix_cache = PrefixCache(budget) if budget > 0 else None   # new weights: empty

    def _prefill_padded(self, prompts: list[list[int]]):
        """One forward over the left-padded prompts: (cache, mask (B, L), last logits (B, V))."""
        ids, mask = _left_pad(prompts, self.pad_id, self.device)      # (B, L), (B, L)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)                 # (B, L)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         past_key_values=growing_cache(self.model.config), use_cache=True,
                         logits_to_keep=1)
        return out.past_key_values, mask, out.logits[:, -1, :]

    def decode(self, token: torch.Tensor, mask: torch.Tensor, cache) -> torch.Tensor:
        """Feed `token` (B,) to the batch whose mask with the new column is `mask` (B, W + 1) and
        whose growing KV cache is `cache`; the next logits (B, V)."""
        if self.lean is not None:
            return self.lean.step(token, mask, cache)
        out = self.model(input_ids=token[:, None], attention_mask=mask,
                         position_ids=mask.sum(-1, keepdim=True) - 1,
                         past_key_values=cache, use_cache=True)
        return out.logits[:, -1, :]

    def prefill_rows(self, prompts: list[list[int]]) -> tuple[list[RowKV], torch.Tensor, list[int]]:
        """Each prompt's KV cache and its last position's logits: rows with a cached prefix run
        their new tokens alone; rows without one run in one padded batch, where equal prompts run
        once. Returns the per-row caches (views, to be copied into a batch), the logits (n, V) and
        the tokens each row did not run (a prompt equal to an earlier one's: all of them)."""
        taken = ([self.prefix_cache.take(p) for p in prompts] if self.prefix_cache is not None
                 else [(0, None)] * len(prompts))
        misses = [i for i, (_, kv) in enumerate(taken) if kv is None]
        rows: list = [None] * len(prompts)
        logits: list = [None] * len(prompts)
        if misses:   # equal prompts (a group's first turns) run once and share their rows' views
            keys = [tuple(prompts[i]) for i in misses]
            first = {key: j for j, key in enumerate(dict.fromkeys(keys))}   # prompt -> its row
            cache, mask, last = self._prefill_padded([list(key) for key in first])
            batch = [(layer.keys, layer.values) for layer in cache.layers]
            width, real, seen = mask.shape[1], mask.sum(-1).tolist(), set()
            for i, key in zip(misses, keys):
                j = first[key]
                rows[i], logits[i] = row_view(batch, j, width - real[j], width), last[j]
                if j in seen:                        # a copy of an earlier row: no token ran
                    taken[i] = (len(prompts[i]), None)
                seen.add(j)
        for i, (prompt, (n, kv)) in enumerate(zip(prompts, taken)):
            if kv is None:
                continue
            past = growing_cache(self.model.config, kv)
            out = self.model(input_ids=torch.tensor([prompt[n:]], device=self.device),
                             position_ids=torch.arange(n, len(prompt), device=self.device)[None],
                             past_key_values=past, use_cache=True, logits_to_keep=1)
            logits[i] = out.logits[0, -1]                                             # (V,)
            rows[i] = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        return rows, torch.stack(logits), [n for n, _ in taken]


def require_model(cfg: Any) -> None:
    """Refuse an EngineConfig without `model`, naming the fix (this engine, in or out of process)."""
    if not cfg.model:
        raise ValueError("engine.model is empty; point it at an HF model directory, "
                         "e.g. one built by `swe-rlvr model tiny runs/tiny`.")


def lean_decoder(cfg: Any, model: torch.nn.Module, device: torch.device) -> lean.LeanDecoder | None:
    """`engine.decode_forward` -> the `LeanDecoder` of `model`, or None for transformers'
    forward. auto takes it where the decode attention is the grouped kernel (what it computes)
    and the model is one it covers; lean refuses anything else, naming why."""
    grouped = attention.implementation(cfg.decode_attention, device) == attention.ATTENTION
    reason = ("engine.decode_attention is not grouped" if not grouped
              else lean.unsupported(model))
    if cfg.decode_forward == "hf" or (cfg.decode_forward == "auto" and reason is not None):
        return None
    if reason is not None:
        raise ValueError(f"engine.decode_forward=lean cannot run this model: {reason}; "
                         f"set engine.decode_forward to auto or hf.")
    return lean.LeanDecoder(model)


def _left_pad(prompts: list[list[int]], pad_id: int, device: torch.device):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt):] = 1
    return ids.to(device), mask.to(device)

