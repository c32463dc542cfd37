"""The `openai` engine: any OpenAI-compatible `/v1/completions` server, spoken with token ids.

- The prompt goes as a list of ints; `return_token_ids: true` (a vLLM extension) returns the ids
  sampled, which we trust over `text` (at a stop string vLLM cuts the text, never the ids).
- `logprobs: 1` returns each sampled token's log-prob; against vLLM they reflect temperature only
  when the server runs with `--logprobs-mode processed_logprobs` (its default is raw log-probs).
- Sampling: temperature T, and in the body top_p 1, top_k 0, min_p 0, repetition_penalty 1
  (vLLM reads the non-OpenAI ones from the top-level body; OpenAI itself ignores them), so a
  server's generation-config defaults cannot switch a filter on.
- One request per prompt, sent concurrently; prompt i carries seed + i, so a group of identical
  prompts gives different samples.
- Each request records a `generate` span (`swe_rlvr.spans`): the tokens and attention keys the
  server ran, the prompt's cached prefix excluded (`served_work`).
- Connection errors, 429 and 5xx are retried with exponential backoff; a server that never
  answers raises `EngineUnavailable` naming the URL.
- `load_weights(dir)` asks a vLLM server started with VLLM_SERVER_DEV_MODE=1 to reload the
  weights in place (`/collective_rpc` reload_weights, then `/reset_prefix_cache`). It refuses
  models with tied embeddings (vLLM 0.32 reloads a tied lm_head wrongly); those servers, and
  non-vLLM ones, must be restarted on the new checkpoint by whoever runs them.

Only the standard library is used (urllib), so this engine adds no dependency.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agent.engines.base import UNFILTERED, Sample, SamplingParams, eos_ids
from swe_rlvr import spans
from swe_rlvr.compute import decode_work, prefill_work

log = logging.getLogger(__name__)


class EngineUnavailable(ConnectionError):
    """The server did not answer after all retries; the message names the URL and the fix."""


class OpenAIEngine:
    """Client of an OpenAI-compatible completions server; `cfg` is an EngineConfig (name "openai")."""

    continuous = True
    """The server batches the requests it holds, so each turn is sent when it is ready."""

    def __init__(self, cfg: Any) -> None:
        from transformers import AutoTokenizer, GenerationConfig

        if not cfg.base_url:
            raise ValueError("engine.base_url is empty; set it to the server, e.g. http://127.0.0.1:8000/v1.")
        if not cfg.model:
            raise ValueError("engine.model is empty; the openai engine needs the model directory "
                             "locally for its tokenizer (the chat template and the ids).")
        self.cfg = cfg
        self.base_url = cfg.base_url.rstrip("/")
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        try:
            self.eos_ids = eos_ids(GenerationConfig.from_pretrained(cfg.model), self.tokenizer)
        except OSError:
            self.eos_ids = eos_ids(None, self.tokenizer)
        self.policy_version = 0
        self._temperature = cfg.temperature
        self._calls = 0
        self.served_model = cfg.served_model or self._first_model()

    # ------------------------------------------------------------------ Engine protocol

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        self._temperature = params.temperature
        base = params.seed if params.seed is not None else self.cfg.seed * 1_000_003 + self._calls * 10_007
        self._calls += 1
        bodies = [self._body(p, params, base + i) for i, p in enumerate(prompts)]
        with ThreadPoolExecutor(max_workers=max(1, min(self.cfg.max_batch, len(bodies) or 1))) as pool:
            return list(pool.map(self._complete, bodies))

    def load_weights(self, checkpoint_dir: str) -> None:
        """Reload a vLLM dev-mode server in place; bump `policy_version`."""
        from agent.engines.vllm import ties_embeddings

        root = self.base_url.removesuffix("/v1")
        if ties_embeddings(checkpoint_dir):
            raise RuntimeError(f"{checkpoint_dir} ties lm_head to the embedding, which vLLM 0.32's "
                               f"in-place reload misses (the output layer would stay at the old "
                               f"policy). Restart the server at {root} on {checkpoint_dir} instead.")
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(checkpoint_dir)}}
        try:
            self._post(f"{root}/collective_rpc", body)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise RuntimeError(f"The server at {root} cannot reload weights (no /collective_rpc). "
                                   f"Start vLLM with VLLM_SERVER_DEV_MODE=1, or restart the server on "
                                   f"{checkpoint_dir}.") from exc
            raise
        self._post(f"{root}/reset_prefix_cache", None)
        self.policy_version += 1
        log.info("openai engine: server reloaded, policy version %d from %s", self.policy_version, checkpoint_dir)

    def effective_sampling(self) -> dict:
        """The knobs every request sends (what the server applies if it honours the body)."""
        return {"temperature": self._temperature, **UNFILTERED}

    # ------------------------------------------------------------------ HTTP

    def _body(self, prompt: list[int], params: SamplingParams, seed: int) -> dict:
        return {
            "model": self.served_model, "prompt": list(prompt), "max_tokens": params.max_new_tokens,
            "temperature": max(params.temperature, 0.0), "seed": seed, "logprobs": 1, "n": 1,
            "stop_token_ids": list(params.stop_token_ids), "return_token_ids": True,
            "skip_special_tokens": False, **UNFILTERED,
        }

    def _complete(self, body: dict) -> Sample:
        with spans.span("generate") as work:
            reply = self._post(f"{self.base_url}/completions", body)
            sample = self._sample(reply["choices"][0])
            work.tokens, work.keys, work.logits = served_work(len(body["prompt"]), reply.get("usage"),
                                                              len(sample.token_ids))
        return sample

    def _sample(self, choice: dict) -> Sample:
        ids = choice.get("token_ids")
        if ids is None:
            raise RuntimeError(f"The server at {self.base_url} returned no token_ids; it must support "
                               f"vLLM's `return_token_ids` extension (vLLM >= 0.10.2).")
        logprobs = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []]
        if len(logprobs) != len(ids):
            raise RuntimeError(f"The server at {self.base_url} returned {len(logprobs)} log-probs "
                               f"for {len(ids)} tokens.")
        reason = choice.get("finish_reason")
        if reason not in ("stop", "length"):
            raise RuntimeError(f"The server at {self.base_url} ended a sample with "
                               f"finish_reason={reason!r}; expected stop or length.")
        return Sample(token_ids=list(ids), logprobs=logprobs, finish_reason=reason)

    def _first_model(self) -> str:
        models = self._request(f"{self.base_url}/models", None, method="GET").get("data") or []
        if not models:
            raise RuntimeError(f"The server at {self.base_url} lists no models; set engine.served_model.")
        return models[0]["id"]

    def _post(self, url: str, body: dict | None) -> dict:
        return self._request(url, body, method="POST")

    def _request(self, url: str, body: dict | None, method: str) -> dict:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.cfg.api_key_env, "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = json.dumps(body).encode() if body is not None else None
        last: Exception | None = None
        for attempt in range(self.cfg.max_retries + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 30.0))
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method=method)
                with urllib.request.urlopen(req, timeout=self.cfg.request_timeout_s) as resp:
                    raw = resp.read()
                return json.loads(raw) if raw.strip() else {}
            except urllib.error.HTTPError as exc:
                if exc.code != 429 and exc.code < 500:
                    detail = exc.read().decode(errors="replace")[:500]
                    raise urllib.error.HTTPError(url, exc.code, f"{exc.reason}: {detail}", exc.headers, None) from exc
                last = exc
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                last = exc
            log.debug("openai engine: %s failed (%s), attempt %d", url, last, attempt + 1)
        raise EngineUnavailable(f"Cannot reach the OpenAI-compatible server at {url} after "
                                f"{self.cfg.max_retries + 1} tries ({last}). Start it, or fix "
                                f"engine.base_url.")


_holding: dict[str, str] = {}
"""Server base URL -> the policy directory this process last loaded into it."""


def serve_policy(cfg: Any, policy_dir: str) -> None:
    """Make the server at `cfg.base_url` sample `policy_dir` before a stage samples it.

    The server was started on `cfg.model`; unless that is `policy_dir` and this process loaded
    nothing else into it since, its weights are reloaded in place (`OpenAIEngine.load_weights`).
    A server that cannot reload is an error that names the fix: sampling a stale policy would
    label its episodes with the new policy's version and train off-policy without a word."""
    url = cfg.base_url.rstrip("/")
    holding = _holding.get(url, str(cfg.model))
    if Path(holding).resolve() == Path(policy_dir).resolve():
        return
    OpenAIEngine(dataclasses.replace(cfg, model=str(policy_dir))).load_weights(str(policy_dir))
    _holding[url] = str(policy_dir)


def served_work(prompt_len: int, usage: dict | None, generated: int) -> tuple[int, int, int]:
    """(tokens, keys, logits) the server ran for one completion: the prompt past its cached prefix
    (`usage.prompt_tokens_details.cached_tokens`, which vLLM reports with
    --enable-prompt-tokens-details; none reported: no cache) and the decode steps."""
    cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    p_tokens, p_keys = prefill_work([prompt_len], [min(int(cached), prompt_len)])
    d_tokens, d_keys = decode_work([prompt_len], [generated])
    return p_tokens + d_tokens, p_keys + d_keys, 1 + d_tokens
