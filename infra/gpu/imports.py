"""Do the GPU checks' imports resolve? The first thing `infra/gpu/check.sh` proves, in seconds.

    python infra/gpu/imports.py                 # probe the running environment (on the GPU machine)
    python infra/gpu/imports.py --emulate DIR   # probe an emulation of the GPU image (on CPU)

`MODULES` are what the checks import, the lazy imports on their paths included (SWE-bench's
harness for grading, DeepSpeed's ZeRO optimisers). A probe imports each in turn and names every
one that fails, with the missing module, so a forgotten wheel is seen before any GPU minute goes.

`--emulate DIR` answers, here, whether the carried wheels (`wheels.txt`) plus the packages the
GPU image already holds (`image-packages.txt`) are enough: DIR gets links to this
environment's copies of exactly those distributions, and the probe runs in a child Python that
sees only DIR, the repository and the standard library. Simplifications: this environment's
versions and Python stand in for the image's (its transformers is older, its Python 3.12), and a
namespace directory shared by several distributions (e.g. `google`) is shown whole.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

MODULES = (
    # the trainer, its CUDA paths and the MFU bench (steps gpu-tests, bench)
    "trainer.loops", "trainer.launch", "trainer.forward", "trainer.engine_torch",
    "trainer.scoring", "trainer.episodes", "bench.trainer", "safetensors.torch",
    # DeepSpeed: the engine and the ZeRO-2/3 optimisers it builds (step deepspeed)
    "trainer.engine_deepspeed", "deepspeed", "deepspeed.runtime.zero.stage_1_and_2",
    "deepspeed.runtime.zero.stage3",
    # the hf engine, the agent loop, the sandbox and grading (steps engine, e2e)
    "agent.engines.hf", "agent.models", "agent.runner", "agent.scripted", "sandbox.grading",
    "swebench.harness.grading", "swebench.harness.log_parsers", "swebench.harness.constants",
    "swe_rlvr.builtin", "swe_rlvr.config", "tasks.store",
    # the test runner (steps gpu-tests, deepspeed)
    "pytest", "pytest_timeout",
)


def normalise(name: str) -> str:
    """PEP 503 name: 'PyYAML' and 'pyyaml', 'typing_extensions' and 'typing-extensions' agree."""
    return re.sub(r"[-_.]+", "-", name).lower()


def listed(path: Path) -> set[str]:
    """Distribution names in a list file: `name` or `name==version`, `#` comments."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(normalise(re.split(r"[=<>!~ ]", line, maxsplit=1)[0]))
    return names


def probe(modules=MODULES) -> list[str]:
    """'module: error' for every module that does not import."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure is reported, not raised
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    return failed


def link_farm(dest: Path, wanted: set[str]) -> list[str]:
    """Link each top-level entry of the `wanted` distributions installed here into `dest`;
    returns the wanted names not installed here (they cannot be emulated)."""
    dest.mkdir(parents=True, exist_ok=True)
    found = set()
    for dist in metadata.distributions():
        name = normalise(dist.metadata["Name"] or "")
        if name not in wanted or name in found:
            continue
        found.add(name)
        site = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in tops:
            link, target = dest / top, site / top
            if target.exists() and not link.exists():
                link.symlink_to(target)
    return sorted(wanted - found)


def emulate(dest: Path) -> int:
    """Probe MODULES in a child Python that sees only the image's and the carried packages."""
    wanted = listed(HERE / "image-packages.txt") | listed(HERE / "wheels.txt")
    missing = link_farm(dest, wanted)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PYTHONPATH=os.pathsep.join([str(dest), str(ROOT)]), DS_ACCELERATOR="cpu",
               PYTHONNOUSERSITE="1")
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import imports; "
            "sys.exit(imports.report(imports.probe()))")
    print(f"emulated image: {len(wanted) - len(missing)} distributions linked into {dest} "
          f"({len(missing)} of the image's are not installed here; the checks import none of them)")
    return subprocess.run([sys.executable, "-S", "-c", code], env=env).returncode


def report(failed: list[str]) -> int:
    for line in failed:
        print("import failed:", line)
    print(f"imports: {len(MODULES) - len(failed)} of {len(MODULES)} modules import"
          + ("" if not failed else "; carry the missing distributions in infra/gpu/wheels.txt "
             "and rerun infra/gpu/prepare.sh"))
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--emulate", type=Path, help="emulate the GPU image in this (new) directory")
    args = p.parse_args(argv)
    if args.emulate:
        return emulate(args.emulate)
    sys.path.insert(0, str(ROOT))
    return report(probe())


if __name__ == "__main__":
    sys.exit(main())
