"""Atomic HF-format checkpoints with the state needed to resume bit for bit.

A checkpoint directory holds `model.safetensors` + `config.json` (via `save_pretrained`), the
tokenizer files copied from the source model directory, and `trainer_state.pt` (step, optimiser,
scheduler, RNG states, metrics rows so far). It is written into a hidden temp directory next to
the destination and renamed into place, so a crash never leaves a half-written checkpoint under
its final name; `latest_checkpoint` ignores hidden entries.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import torch

TRAIN_STATE = "trainer_state.pt"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "chat_template.jinja",
                   "tokenizer.model")


def rng_state() -> dict:
    """Python and torch (CPU, and CUDA when present) RNG states."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def copy_tokenizer(src: Path, dst: Path) -> None:
    """Copy the tokenizer files that exist in `src` into `dst`."""
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)


def save_model(model, dst: Path) -> None:
    """`save_pretrained` as safetensors, with the stock attention name in config.json."""
    attn = model.config._attn_implementation
    model.config._attn_implementation = "sdpa"
    try:
        model.save_pretrained(dst, safe_serialization=True)
    finally:
        model.config._attn_implementation = attn


def atomic_dir(dst: Path, write) -> Path:
    """Call `write(tmp)` on a hidden temp dir beside `dst`, then move it to `dst` (replacing it)."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    old = dst.parent / f".{dst.name}.old-{os.getpid()}"
    if dst.exists():
        os.rename(dst, old)
    os.rename(tmp, dst)
    shutil.rmtree(old, ignore_errors=True)
    return dst


def save_checkpoint(dst: Path, model, *, tokenizer_src: Path | None, train_state: dict | None = None,
                    save_weights=save_model) -> Path:
    """Write weights, tokenizer files and (optionally) the resume state atomically to `dst`."""
    def write(tmp: Path) -> None:
        save_weights(model, tmp)
        if tokenizer_src is not None:
            copy_tokenizer(Path(tokenizer_src), tmp)
        if train_state is not None:
            torch.save(train_state, tmp / TRAIN_STATE)
    return atomic_dir(dst, write)


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step_{step:06d}"


def latest_checkpoint(root: Path) -> Path | None:
    """The highest complete `step_*` directory under root, or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    steps = sorted(p for p in root.iterdir() if p.name.startswith("step_") and (p / TRAIN_STATE).is_file())
    return steps[-1] if steps else None


def prune(root: Path, keep: int) -> None:
    """Delete all but the newest `keep` step checkpoints (keep <= 0: keep all)."""
    if keep <= 0:
        return
    steps = sorted(p for p in Path(root).iterdir() if p.name.startswith("step_"))
    for p in steps[:-keep]:
        shutil.rmtree(p, ignore_errors=True)


def load_train_state(path: Path) -> dict:
    return torch.load(Path(path) / TRAIN_STATE, weights_only=False)
