"""infra/gpu/: what a GPU machine needs is ready here, and the GPU check's wiring runs on CPU.

A GPU machine may come for minutes and without a package registry: its minutes must not go on
set-up or on a script that breaks at its first import. So CI proves here what can
be proved without one: `prepare.sh` fetches every listed wheel for the machine's Python 3.12
manylinux x86_64 within the size that travels, and `check.sh --dry-run` invokes every step (the
CUDA-only ones collect or parse and report "SKIP ...: no GPU"; the hf engine check and the
Prefect-less end-to-end iteration run on CPU at tiny size) inside the budget it declares, with
the steps' imports resolved in an emulation of the GPU image plus the carried wheels.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from packaging import tags
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[1]
STEPS = ["setup", "gpu-tests", "deepspeed", "bench", "engine", "e2e"]
CUDA_ONLY = {"gpu-tests", "deepspeed", "bench"}
VERDICT = re.compile(r"(PASS|FAIL|SKIP) ([\w-]+) \((\d+)s\): (.*)")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("OUT", "PYTHONPATH")}


@pytest.fixture(scope="module")
def prepared():
    """(wheel folder, prepare.sh's output); the folder is git-ignored and kept between runs."""
    proc = subprocess.run(["bash", "infra/gpu/prepare.sh"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return ROOT / ".gpu-wheels", proc.stdout


def _listed() -> dict[str, str]:
    lines = (ROOT / "infra" / "gpu" / "wheels.txt").read_text().splitlines()
    pins = [line.split("#", 1)[0].strip() for line in lines]
    return {canonicalize_name(p.split("==")[0]): p.split("==")[1] for p in pins if p}


@pytest.mark.infra
def test_prepare_fetches_one_installable_wheel_per_listed_pin(prepared):
    folder, output = prepared
    gpu_machine = set(tags.cpython_tags((3, 12), platforms=[
        f"manylinux_2_{n}_x86_64" for n in range(17, 40)] + ["manylinux2014_x86_64", "linux_x86_64"]))
    gpu_machine |= set(tags.compatible_tags((3, 12), platforms=["manylinux_2_17_x86_64"]))
    found = {}
    for wheel in folder.glob("*.whl"):
        name, version, _, wheel_tags = parse_wheel_filename(wheel.name)
        assert wheel_tags & gpu_machine, f"{wheel.name} does not install on cp312 manylinux x86_64"
        assert name not in found, f"two wheels of {name}: the install would stop"
        found[name] = str(version)
    assert found == _listed()
    size = sum(p.stat().st_size for p in folder.glob("*.whl"))
    assert size <= 45 * 2 ** 20, f"{size / 2 ** 20:.0f} MiB of wheels leaves too little of 64 MiB"
    assert "vllm" in output and "prefect" in output          # it says what it left out, and why


@pytest.mark.infra
def test_dry_run_invokes_every_step_within_its_declared_budget(prepared, tmp_path):
    out = tmp_path / "out"
    start = time.monotonic()
    proc = subprocess.run(["bash", "infra/gpu/check.sh", "--dry-run", "--out", str(out)], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    verdicts = {m[2]: (m[1], m[4]) for m in map(VERDICT.fullmatch, proc.stdout.splitlines()) if m}
    assert list(verdicts) == STEPS
    for step in STEPS:
        verdict, reason = verdicts[step]
        assert (verdict, "no GPU" in reason) == (("SKIP", True) if step in CUDA_ONLY
                                                 else ("PASS", False)), (step, reason)
    summary = re.fullmatch(r"gpu-check: 3 passed, 0 failed, 3 skipped in \d+s \(budget (\d+)s\)",
                           proc.stdout.splitlines()[-1])
    assert summary, proc.stdout
    assert wall <= int(summary[1]), f"the dry run took {wall:.0f}s, over its {summary[1]}s budget"
    # a handful of files, easy to bring back: one log per step and the summary
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{s}.log" for s in STEPS]
                                                           + ["summary.txt"])


def test_without_a_gpu_and_without_dry_run_it_says_so_and_fails():
    proc = subprocess.run(["bash", "infra/gpu/check.sh"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "no CUDA GPU" in proc.stderr and "--dry-run" in proc.stderr


def test_the_gpu_budget_fits_13_minutes_in_two_runs_of_at_most_9():
    """About 13 minutes in all, and each of the README's two calls under a 10-minute
    limit per command: `--steps gpu-tests,deepspeed,engine,e2e`, then `--steps bench`."""
    text = (ROOT / "infra" / "gpu" / "check.sh").read_text()
    budget = {k: int(v) for k, v in re.findall(r"\[([\w-]+)\]=(\d+)",
                                               re.search(r"declare -A BUDGET=\((.*)\)", text)[1])}
    assert list(budget) == STEPS
    assert sum(budget.values()) <= 13 * 60
    first = budget["setup"] + sum(budget[s] for s in ("gpu-tests", "deepspeed", "engine", "e2e"))
    assert first <= 540 and budget["setup"] + budget["bench"] <= 540
