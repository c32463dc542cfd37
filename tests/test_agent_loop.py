"""The episode loop's ends (submit and every limit), its sandbox boundary, and the ROLLOUTS row."""

from __future__ import annotations

import pyarrow.parquet as pq

from agent.loop import run_episode
from agent.runner import write_rollouts
from agent.scripted import ReplayPolicy, ScriptedPolicy
from agent.trajectory import Trajectory
from swe_rlvr.artifacts import ROLLOUTS, check
from swe_rlvr.config import AgentConfig
from test_agent_support import tokenizer, toy  # noqa: F401  (fixtures)

LS = "```\nls\n```"


def test_gold_script_submits_the_sandbox_diff(toy, tokenizer):
    instance, box = toy
    traj = run_episode(instance, box, ScriptedPolicy(tokenizer, [instance]), AgentConfig())
    assert traj.termination == "submitted" and traj.format_errors == 0
    assert traj.patch == box.diff() and "+    return a + b" in traj.patch and "NEWS.md" in traj.patch
    assert traj.gen_tokens == sum(traj.loss_mask)            # every sampled id of a good turn trains
    assert traj.wall_s >= traj.gen_s + traj.exec_s > 0


def test_bash_scaffold_gold_script(toy, tokenizer):
    instance, box = toy
    policy = ScriptedPolicy(tokenizer, [instance], scaffold="bash")
    traj = run_episode(instance, box, policy, AgentConfig(scaffold="bash"))
    assert traj.termination == "submitted" and traj.patch == instance.patch


def test_max_turns(toy, tokenizer):
    instance, box = toy
    traj = run_episode(instance, box, ReplayPolicy(tokenizer, [LS] * 9), AgentConfig(max_turns=3))
    assert (traj.termination, traj.turns, traj.patch) == ("max_turns", 3, "")


def test_context_budget_caps_generation_and_ends_the_episode(toy, tokenizer):
    instance, box = toy
    first = run_episode(instance, box, ReplayPolicy(tokenizer, [LS] * 3), AgentConfig(max_turns=1))
    budget = first.turn_starts[0] + 30
    traj = run_episode(instance, box, ReplayPolicy(tokenizer, ["word " * 200] * 3),
                       AgentConfig(context_tokens=budget, max_new_tokens=1000))
    # the first reply may use only the 30 ids left in the budget; then the budget is spent
    assert traj.termination == "context_overflow" and traj.turns == 1
    assert len(traj.token_ids) - traj.turn_starts[0] >= 30


def test_wall_time(toy, tokenizer):
    instance, box = toy
    traj = run_episode(instance, box, ReplayPolicy(tokenizer, ["```\nsleep 1.5\n```"] * 5),
                       AgentConfig(wall_time_s=1.0))
    assert (traj.termination, traj.turns) == ("timeout", 1)


def test_format_error_variant_ends_on_format_errors(toy, tokenizer):
    instance, box = toy
    policy = ScriptedPolicy(tokenizer, [instance], variant="format_error")
    traj = run_episode(instance, box, policy, AgentConfig(max_format_errors=4))
    assert (traj.termination, traj.format_errors, sum(traj.loss_mask)) == ("format_errors", 4, 0)


def test_an_oversized_patch_is_a_format_failure_not_a_giant_string(toy, tokenizer):
    """A policy that writes megabytes before submitting once made a 1.6 GB patch string in the
    rollout process. Past `sandbox.max_patch_kb` (1 MiB by default) the submission ends as
    `patch_too_large`, a format failure with the reason, and no patch is kept."""
    instance, box = toy
    write = "```\npython3 -c \"open('big.txt', 'w').write('x' * 99 + '\\n') or None\"\n```"
    grow = "```\nfor i in $(seq 14); do cat big.txt big.txt > b2 && mv b2 big.txt; done; wc -c big.txt\n```"
    traj = run_episode(instance, box, ReplayPolicy(tokenizer, [write, grow]), AgentConfig())
    assert "1638400 big.txt" in traj.messages[5]["content"]                    # 100 B x 2^14
    assert (traj.termination, traj.patch, traj.format_errors) == ("patch_too_large", "", 1)
    assert "max_patch_kb" in traj.error


def test_sandbox_error_becomes_an_observation(toy, tokenizer):
    instance, box = toy
    traj = run_episode(instance, box, ReplayPolicy(tokenizer, ["```\nopen ../../../etc/passwd\n```"]),
                       AgentConfig())
    assert traj.termination == "submitted" and traj.format_errors == 0
    assert traj.messages[3]["content"].startswith("The sandbox failed to run this command: SandboxError")


def test_long_observations_are_truncated_with_a_marker(toy, tokenizer):
    instance, box = toy
    traj = run_episode(instance, box, ReplayPolicy(tokenizer, ["```\nseq 1 100000\n```"]),
                       AgentConfig(observation_chars=300))
    observation = traj.messages[3]["content"]
    assert observation.startswith("1\n2\n") and "characters omitted" in observation
    assert "100000\n" in observation and observation.endswith("[exit code 0]")  # the tail survives
    assert len(observation) < 400


def test_one_shot_demo_is_in_the_system_prompt_only_when_asked(toy, tokenizer):
    instance, box = toy
    plain = run_episode(instance, box, ReplayPolicy(tokenizer, []), AgentConfig())
    demo = run_episode(instance, box, ReplayPolicy(tokenizer, []), AgentConfig(one_shot_demo=True))
    assert "Here is an example" not in plain.messages[0]["content"]
    assert "Here is an example" in demo.messages[0]["content"] and "edit 13:13" in demo.messages[0]["content"]
    assert demo.turn_starts[0] > plain.turn_starts[0] and demo.termination == "submitted"
    assert box.workdir in plain.messages[0]["content"]


def test_trajectory_row_matches_the_rollouts_schema(toy, tokenizer, tmp_path):
    instance, box = toy
    traj = run_episode(instance, box, ScriptedPolicy(tokenizer, [instance], policy_version=7), AgentConfig())
    row = traj.to_row(iteration=2, sample=5)
    assert list(row) == ROLLOUTS.names
    assert row["episode_id"] == "toy__calc-1/i2/s5" and row["policy_version"] == 7
    traj.iteration, traj.sample = 2, 5
    table = check("rollouts", pq.read_table(write_rollouts(tmp_path / "r.parquet", [traj])))
    back = Trajectory.from_row(table.to_pylist()[0])
    assert back.token_ids == traj.token_ids and back.loss_mask == traj.loss_mask
    assert back.messages == traj.messages and back.logprobs == traj.logprobs
