"""The config sections that shape learning and the run: `reward`, `algorithm`, `trainer`, `eval`,
`verifier`, `tracking`, `orchestration`.

Part of the config tree (`swe_rlvr.config`, which re-exports every name here). A choice field's
type is a `Literal` from `swe_rlvr.config_choices`; `from_dict` refuses any other value.
"""

from __future__ import annotations

from dataclasses import dataclass

from swe_rlvr.config_choices import (
    Advantage,
    Algorithm,
    Autocast,
    Compile,
    Device,
    ExpertStyle,
    LossAgg,
    Objective,
    OldLogprobs,
    RayAuthMode,
    Schedule,
    TaskRunner,
    TrainAttention,
    TrainerEngine,
)


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
    name: Algorithm = "dapo"
    """Policy update: dapo, grpo, rft or dpo."""
    group_size: int = 10
    """G, episodes per instance per iteration (Nebius: 10)."""
    advantage: Advantage = "grpo"
    """grpo: (r - mean)/(std + eps) (Nebius/DAPO); drgrpo: mean-only; rloo: leave-one-out."""
    adv_eps: float = 1e-6
    """eps in the advantage denominator."""
    clip_low: float = 0.2
    """PPO lower clip epsilon (DAPO: 0.2)."""
    clip_high: float = 0.28
    """Upper clip epsilon, clip-higher (DAPO: 0.28; Nebius: 0.3 via `preset: nebius`)."""
    loss_agg: LossAgg = "token_mean"
    """token_mean over all action tokens in the batch (DAPO), seq_mean (GRPO) or
    seq_mean_token_sum_norm (Dr.GRPO: per sequence over agent.context_tokens)."""
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
    curriculum_min_tries: int = 2
    """Curriculum: an instance tried at least this many times and never solved leaves the pool."""


@dataclass(frozen=True)
class LoraConfig:
    """LoRA adapters through `peft` (`trainer.lora`): with r > 0 every update (the warm-ups' SFT,
    RFT, DAPO/GRPO and DPO) trains low-rank adapters on a frozen base; each checkpoint holds the
    adapter, a pointer to its base, and the merged weights that the engines load."""

    r: int = 0
    """Rank of the adapters; 0 (project default): off, every weight trains. Raise trainer.lr and
    trainer.rft_lr with it: "LoRA Without Regret" (Thinking Machines 2025) found LoRA's best
    learning rate about 10x full fine-tuning's."""
    alpha: int = 32
    """Adapters scale by alpha / r ("LoRA Without Regret": alpha 32 at every rank, so the best
    learning rate barely moves with r)."""
    dropout: float = 0.0
    """Dropout on the adapters' input in gradient passes (peft's default 0.0: any dropout makes the
    trained policy a noisy copy of the one that sampled); old and reference log-probs never drop."""
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                "down_proj")
    """Names of the linear layers that get adapters (peft's target_modules); every projection of
    a Llama/Qwen2-style decoder layer, as QLoRA (Dettmers et al. 2023) found needed to match full
    fine-tuning; ("q_proj", "v_proj") is the original LoRA paper's choice."""


@dataclass(frozen=True)
class TrainerConfig:
    engine: TrainerEngine = "torch"
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
    """Recompute activations in backward to save memory (`swe_rlvr.memory` sizes both ways)."""
    old_logprobs: OldLogprobs = "recompute"
    """DAPO/GRPO's old log-probs (policy k's): `recompute`, a no-grad forward over every row before
    the first step (as verl does: exact for the trainer's own numerics), or `sampler`, the
    sampler's own log-probs of policy k, which saves that forward. They are policy k's when it
    sampled at temperature 1 with no filter and both sides compute in fp32 (`trainer.loops.
    same_numerics`: the hf engine on CPU or vllm-server at engine.dtype auto, and no
    trainer.autocast); otherwise, and for episodes whose context the trainer changed (guidance
    stripped) and scripted policies, they are recomputed."""
    compile: bool | Compile = "auto"
    """torch.compile each decoder layer (attention stays eager, per segment): true, false, or auto
    (true on CUDA, false on CPU). Fuses norms, RoPE and the MLP's activation, and saves fewer activations.
    Costs a compile per process (~15-40 s); measured in bench/trainer.py."""
    autocast: Autocast = "auto"
    """torch engine: run forward and backward under bf16 autocast over the fp32 master weights,
    gradients and AdamW state: bf16, fp32 (none), or auto (bf16 where the device multiplies it
    natively: a GPU with bf16, a CPU with AVX512-BF16 or AMX; `swe_rlvr.precision`). On a CPU
    with AMX, bf16 GEMMs ran 3.1x fp32's (bench.iteration's rates) and a 4,000-token SmolLM2
    training step 1.6x; on an AVX2 CPU, which emulates bf16, they ran 65x slower."""
    attention: TrainAttention = "auto"
    """torch engine: the causal attention within each packed segment. blockwise: query blocks
    through batched matmuls with a hand-written backward (`trainer.blockwise`; on SmolLM2's shape
    on a 2-core AVX512-BF16 CPU, forward and backward of an 832-token segment ran 2.3x faster than
    SDPA in bf16, 1.7-3.2x over 512-3,072 tokens, and 1.2x in fp32, `bench/segment_attention.py`);
    sdpa: torch's SDPA per segment, or one varlen flash-attention call per row on CUDA; auto:
    blockwise on the CPU, sdpa on a GPU."""
    schedule: Schedule = "cosine"
    """LR schedule for SFT/RFT: cosine or constant (Nebius: cosine)."""
    warmup_steps: int = 0
    """Linear warm-up steps."""
    zero_stage: int = 3
    """DeepSpeed ZeRO stage (2 or 3)."""
    num_gpus: int = 1
    """GPUs of the update: one torchrun rank per GPU, either engine (`trainer.launch`)."""
    processes: int = 1
    """CPU processes of the update, used when there is no GPU (project default: 1)."""
    seed: int = 0
    """Trainer seed (data order, dropout)."""
    device: Device = "auto"
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
    keep_freed_pages: bool = True
    """Under jemalloc, keep the pages a training loop frees for its next allocations instead of
    letting jemalloc give them back to be faulted in again, purging them whenever the resident
    set exceeds `freed_pages_ceiling_gb` (`swe_rlvr.memory.kept_under_ceiling`). On the
    quickstart's recipe (2-core AMD EPYC, AVX512-BF16, a 3.2 GiB ceiling) 14 warm-up SFT steps
    took 84-94 s instead of 113-124 and a DAPO update 50-54 s instead of 61, peaking at most
    51 MiB over the ceiling. Where live tensors stay above the ceiling, every freed page goes back
    at once. Off: each step ends with `memory.trim`, under jemalloc's own decay."""
    freed_pages_ceiling_gb: float = 0.0
    """With `keep_freed_pages`, the resident set (GiB) above which the kept pages are given back;
    the loop's live tensors can still exceed it. 0: the resident set at the loop's start plus half
    the memory available then."""
    deepspeed_config: str | None = None
    """DeepSpeed JSON config file (None: built from these fields; see infra/deepspeed/)."""
    deepspeed_cpu_shm: bool = False
    """DeepSpeed on CPU: its shared-memory allreduce kernels (`deepspeed_shm_comm`), faster
    collectives between ranks on one host, JIT-compiled on first use (minutes, cached in
    TORCH_EXTENSIONS_DIR). Off: gloo's collectives, and no build. GPUs never use them."""
    lora: LoraConfig = LoraConfig()
    """LoRA instead of full fine-tuning (off by default; `trainer.lora.r` turns it on)."""


@dataclass(frozen=True)
class EvalConfig:
    split: str = "test"
    """Held-out split for pass@1: train, test, dev, or all (every instance of the source, e.g. of
    a file whose records carry no split)."""
    share_train_instances: bool = False
    """Allow evaluation and training to draw the same instances (eval.split equal to
    instances.train_split, or either one `all`). Off, such a training run is refused: pass@1 on
    instances the policy trained on overstates it. Evaluation alone never needs it."""
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
    objective: Objective = "pointwise"
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
    mlflow_uri: str | None = None
    """MLflow tracking URI (None: sqlite:///<run_root>/mlflow.db)."""
    experiment: str = "swe-rlvr"
    """MLflow experiment name."""
    registered_model: str = "swe-rlvr-policy"
    """Registry name; the best pass@1 gets alias champion, the latest candidate."""
    log_artifacts: bool = True
    """Log each iteration's Parquet files and the progress plot to MLflow."""
    log_checkpoints: bool = True
    """Log each new policy checkpoint as an MLflow transformers model and register it as a model
    version."""
    promote_best: bool = True
    """At registration, a version whose pass@1 beats the champion's recorded pass@1 takes alias
    champion. The retrain flow turns it off and decides on both policies evaluated on the same
    instances and seeds instead (`champion_margin_sems`)."""
    champion_margin_sems: float = 1.0
    """Retraining moves alias champion only when the new policy's pass@1 exceeds the champion's
    by this many of the champion's SEMs (project default: one SEM, so noise does not promote)."""
    system_metrics_s: float = 10.0
    """Sample the machine's CPU, memory, disk and network (GPUs where MLflow finds them) into the
    run's `system/` metrics every this many seconds (MLflow's system-metrics monitor); 0: off."""
    traces: bool = True
    """Log episodes as MLflow traces linked to the run (`tasks.traces`): every evaluation episode
    and trace_train_episodes of each training stage per iteration."""
    trace_train_episodes: int = 8
    """Training episodes traced per iteration and stage (rollout, rollouts_guided), chosen by a
    stable hash of their ids; -1: all of them. 8 keeps a quickstart's store small."""
    register_final: bool = False
    """Log and register the run's final policy even when log_checkpoints is off (one checkpoint
    in MLflow, not one per iteration), so `models:/<registered_model>@champion` exists."""
    artifact_location: str | None = None
    """Artifact root of a new experiment (None: <run_root>/mlartifacts for a local store, the
    server's own for a server)."""
    ui_url: str | None = None
    """Base URL of the MLflow UI in the links a run prints and puts in Prefect (None: mlflow_uri).
    Set it where browsers reach the server by another name than the run does: the team stack's
    worker calls `http://mlflow:5000`, a browser `http://127.0.0.1:5000`."""


@dataclass(frozen=True)
class OrchestrationConfig:
    run_root: str = "runs"
    """Root of run directories (any fsspec path)."""
    run_name: str | None = None
    """Run directory name (None: generated from the clock); an existing one resumes."""
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
    eval_beside: bool = False
    """Run the evaluation of policy k beside the rollouts of iteration k, which sample the same
    policy, on one shared engine, and the `base` evaluation beside the expert's episodes; each
    update waits for its evaluation. Off (project default): every evaluation runs alone, before
    the next stage. For where the cores allow: on a 2-core CPU the side-by-side stages slowed
    each other down (an iteration's rollouts and evaluation took 133 s side by side against
    57 + 48 s one after the other), as the sandboxes' commands took the cores that the engine's
    threads decode on."""
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
    expert_style: ExpertStyle = "splice"
    """The warm-up's expert (`agent.expert`): splice (the gold fix as blind line splices, 2-3
    turns), explore (bash: grep for a name from the issue, read the code with sed -n, a
    str.replace edit of what it read, run the tests, submit; 5-6 turns) or sed (bash, one-line
    fixes: print the function with line numbers, `sed -i` on the faulty line and run the tests,
    submit; 3 turns; other fixes as explore)."""
    task_runner: TaskRunner = "threads"
    """threads or ray."""
    max_workers: int = 4
    """Concurrent episodes / gradings."""
    ray_address: str | None = None
    """Ray cluster address (None: the RAY_ADDRESS variable, else one local cluster for the whole
    run, on 127.0.0.1 with its own temp dir and no dashboard)."""
    ray_auth_mode: RayAuthMode = "disabled"
    """Ray's RAY_AUTH_MODE, set explicitly so that a `~/.ray/auth_token` left by an earlier run
    cannot switch it. token: the cluster's token comes from RAY_AUTH_TOKEN or
    RAY_AUTH_TOKEN_PATH (a local cluster gets a fresh one in its temp dir)."""
    ray_num_cpus: int = 0
    """CPUs of the local Ray cluster (0 = all of this machine's)."""
    shards: int = 0
    """Ray tasks that rollout and validate split their instances / episodes into when the Ray
    runner is on (0 = one per `shard_cpus` CPUs of the cluster; 1 = no fan-out)."""
    shard_cpus: float = 1.0
    """Ray `num_cpus` reserved by each shard."""
    shard_retries: int = 3
    """Ray `max_retries` of a shard whose worker died (the shard is rerun whole)."""
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

