"""Agent-RLVR's guided recovery, end to end on the built-in suite with scripted policies.

Rule guidance must point at the right file and function of every built-in instance, and a weak
policy that can only fix a bug it is told the location of must recover the instances it failed,
when guided, and only then.
"""

from __future__ import annotations

import ast
import subprocess

import pytest

from agent.guidance_sources import RulesSource, locate
from agent.recovery import select_failed, write_guidance
from agent.runner import run_rollouts
from agent.scripted import ScriptedPolicy
from swe_rlvr.artifacts import outcomes
from swe_rlvr.config import AgentConfig, GuidanceConfig, SandboxConfig
from swe_rlvr.patches import parse_hunks
from tasks.metrics import recovery_metrics

WORKERS = 4


@pytest.fixture(scope="module")
def builtin():
    from swe_rlvr.builtin import load_builtin
    return load_builtin()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("guided")
    return SandboxConfig(workdir=str(root / "work"), env_cache=str(root / "envs")), root / "repos"


@pytest.fixture(scope="module")
def read_base(env):
    from sandbox.repos import ensure_repo

    def read(instance, path: str) -> str:
        repo = ensure_repo(instance, env[1])
        proc = subprocess.run(["git", "-C", str(repo), "show", f"{instance.base_commit}:{path}"],
                              capture_output=True, text=True)
        return proc.stdout if proc.returncode == 0 else ""
    return read


def _defines(node: ast.AST, name: str) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)


def _symbol_source(source: str, qualified: str) -> str:
    """The source text of `Class.method`, `function` or `NAME = ...` in `source`, found by walking."""
    node: ast.AST = ast.parse(source)
    for name in qualified.split("."):
        node = next(n for n in ast.iter_child_nodes(node) if _defines(n, name))
    return ast.get_source_segment(source, node)


@pytest.mark.e2e
def test_rule_location_names_the_edited_file_and_function_of_every_builtin(builtin, read_base):
    for instance in builtin:
        locations = locate(instance, read_base)
        assert {loc.path for loc in locations} == set(instance.fix_files()), instance.instance_id
        removed = {h.path: [line.strip() for line in h.removed if line.strip()]
                   for h in parse_hunks(instance.patch)}
        for loc in locations:
            if not loc.symbol:
                continue
            body = _symbol_source(read_base(instance, loc.path), loc.symbol)
            # Every line the fix removes in this file lies inside the named function or another
            # named location of the same file.
            others = "".join(_symbol_source(read_base(instance, o.path), o.symbol)
                             for o in locations if o.path == loc.path and o.symbol)
            assert all(line in others for line in removed.get(loc.path, [])), instance.instance_id
            assert body, (instance.instance_id, loc.symbol)
        assert any(loc.symbol for loc in locations), instance.instance_id


def test_weak_policy_recovers_only_with_guidance(builtin, env, read_base, tiny_model_dir):
    from transformers import AutoTokenizer

    from sandbox.grading import grade_many

    cfg, store = env
    train = [i for i in builtin if i.split == "train"][:8]
    engine = ScriptedPolicy(AutoTokenizer.from_pretrained(tiny_model_dir), train, variant="weak")

    def attempt(guidance):
        trajs = run_rollouts(train, engine, AgentConfig(), cfg, store, group_size=1, iteration=0,
                             guidance=guidance, workers=WORKERS, progress=False)
        rows = [t.to_row(iteration=0, sample=0, policy_version=0) for t in trajs]
        reports = grade_many([(i, r["patch"], r["episode_id"]) for i, r in zip(train, rows)], cfg,
                             store, WORKERS, progress=False)
        return rows, [r.to_row() for r in reports]

    rollouts, grades = attempt(None)
    assert not any(g["resolved"] for g in grades)           # unguided, the weak policy fails all
    failures = select_failed(outcomes(rollouts, grades), "unresolved")
    assert set(failures) == {i.instance_id for i in train}
    hints = write_guidance({i.instance_id: i for i in train}, failures,
                           RulesSource(read_base, GuidanceConfig()))
    g_rollouts, g_grades = attempt({h.instance_id: h.text() for h in hints})
    assert all(r["guided"] for r in g_rollouts) and not any(r["guided"] for r in rollouts)
    assert all(g["resolved"] for g in g_grades)             # guided, it recovers every one
    metrics = recovery_metrics(outcomes(rollouts + g_rollouts, grades + g_grades), failures,
                               [h.to_row() for h in hints])
    assert metrics["guided_recovery_rate"] == 1.0
    assert metrics["unguided_resolve_rate"] == 0.0 and metrics["guidance_leakage"] == 0.0
    assert metrics["pairs_built"] == len(train)
