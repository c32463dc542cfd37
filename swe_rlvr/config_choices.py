"""Every config setting that takes one of a fixed set of values, as a `Literal` type.

These are the one list of each set of choices. `from_dict` refuses any other value when a file,
preset or override sets it, naming the key, the value and the choices. A module that needs the
values as data takes them from here, `typing.get_args(Scaffold)`, rather than typing them again.
A registry of implementations (`sandbox.BACKENDS`, `agent.engines.ENGINES`, ...) keeps its dict of
names, and tests/test_config.py checks that its keys are the Literal's values.

Open-ended settings (paths, URLs, model names, splits) stay `str`: nothing here can list them.
"""

from __future__ import annotations

from typing import Literal

Preset = Literal["nebius", "agent-rlvr", "cpu-2core", "gpu-1x"]
"""The presets' names, each a file `configs/presets/<name>.yaml` (`swe_rlvr.config_presets`): the
papers' methods (nebius, agent-rlvr), then the hardware (cpu-2core, gpu-1x)."""

InstanceFormat = Literal["auto", "swe-bench", "swe-gym", "swe-rebench", "swe-smith", "internal"]
"""Instance file loaders (`swe_rlvr.loaders`); auto tells them apart by their columns."""
Tier = Literal["easy", "medium", "hard", "generated"]
"""Difficulty tiers of an instance (`Instance.difficulty`, "" when it has none). `generated` is the
built-in suite's grown set of one-line mutants (`swe_rlvr.builtin.mutations`): as easy as `easy`
in shape, kept apart so that a selection of [easy] stays what it was."""

SandboxBackend = Literal["local", "docker"]
"""`sandbox.BACKENDS`."""
Isolation = Literal["auto", "bwrap", "unshare", "pgroup"]
"""auto, then `sandbox.isolation.LEVELS`, best first."""
WorkingCopy = Literal["auto", "overlay", "copy"]
"""How `sandbox.workspace.create_working_copy` makes a working copy."""

Scaffold = Literal["swe-agent", "bash"]
"""`agent.tools.SCAFFOLDS`."""
EngineName = Literal["hf", "vllm", "openai", "vllm-server", "auto",
                     "scripted", "scripted:gold", "scripted:cheat", "scripted:format_error",
                     "scripted:weak", "scripted:coin"]
"""`agent.engines.ENGINES`, or the package's scripted policy (`agent.scripted`; "scripted" is its
gold variant)."""
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
"""Weights' dtype of the hf and vllm engines (auto: bf16 on GPU, fp32 on CPU)."""
Device = Literal["auto", "cpu", "cuda"]
"""Where the hf engine or the torch trainer runs (auto: cuda when torch sees a GPU)."""
DecodeAttention = Literal["auto", "grouped", "sdpa"]
"""The hf engine's attention for decode steps (`agent.engines.attention.implementation`)."""
DecodeForward = Literal["auto", "hf", "lean"]
"""The hf engine's decode-step forward: transformers' modules or `agent.engines.lean`."""
OverlapPrefill = Literal["auto", "beside", "inline"]
"""Where the hf engine prefills joining turns: on a thread beside the decode steps, or between
them (`agent.engines.continuous`)."""
PackedWeights = Literal["auto", "packed", "plain"]
"""The hf engine's linear weights: in oneDNN's blocked layout or as loaded (`agent.engines.packed`)."""

GuidanceSource = Literal["rules", "teacher"]
"""Who writes the hint (`agent.recovery.make_source`)."""
GuidancePart = Literal["plan", "feedback", "location"]
"""Agent-RLVR's three kinds of guidance."""
GuidanceTrigger = Literal["unresolved", "any_failure"]
"""Which failed instances get guidance (`agent.recovery.select_failed`)."""
GuidanceMode = Literal["keep", "strip", "pairs"]
"""How guided episodes train (`trainer.loops.prepare`, `flows.experiment`)."""

Algorithm = Literal["dapo", "grpo", "rft", "dpo"]
"""Policy updates (`tasks.update.LOOPS`)."""
Advantage = Literal["grpo", "drgrpo", "rloo"]
"""Group advantages (`trainer.advantages.ADVANTAGES`)."""
LossAgg = Literal["token_mean", "seq_mean", "seq_mean_token_sum_norm"]
"""How token losses average (`trainer.losses`): over every action token of the batch (DAPO), per
sequence first (GRPO), or per sequence over a constant length (Dr.GRPO)."""

OldLogprobs = Literal["recompute", "sampler"]
"""Where DAPO's old log-probs (policy k's, in the clipped ratio) come from (`trainer.loops`)."""
TrainerEngine = Literal["torch", "deepspeed"]
"""`trainer.loops.ENGINES`."""
Schedule = Literal["cosine", "constant"]
"""Learning-rate schedules of SFT/RFT after the warm-up (`trainer.engine_torch.lr_lambda`)."""
Compile = Literal["auto"]
Autocast = Literal["auto", "bf16", "fp32"]
"""Mixed precision of the torch trainer's forward and backward (`trainer.engine_torch`)."""
TrainAttention = Literal["auto", "blockwise", "sdpa"]
"""The torch trainer's attention within each packed segment (`trainer.forward.attention_kernel`)."""
"""trainer.compile's third value beside true and false: on for CUDA only."""

Objective = Literal["pointwise", "pairwise"]
"""Verifier training objectives (`trainer.verifier`)."""

ExpertStyle = Literal["splice", "explore", "sed"]
"""Expert trajectories of the warm-up (`agent.expert.make_expert`)."""
TaskRunner = Literal["threads", "ray"]
"""`flows.runners.TASK_RUNNERS`."""
RayAuthMode = Literal["disabled", "token"]
"""Ray's `RAY_AUTH_MODE` (`flows.runners.connect_ray`)."""
