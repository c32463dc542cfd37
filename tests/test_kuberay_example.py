"""The KubeRay example (infra/kuberay): no Kubernetes here, so what is checked is that the
RayCluster and the RayJob agree with each other and with the project: the job's command is a real
`swe-rlvr train` whose KEY=VALUE overrides load, every pod mounts the run volume where the job
writes, the sandbox workers have the Docker socket the docker backend needs, and the trainer
group has the GPUs the update asks Ray for (`flows.runners.update_resources`)."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = yaml.safe_load((ROOT / "infra/kuberay/raycluster.yaml").read_text())
JOB = yaml.safe_load((ROOT / "infra/kuberay/job.yaml").read_text())


def _command() -> tuple[list[str], dict[str, str]]:
    """The job's argv (the image's /app is this checkout) and its overrides as a dict."""
    argv = [a.replace("/app/", f"{ROOT}/") for a in shlex.split(JOB["spec"]["entrypoint"])]
    return argv, dict(a.split("=", 1) for a in argv if "=" in a and not a.startswith("-"))


def _pods() -> dict[str, dict]:
    groups = {"head": CLUSTER["spec"]["headGroupSpec"]}
    groups.update({g["groupName"]: g for g in CLUSTER["spec"]["workerGroupSpecs"]})
    return groups


def test_the_job_command_loads_as_a_ray_run_on_the_cluster():
    from swe_rlvr.config import load_config
    argv, overrides = _command()
    assert argv[:3] == ["swe-rlvr", "train", "--config"]
    cfg = load_config(argv[3], [a for a in argv[4:] if "=" in a])
    assert cfg.orchestration.task_runner == "ray" and cfg.orchestration.ray_address == "auto"
    assert cfg.sandbox.backend == "docker"
    assert JOB["spec"]["clusterSelector"]["ray.io/cluster"] == CLUSTER["metadata"]["name"]
    assert overrides["orchestration.run_root"].startswith("/runs")
    assert overrides["engine.model"].startswith("/runs/")


def test_every_pod_mounts_the_run_volume_and_the_groups_fit_the_job():
    _, overrides = _command()
    for name, group in _pods().items():
        spec = group["template"]["spec"]
        mounts = {m["mountPath"]: m["name"] for c in spec["containers"] for m in c["volumeMounts"]}
        assert mounts.get("/runs") == "runs", name
        claims = {v["name"]: v.get("persistentVolumeClaim") for v in spec["volumes"]}
        assert claims["runs"] == {"claimName": "swe-rlvr-runs"}, name
    pods = _pods()
    assert pods["head"]["rayStartParams"]["num-cpus"] == "0"           # no stage on the head
    sandboxes = pods["sandboxes"]["template"]["spec"]
    assert any(m["mountPath"] == "/var/run/docker.sock"
               for c in sandboxes["containers"] for m in c["volumeMounts"])
    assert float(overrides["orchestration.shard_cpus"]) <= float(
        pods["sandboxes"]["rayStartParams"]["num-cpus"])
    trainer = pods["trainer"]
    gpus = overrides["trainer.num_gpus"]
    assert trainer["rayStartParams"]["num-gpus"] == gpus
    assert trainer["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == gpus
