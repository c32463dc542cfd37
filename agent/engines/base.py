"""The engine seam: token ids in, sampled token ids and their sampler log-probs out.

Every engine samples from softmax(logits / T) with every other filter off (top-p 1, top-k off,
min-p 0, repetition penalty 1), whatever the model's generation config says: Nebius (2508.03501)
trains at T = 1.0 with the filters off, and a library upgrade that silently switched top-k and
min-p on made their training collapse. `logprobs` are log-probs under that same distribution,
log_softmax(logits / T), which is what the trainer recomputes for the importance ratio.

Each engine stops a sequence at any id in `SamplingParams.stop_token_ids` *or* at the model's
own EOS ids (generation_config.eos_token_id), as vLLM does, and keeps the stop token in the sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    """Softmax temperature; <= 0 means greedy (log-probs are then those of T = 1)."""
    max_new_tokens: int = 512
    """Most tokens generated per prompt."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra ids that end a sequence (the model's EOS ids always do)."""
    seed: int | None = None
    """Seed of this call (None: the engine's own seed stream); prompt i uses seed + i where per-request."""


@dataclass
class Sample:
    token_ids: list[int]
    """Generated ids only: excludes the prompt; includes the stop token when it stopped on one."""
    logprobs: list[float]
    """Sampler log-prob of each generated token under log_softmax(logits / T)."""
    finish_reason: str
    """"stop" (a stop/EOS id was sampled) or "length" (max_new_tokens reached)."""


@runtime_checkable
class Engine(Protocol):
    tokenizer: Any
    policy_version: int

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]: ...

    def load_weights(self, checkpoint_dir: str) -> None: ...

    def effective_sampling(self) -> dict: ...

# Optional: `end_episode(ids)`, called by the agent loop when an episode whose context is `ids`
# ends, so an engine can free what it kept for that episode (the `hf` engine's prefix cache).


# The only sampling setting RL here allows besides temperature (Nebius: "every other filter off").
UNFILTERED = {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
"""top_k 0 means off (vLLM >= 0.11 and our hf loop; older vLLM spelled it -1)."""


def is_unfiltered(knobs: dict) -> bool:
    """True when `knobs` (an `effective_sampling()` dict) has every filter off."""
    return (float(knobs["top_p"]) == 1.0 and int(knobs["top_k"]) in (0, -1)
            and float(knobs["min_p"]) == 0.0 and float(knobs["repetition_penalty"]) == 1.0)


def eos_ids(generation_config: Any, tokenizer: Any) -> tuple[int, ...]:
    """The model's EOS ids: generation_config.eos_token_id (int or list), else the tokenizer's."""
    eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
    if eos is None:
        eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)
