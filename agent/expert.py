"""Expert trajectories: gold fixes replayed through the real loop, in the policy's own tokens.

A policy as small as SmolLM2-135M writes almost no well-formed command block zero-shot, so RL has
no signal to start from. The warm-up SFTs it on *expert* episodes first, a stand-in for
Agent-RLVR's teacher trajectories and SWE-smith's expert trajectories: `ScriptedPolicy` (variant
`gold`) drives the real `Episode` loop, tools and sandbox, and its replies are encoded with the
policy's tokenizer and chat template. Each trajectory is therefore token-exact for that policy,
and its loss mask covers only the replies (the action tokens), never the prompt or observations.

    trajs = expert_trajectories(load_builtin("train"), model_dir, cfg.agent, cfg.sandbox, store)
    episodes = trainer.episodes.expert_episodes([t.to_row() for t in trajs])
    result = trainer.loops.run_rft(model_dir, episodes, cfg, out_dir)

Every episode is graded, and only resolved ones come back (the expert's unresolved episodes would
teach wrong fixes). The expert replays gold patches, so it refuses any instance outside the train
split: an expert episode on an evaluation instance would leak its answer into the policy.

Three styles (`orchestration.expert_style`):
- `splice`: `open` + `edit` per hunk (swe-agent) or a Python line splice (bash), then `submit`,
  with a bare "Step k." as its reasoning. It never reads the code, so a policy SFT'd on it learns
  the form (one block per turn, then submit) but not where an edit comes from.
- `explore` (bash only): grep the repository for a name the issue mentions, read the lines around
  the bug with `sed -n`, replace the faulty text with a `str.replace` edit that quotes the old
  text it just read, run the project's tests, submit; each step says in one sentence why. Every
  command now depends on something visible earlier in the episode (the issue, the grep hits, the
  printed code), which is what a policy would have to learn to fix an unseen instance.
- `sed` (bash only): for one-line fixes, three turns: print the enclosing function (or top-level
  statement) with line numbers, substitute on the faulty line and run the tests, submit (about
  750 tokens against explore's 1,100); other fixes fall back to `explore`.
Log-probs are 0.0 (nothing was sampled), so the trainer's `sampler_mismatch` metric means
nothing on these episodes. `samples > 1` repeats the same deterministic replay; it weighs
instances, it adds no variety. The explore script does not read its observations either (the
scripted policy is stateless), so it never recovers from a failed edit: such episodes are
unresolved and dropped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, get_args

from agent.runner import run_rollouts
from agent.scripted import ScriptedPolicy
from agent.trajectory import Trajectory, episode_id
from swe_rlvr.config import AgentConfig, ExpertStyle, SandboxConfig
from swe_rlvr.instances import Instance

log = logging.getLogger(__name__)

EXPERT_SPLIT = "train"


class SplitError(ValueError):
    """An expert trajectory was asked for on an instance outside the train split."""


def check_train_split(instances: list[Instance]) -> None:
    """Raise SplitError naming every instance whose split is not `train`."""
    bad = [f"{i.instance_id} (split {i.split or 'unset'!r})" for i in instances if i.split != EXPERT_SPLIT]
    if bad:
        raise SplitError(f"Expert trajectories replay the gold patch, so they may only come from the "
                         f"{EXPERT_SPLIT!r} split; refused: {', '.join(bad)}. Pass train-split "
                         f"instances only, e.g. load_builtin('train').")


def load_tokenizer(tokenizer_or_dir: Any) -> Any:
    """A tokenizer object as is, or the HF tokenizer saved in a model directory."""
    if isinstance(tokenizer_or_dir, (str, Path)):
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(str(tokenizer_or_dir))
    return tokenizer_or_dir


def expert_trajectories(instances: list[Instance], tokenizer_or_dir: Any, agent_cfg: AgentConfig,
                        sandbox_cfg: SandboxConfig, repo_store: str | Path, samples: int = 1,
                        workers: int = 4, progress: bool = False, style: str = "splice"
                        ) -> list[Trajectory]:
    """Expert episodes of each train instance (`samples` each), graded; the resolved ones.

    The scaffold, turn limits and one-shot demo come from `agent_cfg`, exactly as the policy will
    see them; `style` is splice or explore (module docstring). Episodes the expert fails to resolve
    are dropped with a warning.
    """
    from sandbox.grading import grade_many

    check_train_split(instances)
    engine = make_expert(style, load_tokenizer(tokenizer_or_dir), instances, agent_cfg.scaffold)
    trajs = run_rollouts(instances, engine, agent_cfg, sandbox_cfg, repo_store, group_size=samples,
                         iteration=0, workers=workers, progress=progress)
    by_id = {i.instance_id: i for i in instances}
    items = [(by_id[t.instance_id], t.patch,
              episode_id(t.instance_id, t.iteration, t.sample, t.guided)) for t in trajs]
    reports = grade_many(items, sandbox_cfg, repo_store, workers, progress=progress)
    kept = [t for t, r in zip(trajs, reports) if t.termination == "submitted" and r.resolved]
    if len(kept) < len(trajs):
        lost = sorted({t.instance_id for t in trajs} - {t.instance_id for t in kept})
        log.warning("expert: %d of %d episodes unresolved and dropped (%s)",
                    len(trajs) - len(kept), len(trajs), ", ".join(lost) or "partly")
    return kept


STYLES = get_args(ExpertStyle)


def make_expert(style: str, tokenizer: Any, instances: list[Instance], scaffold: str) -> Any:
    """The scripted engine of an expert style."""
    if style == "splice":
        return ScriptedPolicy(tokenizer, instances, variant="gold", scaffold=scaffold)
    if style not in STYLES:
        raise ValueError(f"Unknown expert style {style!r} (orchestration.expert_style); choose "
                         f"one of: {', '.join(STYLES)}.")
    if scaffold != "bash":
        raise ValueError(f"orchestration.expert_style={style} writes bash commands, but "
                         f"agent.scaffold is {scaffold!r}; set agent.scaffold=bash or "
                         f"orchestration.expert_style=splice.")
    from agent.exploring import ExploringExpert
    return ExploringExpert(tokenizer, instances, style=style)
