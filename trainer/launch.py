"""Run an update loop in this process, or on several ranks under `torchrun`.

`train(loop, model_dir, items, cfg, out_dir)` is what the update stage calls. With one rank
(`world_size`: `trainer.num_gpus` on a GPU machine, `trainer.processes` on CPU) it runs the loop
here. With more it saves the episodes (or DPO pairs) and a JSON spec in `out_dir`, runs

    python -m torch.distributed.run --standalone --nproc_per_node <world> -m trainer.launch <spec>

and reads back rank 0's `result.json`. Every rank runs the same loop (`main`): the engine joins
the process group torchrun describes (nccl on GPU, gloo on CPU), each rank trains on its share
of every step's packed rows and gradients are summed over the ranks (`trainer.engine_torch`, or
DeepSpeed's own reduction under `trainer.engine: deepspeed`, which torchrun launches the same
way), and rank 0 writes the checkpoints, metrics and result. Resume works as in-process:
re-launch with the same out_dir. One machine: multi-node launches (a rendezvous host) are left
out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from swe_rlvr.config import Config, TrainerConfig, from_dict, to_dict
from trainer.loops import TrainResult, run_dapo, run_dpo, run_rft

LOOPS: dict[str, Callable[..., TrainResult]] = {"rft": run_rft, "dapo": run_dapo, "dpo": run_dpo}
ROOT = Path(__file__).resolve().parents[1]
"""The repository root, put on the ranks' PYTHONPATH so `-m trainer.launch` resolves."""


def world_size(t: TrainerConfig) -> int:
    """Ranks of the update: trainer.num_gpus where it trains on GPU, trainer.processes on CPU."""
    from trainer.engine_torch import pick_device
    if pick_device(t.device).type != "cuda":
        return t.processes
    if t.num_gpus > torch.cuda.device_count():
        raise ValueError(f"trainer.num_gpus is {t.num_gpus} but torch sees "
                         f"{torch.cuda.device_count()} GPU(s); lower trainer.num_gpus or set "
                         f"CUDA_VISIBLE_DEVICES.")
    return t.num_gpus


def train(loop: str, model_dir: Path, items: list, cfg: Config, out_dir: Path) -> TrainResult:
    """LOOPS[loop] on `world_size` ranks: here for one, under torchrun for more."""
    if loop not in LOOPS:
        raise ValueError(f"Unknown loop {loop!r}; choose one of: {', '.join(LOOPS)}.")
    world = world_size(cfg.trainer)
    if world == 1:
        return LOOPS[loop](Path(model_dir), items, cfg, Path(out_dir))
    return launch(loop, model_dir, items, cfg, out_dir, world)


def command(spec: Path, world: int) -> list[str]:
    """torchrun, one machine, `world` ranks, each running `python -m trainer.launch spec`."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={world}", "-m", "trainer.launch", str(spec)]


def launch(loop: str, model_dir: Path, items: list, cfg: Config, out_dir: Path,
           world: int) -> TrainResult:
    """Run LOOPS[loop] under torchrun on `world` ranks; rank 0's result."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(list(items), out_dir / "launch_items.pt")
    spec = {"loop": loop, "model_dir": str(Path(model_dir).resolve()),
            "items": str((out_dir / "launch_items.pt").resolve()), "config": to_dict(cfg),
            "out_dir": str(out_dir.resolve())}
    (out_dir / "launch_spec.json").write_text(json.dumps(spec))
    (out_dir / "result.json").unlink(missing_ok=True)
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    cmd = command(out_dir / "launch_spec.json", world)
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"The {loop} update on {world} ranks failed (exit {proc.returncode}); "
                           f"each rank's traceback is in the output above. Command: "
                           f"{' '.join(cmd)}")
    result = json.loads((out_dir / "result.json").read_text())
    return TrainResult(Path(result["checkpoint"]), result["metrics"])


def main(argv: list[str] | None = None) -> None:
    """One rank: run the spec's loop; rank 0 writes `result.json`."""
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[-1]).read_text())
    cfg = from_dict(Config, spec["config"])
    items = torch.load(spec["items"], weights_only=False)
    try:
        result = LOOPS[spec["loop"]](Path(spec["model_dir"]), items, cfg, Path(spec["out_dir"]))
        if int(os.environ.get("RANK", "0")) == 0:
            tmp = Path(spec["out_dir"]) / ".result.json.tmp"
            tmp.write_text(json.dumps({"checkpoint": str(result.checkpoint),
                                       "metrics": result.metrics}))
            os.replace(tmp, Path(spec["out_dir"]) / "result.json")
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
