"""The range of every numeric config key (`RANGES`), checked when a file, preset or override
sets it.

A range is finite at least on one side and never admits NaN or infinity; tests/test_hostile_cli.py
checks that every int and float field has one and that its default lies inside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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
    "trainer.freed_pages_ceiling_gb": NON_NEGATIVE,
    "engine.torch_threads": THREADS,
    "engine.decode_threads": THREADS,
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
    "algorithm.curriculum_min_tries": COUNT,
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
    "trainer.processes": Range(1, 4096),  # like orchestration.max_workers
    "trainer.seed": SEED,
    "trainer.torch_threads": THREADS,
    "trainer.sft_batch_size": COUNT,
    "trainer.dpo_batch_pairs": COUNT,
    "trainer.save_every": COUNT_OR_0,
    "trainer.keep_checkpoints": COUNT_OR_0,
    "trainer.lora.r": Range(0, 4096),  # 0: off; past any model's hidden size is no low rank
    "trainer.lora.alpha": COUNT,  # an integer, as peft types lora_alpha
    "trainer.lora.dropout": Range(0, 1),
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
    "orchestration.ray_num_cpus": Range(0, 4096),
    "orchestration.shards": Range(0, 4096),
    "orchestration.shard_cpus": POSITIVE,
    "orchestration.shard_retries": Range(0, 100),
    "orchestration.retries": Range(0, 10),  # delays grow 3x: 10 retries already span ~3 days
    "orchestration.retry_delay_s": Range(0, _30_DAYS),
    "tracking.champion_margin_sems": Range(0, 100),   # 0: any higher pass@1 promotes
    "tracking.trace_train_episodes": Range(-1, 1_000_000),   # -1: every training episode
    "tracking.system_metrics_s": Range(0, 86_400),           # 0: off
}
"""The range of every numeric key, checked when a file, preset or override sets it. Cross-key rules
(eval.k <= eval.runs, reward.l_thr < reward.t_max) are checked where the values are used."""
