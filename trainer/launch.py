"""Run an update loop on many GPUs under the `deepspeed` launcher, as a subprocess.

`launch(loop, model_dir, items, cfg, out_dir)` saves the episodes (or DPO pairs) and a JSON spec in
`out_dir`, runs `deepspeed --num_gpus <trainer.num_gpus> --module trainer.launch <spec>`, and
reads back rank 0's `result.json`. Each rank runs the same loop with `trainer.engine: deepspeed`;
resume works as in-process (re-launch with the same out_dir).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from swe_rlvr.config import Config, from_dict, to_dict
from trainer.loops import TrainResult, run_dapo, run_dpo, run_rft

LOOPS = {"rft": run_rft, "dapo": run_dapo, "dpo": run_dpo}


def launch(loop: str, model_dir: Path, items: list, cfg: Config, out_dir: Path) -> TrainResult:
    """Run LOOPS[loop] under the deepspeed launcher on trainer.num_gpus ranks."""
    if loop not in LOOPS:
        raise ValueError(f"Unknown loop {loop!r}; choose one of: {', '.join(LOOPS)}.")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(list(items), out_dir / "launch_items.pt")
    cfg = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, engine="deepspeed"))
    spec = {"loop": loop, "model_dir": str(model_dir), "items": str(out_dir / "launch_items.pt"),
            "config": to_dict(cfg), "out_dir": str(out_dir)}
    (out_dir / "launch_spec.json").write_text(json.dumps(spec))
    cmd = ["deepspeed", f"--num_gpus={cfg.trainer.num_gpus}", "--module", "trainer.launch",
           str(out_dir / "launch_spec.json")]
    subprocess.run(cmd, check=True)
    result = json.loads((out_dir / "result.json").read_text())
    return TrainResult(Path(result["checkpoint"]), result["metrics"])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[-1]).read_text())
    cfg = from_dict(Config, spec["config"])
    items = torch.load(spec["items"], weights_only=False)
    result = LOOPS[spec["loop"]](Path(spec["model_dir"]), items, cfg, Path(spec["out_dir"]))
    if int(os.environ.get("RANK", "0")) == 0:
        (Path(spec["out_dir"]) / "result.json").write_text(json.dumps(
            {"checkpoint": str(result.checkpoint), "metrics": result.metrics}))


if __name__ == "__main__":
    main()
