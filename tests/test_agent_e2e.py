"""End to end on the built-in instances: scripted policies -> real loop -> local sandbox -> grading.

Every hand-written built-in instance and a sample of the generated ones (`builtin_sample`) is rolled
out once by the gold script (instances in parallel) and graded in a fresh sandbox: each must be
submitted and resolved. The cheating script must resolve none, and the
weak script must resolve an instance only when guidance names the file to edit.
"""

from __future__ import annotations

import pytest

from agent.runner import run_rollouts
from agent.scripted import ScriptedPolicy
from builtin_support import builtin_sample
from swe_rlvr.config import AgentConfig, SandboxConfig
from test_agent_support import tokenizer  # noqa: F401  (fixture)

WORKERS = 4


@pytest.fixture(scope="module")
def builtin():
    try:
        instances = builtin_sample()
    except FileNotFoundError as exc:
        pytest.skip(f"built-in instances not generated yet: {exc}")
    return instances


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """(sandbox config, repo store) shared by the module, so environments are built once."""
    root = tmp_path_factory.mktemp("e2e")
    cfg = SandboxConfig(workdir=str(root / "work"), env_cache=str(root / "envs"))
    return cfg, root / "repos"


def rollout_and_grade(instances, engine, env, agent_cfg=AgentConfig(), guidance=None):
    from sandbox.grading import grade_many

    cfg, store = env
    trajs = run_rollouts(instances, engine, agent_cfg, cfg, store, group_size=1, iteration=0,
                         guidance=guidance, workers=WORKERS, progress=False)
    reports = grade_many([(i, t.patch) for i, t in zip(instances, trajs)], cfg, store, WORKERS,
                         progress=False)
    assert not [r.infra_reason for r in reports if r.infra_failure]
    return trajs, reports


@pytest.mark.e2e
def test_gold_script_resolves_every_builtin_instance(builtin, env, tokenizer):
    trajs, reports = rollout_and_grade(builtin, ScriptedPolicy(tokenizer, builtin), env)
    problems = [(t.instance_id, t.termination, t.error, r.resolution)
                for t, r in zip(trajs, reports) if t.termination != "submitted" or not r.resolved]
    assert not problems


def test_bash_scaffold_gold_script_resolves(builtin, env, tokenizer):
    some = builtin[:3]
    engine = ScriptedPolicy(tokenizer, some, scaffold="bash")
    _trajs, reports = rollout_and_grade(some, engine, env, AgentConfig(scaffold="bash"))
    assert all(r.resolved for r in reports)


def test_cheating_script_gains_nothing(builtin, env, tokenizer):
    """Deleting tests, a conftest that passes everything, fake PASSED lines and a rewritten git
    history all end in a patch that grading runs against the real tests: nothing resolves."""
    some = builtin[:3]
    trajs, reports = rollout_and_grade(some, ScriptedPolicy(tokenizer, some, variant="cheat"), env)
    assert all(t.termination == "submitted" for t in trajs)
    assert not any(r.resolved for r in reports)


def test_weak_script_needs_a_location_hint(builtin, env, tokenizer):
    some = builtin[:2]
    engine = ScriptedPolicy(tokenizer, some, variant="weak")
    _trajs, unguided = rollout_and_grade(some, engine, env)
    hints = {i.instance_id: "Location:\n" + "\n".join(f"- File `{p}`" for p in i.fix_files()) for i in some}
    guided_trajs, guided = rollout_and_grade(some, engine, env, guidance=hints)
    assert not any(r.resolved for r in unguided)
    assert all(r.resolved for r in guided) and all(t.guided for t in guided_trajs)
