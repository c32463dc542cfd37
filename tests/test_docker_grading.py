"""Grading on the docker backend (base image): the built-in suite's gold patches resolve and empty
patches do not, and a suite that cannot run is an infrastructure failure, never a 0.

Every test here needs an engine (`infra/docker/engine.sh`) and the base image
(`infra/docker/base-image.sh`); without them they skip and say so.
"""

from __future__ import annotations

import pytest

from docker_engine import docker_client  # noqa: F401
from swe_rlvr.config import SandboxConfig

pytestmark = pytest.mark.docker


# --------------------------------------------------------------------------- grading on docker


def test_builtin_suite_gold_resolves_and_empty_patch_does_not(docker_client, tmp_path):
    """Every hand-written built-in instance and a sample of the generated ones, graded on the
    docker backend (base image): the gold patch resolves it, the empty patch does not, and neither
    is an infrastructure failure."""
    from builtin_support import builtin_sample
    from sandbox.grading import grade_many
    try:
        instances = builtin_sample()
    except FileNotFoundError as exc:
        pytest.skip(f"the built-in suite is not generated yet: {exc}")
    items = [(inst, inst.patch) for inst in instances] + [(inst, "") for inst in instances]
    reports = grade_many(items, SandboxConfig(backend="docker"), tmp_path / "repos", workers=4,
                         progress=False)
    gold, empty = reports[:len(instances)], reports[len(instances):]
    for inst, report in zip(instances, gold):
        assert report.resolved, (inst.instance_id, report.infra_reason, report.notes,
                                 report.f2p_failed, report.p2p_failed, report.log[-1500:])
    for inst, report in zip(instances, empty):
        assert not report.resolved and not report.infra_failure, (inst.instance_id,
                                                                   report.infra_reason)


def test_a_suite_that_cannot_run_is_an_infrastructure_failure_on_docker(docker_client, tmp_path):
    """No interpreter in the image (exit 127), through the test command and through a record's
    eval_script: the suite never ran, with the gold patch or without one. No sample, never a 0."""
    from dataclasses import replace

    from builtin_support import builtin_sample
    from sandbox.grading import grade
    try:
        inst = builtin_sample()[0]
    except FileNotFoundError as exc:
        pytest.skip(f"the built-in suite is not generated yet: {exc}")
    script = "set -uxo pipefail\n: '>>>>> Start Test Output'\npython2.1 -m pytest -rA\n: '>>>>> End Test Output'\n"
    cases = (replace(inst, env=replace(inst.env, test_cmd="python2.1 -m pytest -rA")),
             replace(inst, instance_id=inst.instance_id + "-script", env=replace(inst.env, eval_script=script)))
    for case in cases:
        for patch in ("", case.patch):
            report = grade(case, patch, SandboxConfig(backend="docker"), tmp_path / "repos")
            assert report.infra_failure and not report.resolved, (case.instance_id, patch[:20])
            assert "python2.1" in report.infra_reason and "command not found" in report.infra_reason
