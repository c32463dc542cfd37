"""The rollout runner: concurrent groups, batched generation, a crash recorded as one episode."""

from __future__ import annotations

import dataclasses
import json
import threading

import pyarrow.parquet as pq

from agent.batcher import Batcher
from agent.engines.base import SamplingParams
from agent.runner import read_journal, run_rollouts
from agent.scripted import ReplayPolicy, ScriptedPolicy
from swe_rlvr.artifacts import check
from swe_rlvr.config import AgentConfig
from test_agent_support import make_repo, tokenizer, toy_instance, toy_sandbox_cfg  # noqa: F401


class Counting:
    """Engine wrapper that records the size of every batch it is asked to generate."""

    def __init__(self, engine):
        self.engine, self.tokenizer, self.policy_version = engine, engine.tokenizer, 0
        self.sizes: list[int] = []

    def generate(self, prompts, params):
        self.sizes.append(len(prompts))
        return self.engine.generate(prompts, params)


def test_batcher_merges_concurrent_calls(tokenizer):
    engine = Counting(ReplayPolicy(tokenizer, []))
    prompt = engine.tokenizer.encode("hello")
    barrier, results = threading.Barrier(4), []

    def episode(batcher):
        with batcher.episode():
            barrier.wait()
            results.append(batcher.generate([prompt], SamplingParams(max_new_tokens=8)))

    with Batcher(engine, max_batch=16, max_wait_s=5.0) as batcher:
        threads = [threading.Thread(target=episode, args=(batcher,)) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
    # all four episodes were live and waiting, so one call of 4 prompts, well before max_wait_s
    assert engine.sizes == [4] and len(results) == 4


def test_batcher_respects_max_batch_and_params(tokenizer):
    engine = Counting(ReplayPolicy(tokenizer, []))
    params = [SamplingParams(max_new_tokens=8), SamplingParams(max_new_tokens=9)]
    with Batcher(engine, max_batch=2, max_wait_s=0.05) as batcher:
        threads = [threading.Thread(target=batcher.generate, args=([[5, 6]], params[i % 2]))
                   for i in range(6)]
        [t.start() for t in threads]
        [t.join() for t in threads]
    assert sum(engine.sizes) == 6 and max(engine.sizes) <= 2


def test_runner_groups_batches_and_survives_crashes(tmp_path, tokenizer):
    store = tmp_path / "store"
    instance = toy_instance(make_repo(store / "toy__calc"))
    unknown = dataclasses.replace(instance, instance_id="toy__calc-2", problem_statement="Not scripted.")
    missing = dataclasses.replace(instance, instance_id="gone__repo-1", repo="gone/repo")
    engine = Counting(ScriptedPolicy(tokenizer, [instance]))
    out = tmp_path / "iter_3" / "rollouts.parquet"
    # A batch goes out when every live episode waits for one (or after max_wait_s): with a wait
    # longer than any sandbox start, the first batch holds the four live episodes on any machine,
    # where 20 ms let a busy host's staggered sandbox starts send every prompt alone.
    trajs = run_rollouts([instance, unknown, missing], engine, AgentConfig(), toy_sandbox_cfg(tmp_path),
                         store, group_size=3, iteration=3, workers=4, out=out, progress=False, max_wait_s=60)
    assert [(t.instance_id, t.sample) for t in trajs] == \
        [(i.instance_id, s) for i in (instance, unknown, missing) for s in range(3)]
    good, bad, gone = trajs[:3], trajs[3:6], trajs[6:]
    assert all(t.termination == "submitted" and "return a + b" in t.patch for t in good)
    # the engine raised for the unscripted issue: only those episodes fail, their prompts are kept
    assert all(t.termination == "error" and "found none of its instances" in t.error for t in bad)
    assert all(len(t.token_ids) > 0 and t.turns == 0 for t in bad)
    # the sandbox could not start: the episode is still recorded, with the fix in the error text
    assert all(t.termination == "error" and "SandboxError" in t.error and "gone/repo" in t.error for t in gone)
    assert max(engine.sizes) > 1                         # generation was batched across episodes
    rows = check("rollouts", pq.read_table(out)).to_pylist()
    assert [r["episode_id"] for r in rows][:2] == ["toy__calc-1/i3/s0", "toy__calc-1/i3/s1"]
    assert len(rows) == 9 and {r["termination"] for r in rows} == {"submitted", "error"}


def test_a_stopped_run_goes_on_from_its_journal_and_crashes_run_again(tmp_path, tokenizer):
    """Each finished episode is appended to the journal as it ends; a rerun takes the episodes the
    journal holds (of its iteration; a line cut short by the stop is left out) and samples only
    the others. An episode that crashed is not journaled: it runs again."""
    store = tmp_path / "store"
    instance = toy_instance(make_repo(store / "toy__calc"))
    unknown = dataclasses.replace(instance, instance_id="toy__calc-2", problem_statement="Not scripted.")
    journal = tmp_path / "iter_0" / ".rollouts-key.shard0.jsonl"
    first = run_rollouts([instance, unknown], ScriptedPolicy(tokenizer, [instance]), AgentConfig(),
                         toy_sandbox_cfg(tmp_path), store, group_size=2, iteration=0, workers=2,
                         progress=False, journal=journal)
    lines = journal.read_text().splitlines()
    assert len(lines) == 2 and all('"submitted"' in line for line in lines)  # the crashes are not kept
    journal.write_text(lines[0] + "\n" + lines[1][:40])                     # stopped mid-write
    engine = Counting(ScriptedPolicy(tokenizer, [instance]))
    again = run_rollouts([instance, unknown], engine, AgentConfig(), toy_sandbox_cfg(tmp_path), store,
                         group_size=2, iteration=0, workers=2, progress=False, journal=journal)
    assert [(t.instance_id, t.sample) for t in again] == [(t.instance_id, t.sample) for t in first]
    kept = json.loads(lines[0])["sample"]                                  # the line that survived
    assert again[kept].token_ids == first[kept].token_ids and again[kept].wall_s == first[kept].wall_s
    rerun = 1 - kept                                                       # sampled again
    assert again[rerun].termination == "submitted" and again[rerun].wall_s != first[rerun].wall_s
    assert all(t.termination == "error" for t in again[2:])
    assert sum(engine.sizes) >= 1 and len(journal.read_text().splitlines()) == 3
    assert len(read_journal(journal, 0)) == 2
    other = run_rollouts([instance], ScriptedPolicy(tokenizer, [instance]), AgentConfig(), toy_sandbox_cfg(tmp_path),
                         store, group_size=1, iteration=1, workers=1, progress=False, journal=journal)
    assert other[0].iteration == 1 and other[0].wall_s not in (first[0].wall_s, again[0].wall_s)


def test_guided_episodes_in_the_runner(tmp_path, tokenizer):
    store = tmp_path / "store"
    instance = toy_instance(make_repo(store / "toy__calc"))
    hint = {instance.instance_id: "Location:\n- File `calc/ops.py`, function `add` (line 6)"}
    engine = ScriptedPolicy(tokenizer, [instance], variant="weak")
    trajs = run_rollouts([instance], engine, AgentConfig(), toy_sandbox_cfg(tmp_path), store,
                         group_size=2, iteration=0, guidance=hint, workers=2, progress=False)
    assert all(t.guided and t.guidance_start > 0 and "return a + b" in t.patch for t in trajs)
    assert trajs[0].to_row()["episode_id"] == "toy__calc-1/i0/s0/guided"


def test_runner_batches_the_real_hf_engine(tmp_path, tiny_model_dir):
    """Two concurrent episodes of the tiny random model through the Batcher into the continuously
    batching hf engine (rows joining a running batch: tests/test_engines.py) give each episode
    ids that decode to its own messages, with the sampler's log-probs."""
    from agent.chat import ChatTokens
    from agent.engines import make_engine
    from swe_rlvr.config import EngineConfig

    store = tmp_path / "store"
    instance = toy_instance(make_repo(store / "toy__calc"))
    engine = make_engine(EngineConfig(name="hf", model=str(tiny_model_dir), device="cpu",
                                      torch_threads=1))
    cfg = AgentConfig(max_turns=2, max_new_tokens=16, max_format_errors=5)
    trajs = run_rollouts([instance], engine, cfg, toy_sandbox_cfg(tmp_path), store, group_size=2,
                         iteration=1, workers=2, max_batch=2, progress=False)
    chat = ChatTokens(engine.tokenizer)
    for traj in trajs:
        assert traj.turns == 2 and traj.termination in ("max_turns", "submitted"), traj.error
        rendered = chat.render(traj.messages, generation_prompt=traj.messages[-1]["role"] == "user")
        assert rendered.startswith(chat.decode(traj.token_ids))
        sampled = traj.logprobs[traj.turn_starts[0]:]
        assert any(lp < 0 for lp in sampled)
