"""Expert trajectories for the warm-up: gold fixes replayed through the real loop, train split only.

Every hand-written train instance and a sample of the generated ones (`builtin_sample`) must give a
resolved, submitted expert episode in the tiny model's own tokens whose loss mask is 1 exactly on
the replies (the action tokens): never on the system prompt, the issue or an observation. The test
split must be refused before anything runs, because an expert episode on an evaluation instance
would teach the policy that instance's answer.
"""

from __future__ import annotations

import pytest

from agent.expert import SplitError, expert_trajectories
from swe_rlvr.config import AgentConfig, SandboxConfig
from trainer.episodes import expert_episodes
from trainer.scoring import expert_reward_rows

WORKERS = 4


@pytest.fixture(scope="module")
def builtin_train():
    from builtin_support import builtin_sample
    try:
        return builtin_sample("train")
    except FileNotFoundError as exc:
        pytest.skip(f"built-in instances not generated yet: {exc}")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("expert")
    return SandboxConfig(workdir=str(root / "work"), env_cache=str(root / "envs")), root / "repos"


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def expert(builtin_train, tiny_model_dir, env):
    """Expert episodes of every sampled train instance (the e2e sweep)."""
    sandbox_cfg, store = env
    return expert_trajectories(builtin_train, tiny_model_dir, AgentConfig(), sandbox_cfg, store,
                               workers=WORKERS)


@pytest.fixture(scope="module")
def expert_few(builtin_train, tiny_model_dir, env):
    """Expert episodes of three train instances, one per project where it can, for the unit tier."""
    sandbox_cfg, store = env
    few = list({i.repo: i for i in reversed(builtin_train)}.values())[:3]
    return expert_trajectories(few, tiny_model_dir, AgentConfig(), sandbox_cfg, store, workers=WORKERS)


@pytest.mark.e2e
def test_every_train_instance_gives_a_resolved_expert_episode(builtin_train, expert):
    assert sorted(t.instance_id for t in expert) == sorted(i.instance_id for i in builtin_train)
    assert all(t.termination == "submitted" and t.patch and not t.format_errors for t in expert)


EPISODES = ["expert_few", pytest.param("expert", marks=pytest.mark.e2e)]
"""Three instances' episodes in the unit tier, every sampled instance's in the e2e sweep."""


@pytest.mark.parametrize("episodes", EPISODES)
def test_loss_mask_covers_only_the_replies(episodes, tokenizer, request):
    """mask 1 exactly on [turn start, end-of-turn] of each reply; the prompt and observations are 0,
    and the masked tokens decode to the expert's own command blocks."""
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for traj in request.getfixturevalue(episodes):
        want = [0] * len(traj.token_ids)
        for start in traj.turn_starts:
            end = traj.token_ids.index(eot, start) + 1   # the reply runs through its end-of-turn id
            want[start:end] = [1] * (end - start)
        assert traj.loss_mask == want, traj.instance_id
        assert traj.loss_mask[:traj.turn_starts[0]] == [0] * traj.turn_starts[0]
        replies = [tokenizer.decode(traj.token_ids[s:traj.token_ids.index(eot, s)])
                   for s in traj.turn_starts]
        assert all("```bash\n" in r for r in replies) and replies[-1].endswith("submit\n```")


@pytest.mark.parametrize("episodes", EPISODES)
def test_expert_episodes_feed_rft(episodes, request):
    expert = request.getfixturevalue(episodes)
    rollouts = [t.to_row() for t in expert]
    episodes = expert_episodes(rollouts)
    assert len(episodes) == len(expert)
    assert all(e.resolved and e.num_actions > 0 for e in episodes)
    rewards = expert_reward_rows(rollouts)
    assert [r["episode_id"] for r in rollouts] == [r["episode_id"] for r in rewards]


def test_test_split_is_refused(tiny_model_dir, env):
    from swe_rlvr.builtin import load_builtin

    sandbox_cfg, store = env
    mixed = load_builtin("train")[:1] + load_builtin("test")[:1]
    with pytest.raises(SplitError, match="train.*split") as info:
        expert_trajectories(mixed, tiny_model_dir, AgentConfig(), sandbox_cfg, store)
    assert mixed[1].instance_id in str(info.value) and mixed[0].instance_id not in str(info.value)
