"""DAPO update throughput: swe-rlvr's packed trainer vs TRL's GRPOTrainer (loss_type="dapo").

CPU mode (default): a random 4-layer, 256-wide Qwen2 (--layers, --width) and 16 trajectories of
256-2,048 tokens (a quarter prompt, the rest action tokens). Every side gets the same weights,
trajectories, advantages and old log-probs, AdamW, grad-clip 1.0, no gradient checkpointing, no
KL, eps (0.2, 0.28), the DAPO token mean over the whole batch. Timed: one optimiser step (forward,
backward, clip, AdamW). Not timed: old log-probs (given to all), and the one-off compile.
- swe-rlvr: first-fit-decreasing packing into rows of --pack-tokens, per-segment causal attention
  (`trainer.attention`, --attention: auto is blockwise on the CPU),
  LM head only on action positions, fused AdamW; measured twice, eager and with
  `trainer.compile: true` (compiled decoder layers), as two sides of the same run.
- TRL: `GRPOTrainer._compute_loss` of a real (tiny) trainer, driven on padded micro-batches of
  --trl-micro-batch sequences with gradient accumulation (as its training_step would), then the same
  clip + AdamW step (`bench.trl_steps`).
- LoRA (--lora-r, 0 leaves them out): ours with `trainer.lora` (rank r on every projection, the
  frozen base in bf16 where autocast runs), compiled and eager, against TRL's GRPOTrainer with the
  same `peft_config` (its base stays fp32), each AdamW over the adapters alone.
Precision (--autocast, trainer.autocast's rule): under bf16 autocast every side's forward and
backward run in it (TRL's as its `bf16=True` runs them); the line above the table names the CPU's
flags that decide it.
With --group-size G the trajectories come as groups of G samples of one instance that share a
prompt (a quarter of the group's mean length), the shape of DAPO's batches: ours stores each
prompt once per row (`trainer.share_prefix`), TRL computes it G times, as its trainer does.
Rounds are interleaved (the order rotates each round) in one process under glibc allocator settings fixed before
start-up (`MALLOC_MMAP_MAX_=0`, `MALLOC_TRIM_THRESHOLD_`); the script re-executes itself to set
them. Reported: real (non-padding) tokens/s per side (median and min-max), the per-round
ratio (median and min-max), and each side's peak memory: the peak RSS of a fresh process of the
same run that builds that side alone and takes two steps, above its RSS before the side (the
libraries already imported), since one process's peak would hold every side's.

GPU mode (--gpu): a random Qwen2-1.5B-shaped model, one packed row of --gpu-tokens (16k) tokens,
bf16 autocast over fp32 weights, reporting tokens/s and MFU = useful FLOPs / (time x peak) for each
of --variants (eager or compile, + varlen or loop attention, + ckpt for gradient checkpointing).
Useful FLOPs (`swe_rlvr.compute.training_flops`): 6 x non-embedding params x tokens + 6 x d x
vocab x action tokens (the LM head runs only there) + causal attention 12 x layers x d x keys,
keys = sum(L_i (L_i + 1) / 2). Peak: --peak-tflops, else by GPU name.

    .venv/bin/python bench/trainer.py                # CPU, vs TRL, independent trajectories
    .venv/bin/python bench/trainer.py --lora-r 0     # CPU, full fine-tuning sides only
    .venv/bin/python bench/trainer.py --group-size 8 # CPU, vs TRL, groups of 8 sharing a prompt
    python bench/trainer.py --gpu                    # GPU MFU (ours only)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ALLOCATOR_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 36)}
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0}


def ensure_allocator_env() -> None:
    """Re-exec with the allocator settings when they are not in effect yet (glibc reads them at start)."""
    if all(os.environ.get(k) == v for k, v in ALLOCATOR_ENV.items()):
        return
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **ALLOCATOR_ENV})


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gpu", action="store_true", help="GPU MFU mode (1.5B Qwen2 shape)")
    p.add_argument("--rounds", type=int, default=5, help="timed steps per side (after one warm-up)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (both sides)")
    p.add_argument("--seqs", type=int, default=16)
    p.add_argument("--min-len", type=int, default=256)
    p.add_argument("--max-len", type=int, default=2048)
    p.add_argument("--pack-tokens", type=int, default=8192)
    p.add_argument("--group-size", type=int, default=1,
                   help="episodes per instance sharing one prompt (1: independent trajectories; "
                        "DAPO's batches are groups, and ours then stores each prompt once per row)")
    p.add_argument("--trl-micro-batch", type=int, default=8,
                   help="TRL per_device_train_batch_size (8 is GRPOConfig's default)")
    p.add_argument("--gpu-tokens", type=int, default=16384)
    p.add_argument("--variants", default="compile-varlen,eager-varlen,compile-loop,compile-varlen-ckpt",
                   help="GPU mode: comma list of {eager,compile}-{varlen,loop}[-ckpt]")
    p.add_argument("--peak-tflops", type=float, default=0.0, help="GPU peak bf16 TFLOP/s")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--width", type=int, default=256, help="CPU mode: the model's hidden size")
    p.add_argument("--layers", type=int, default=4, help="CPU mode: the model's decoder layers")
    p.add_argument("--lora-r", type=int, default=16,
                   help="CPU mode: rank of the LoRA sides (ours and TRL+peft); 0 leaves them out")
    p.add_argument("--autocast", default="auto", choices=("auto", "bf16", "fp32"),
                   help="CPU mode: bf16 autocast of every side (trainer.autocast's rule)")
    p.add_argument("--attention", default="auto", choices=("auto", "blockwise", "sdpa"),
                   help="our sides' trainer.attention (auto: blockwise on the CPU)")
    p.add_argument("--no-memory", action="store_true", help="CPU mode: skip the peak-memory processes")
    p.add_argument("--peak-of", default=None, help=argparse.SUPPRESS)   # a memory process's side
    return p.parse_args(argv)


# --------------------------------------------------------------------------- shared inputs


def make_episodes(n: int, lo: int, hi: int, vocab: int, seed: int, group: int = 1):
    """n episodes with lengths spread over [lo, hi]; the first quarter is prompt; +-1 advantages.

    With group > 1, consecutive runs of `group` episodes are one instance's samples, as DAPO's
    batches are: they share one prompt, a quarter of the group's mean length, and then differ.
    """
    import torch

    from trainer.episodes import Episode
    g = torch.Generator().manual_seed(seed)
    lengths = torch.linspace(lo, hi, n).round().long()[torch.randperm(n, generator=g)].tolist()
    eps = []
    for start in range(0, n, group):
        sizes = lengths[start:start + group]
        n_prompt = (sum(sizes) // len(sizes)) // 4 if group > 1 else sizes[0] // 4
        prompt = torch.randint(3, vocab, (n_prompt,), generator=g).tolist()
        for i, length in enumerate(sizes, start):
            ids = prompt + torch.randint(3, vocab, (length - n_prompt,), generator=g).tolist()
            eps.append(Episode(tuple(ids), (0,) * n_prompt + (1,) * (length - n_prompt),
                               (0.0,) * length, advantage=1.0 if i % 2 else -1.0,
                               instance_id=f"instance-{start // group}" if group > 1 else ""))
    return eps


def build_cpu_model(out: Path, seed: int, width: int = 256, layers: int = 4) -> Path:
    """Tiny tokenizer from agent.models.build_tiny + a random Qwen2 over it (64-wide heads)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from agent.models import build_tiny
    build_tiny(out, seed=seed)
    tok = AutoTokenizer.from_pretrained(out)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=width, num_hidden_layers=layers,
                      num_attention_heads=width // 64, num_key_value_heads=max(1, width // 128),
                      intermediate_size=4 * width,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.eos_token_id, bos_token_id=None)
    torch.manual_seed(seed)
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    return out


# --------------------------------------------------------------------------- swe-rlvr side


class OursStep:
    """One DAPO optimiser step of trainer.engine_torch + trainer.losses on packed rows."""

    def __init__(self, model_dir: Path, episodes, pack_tokens: int, device: str = "cpu",
                 grad_ckpt: bool = False, compile: bool = False, lora: int = 0,
                 autocast: str = "auto", attention: str = "auto"):
        import torch

        from swe_rlvr.config import TrainerConfig
        from swe_rlvr.config_training import LoraConfig
        from trainer.engine_torch import TorchEngine
        from trainer.packing import pack
        cfg = TrainerConfig(device=device, grad_checkpointing=grad_ckpt, pack_tokens=pack_tokens,
                            compile=compile, torch_threads=torch.get_num_threads(),
                            lora=LoraConfig(r=lora), autocast=autocast, attention=attention)
        self.engine = TorchEngine(model_dir, cfg, lr=1e-6, total_steps=1000)
        self.rows = pack(episodes, pack_tokens)
        self.num_actions = sum(r.num_actions for r in self.rows)
        self.tokens = sum(r.num_tokens for r in self.rows)
        with torch.no_grad():
            self.old = [self.engine.logprobs(r)[0].detach() for r in self.rows]

    def __call__(self) -> None:
        from trainer.losses import dapo_loss
        for row, old in zip(self.rows, self.old):
            logp, _ = self.engine.logprobs(row)
            dev = logp.device
            loss, _ = dapo_loss(logp, old, row.advantages.to(dev), row.loss_mask.to(dev),
                                num_tokens=self.num_actions, clip_low=0.2, clip_high=0.28)
            self.engine.backward(loss)
        self.engine.step()


# --------------------------------------------------------------------------- runs


def spread(xs: list[float], fmt: str = "9.1f") -> str:
    return f"median {statistics.median(xs):{fmt}}  min {min(xs):{fmt}}  max {max(xs):{fmt}}"


SIDES = ("swe-rlvr compiled", "swe-rlvr eager", "TRL", "swe-rlvr LoRA compiled",
         "swe-rlvr LoRA eager", "TRL+peft")          # the last three with --lora-r > 0
RATIOS = (("swe-rlvr compiled", "TRL"), ("swe-rlvr eager", "TRL"),    # (side, against)
          ("swe-rlvr LoRA compiled", "TRL+peft"), ("swe-rlvr LoRA eager", "TRL+peft"),
          ("swe-rlvr LoRA eager", "swe-rlvr eager"), ("TRL+peft", "TRL"))


def cpu_inputs(tmp: Path, args: argparse.Namespace):
    """(the random CPU model's directory, the trajectories) of this run's arguments."""
    from transformers import AutoConfig
    model_dir = build_cpu_model(tmp / "model", args.seed, args.width, args.layers)
    vocab = AutoConfig.from_pretrained(model_dir).vocab_size
    return model_dir, make_episodes(args.seqs, args.min_len, args.max_len, vocab, args.seed,
                                    args.group_size)


def make_side(name: str, model_dir: Path, eps, args: argparse.Namespace, tmp: Path):
    """The step of side `name` (one of SIDES)."""
    lora = args.lora_r if "LoRA" in name or "peft" in name else 0
    if name.startswith("swe-rlvr"):
        return OursStep(model_dir, eps, args.pack_tokens, compile="compiled" in name, lora=lora,
                        autocast=args.autocast, attention=args.attention)
    from bench.trl_steps import trl_step
    return trl_step(model_dir, eps, args.trl_micro_batch, tmp / name.replace("+", "-"), lora,
                    args.autocast)


def cpu_line(args: argparse.Namespace) -> str:
    """The CPU's name, its flags that decide bf16's speed (as lscpu lists them) and the precision."""
    import torch

    from swe_rlvr import precision
    bf16 = precision.autocast_enabled(args.autocast, torch.device("cpu"))
    return (f"CPU: {precision.cpu_description()}; autocast {args.autocast}: "
            f"{'bf16' if bf16 else 'fp32'} on every side; our attention {args.attention}")


def run_peak(args: argparse.Namespace) -> None:
    """A memory process: build side `--peak-of` alone, take two steps, print its peak RSS above
    the RSS before it (`PEAK <bytes>`)."""
    import torch

    from swe_rlvr import memory
    for name in ("datasets", "peft", "trl", "bench.trl_steps", "trainer.engine_torch"):
        __import__(name)            # every memory process holds the same libraries before its side
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, eps = cpu_inputs(Path(tmp), args)
        memory.release()         # the heap the model was built in goes back: the side faults its own
        before = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        step = make_side(args.peak_of, model_dir, eps, args, Path(tmp))
        step()
        step()
        status = Path("/proc/self/status").read_text().split("VmHWM:")[1]   # this exec's peak:
        peak = int(status.split()[0]) * 1024    # ru_maxrss would hold the forking parent's
    print(f"PEAK {peak - before}")


def peak_memory(args: argparse.Namespace, names: list[str]) -> dict[str, int]:
    """Per side, the peak bytes of its memory process (`run_peak`)."""
    peaks = {}
    for name in names:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args.argv,
                               "--peak-of", name], capture_output=True, text=True, check=True)
        peaks[name] = int(done.stdout.rsplit("PEAK ", 1)[1].split()[0])
    return peaks


def run_cpu(args: argparse.Namespace) -> None:
    import torch
    torch.set_num_threads(args.threads)
    names = [n for n in SIDES if args.lora_r > 0 or ("LoRA" not in n and "peft" not in n)]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, eps = cpu_inputs(Path(tmp), args)
        sides = {name: make_side(name, model_dir, eps, args, Path(tmp)) for name in names}
        real = sum(len(e.token_ids) for e in eps)
        padded = sum(b["prompt_ids"].numel() + b["completion_ids"].numel()
                     for b in sides["TRL"].batches)
        rows = len(sides["swe-rlvr eager"].rows)
        stored = sides["swe-rlvr eager"].tokens
        for step in sides.values():                             # warm-up and compile, not timed
            step()
        times: dict[str, list[float]] = {name: [] for name in sides}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                t0 = time.perf_counter()
                sides[name]()
                times[name].append(time.perf_counter() - t0)
    peaks = {} if args.no_memory else peak_memory(args, names)
    print(cpu_line(args))
    print(f"trajectories: {args.seqs} x {args.min_len}-{args.max_len} tokens, {real} real tokens "
          f"({sum(e.num_actions for e in eps)} action); TRL pads to {padded} "
          f"(micro-batch {args.trl_micro_batch}); ours packs into {rows} row(s) "
          f"of <= {args.pack_tokens} storing {stored} tokens (group size {args.group_size}); "
          f"LoRA rank {args.lora_r}; threads {args.threads}; rounds {args.rounds}")
    for name, ts in times.items():
        memory = f"  peak {peaks[name] / 2 ** 20:7.0f} MiB" if name in peaks else ""
        print(f"{name:<22} real tok/s: {spread([real / t for t in ts])}{memory}")
    for name, peer in RATIOS:
        if name in times and peer in times:
            ratios = [b / a for a, b in zip(times[name], times[peer])]
            print(f"speed-up of {name} over {peer} (its time / {name}'s, per round): "
                  f"{spread(ratios, '.2f')}x")


def gpu_model(out: Path, seed: int) -> Path:
    """A random Qwen2-1.5B-shaped model (no tokenizer needed: the trainer works on ids)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg = Qwen2Config(vocab_size=151936, hidden_size=1536, num_hidden_layers=28,
                      num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
                      tie_word_embeddings=True, max_position_embeddings=32768)
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(out)
    return out


def useful_flops(model, rows) -> float:
    """6 N_nonembed T + 6 d V A (head on actions only) + 12 layers d keys (causal attention), as
    `swe_rlvr.compute.training_flops` counts a training pass."""
    from swe_rlvr.compute import Shape, training_flops
    shape = Shape.of(model)
    return sum(training_flops(shape, r.num_tokens, r.num_actions, r.attended_keys) for r in rows)


def peak_flops(args: argparse.Namespace) -> float:
    import torch
    if args.peak_tflops:
        return args.peak_tflops * 1e12
    name = torch.cuda.get_device_name()
    for key, tflops in PEAK_BF16_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    raise SystemExit(f"Unknown GPU {name!r}; pass --peak-tflops (bf16 dense peak).")


def parse_variant(name: str) -> dict:
    """'compile-varlen-ckpt' -> {compile: True, varlen: True, ckpt: True}."""
    parts = set(name.split("-"))
    unknown = parts - {"eager", "compile", "varlen", "loop", "ckpt"}
    if unknown or len(parts & {"eager", "compile"}) != 1 or len(parts & {"varlen", "loop"}) != 1:
        raise SystemExit(f"Bad variant {name!r}; write {{eager,compile}}-{{varlen,loop}}[-ckpt].")
    return {"compile": "compile" in parts, "varlen": "varlen" in parts, "ckpt": "ckpt" in parts}


def gpu_variant(model_dir: Path, eps, variant: str, args: argparse.Namespace):
    """(seconds per timed step, useful FLOPs per step, tokens per step, peak GiB) of one variant,
    timed after a warm-up step that also compiles."""
    import torch

    import trainer.forward as forward
    opts = parse_variant(variant)
    forward.USE_VARLEN = opts["varlen"]
    ours = OursStep(model_dir, eps, pack_tokens=sum(len(e.token_ids) for e in eps),
                    device="cuda", grad_ckpt=opts["ckpt"], compile=opts["compile"])
    ours()
    torch.cuda.synchronize()
    times = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        ours()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return (times, useful_flops(ours.engine.model, ours.rows), ours.tokens,
            torch.cuda.max_memory_allocated() / 2 ** 30)


def run_gpu(args: argparse.Namespace) -> None:
    import gc

    import torch
    if not torch.cuda.is_available():
        raise SystemExit("--gpu needs a CUDA GPU; run the CPU comparison without --gpu.")
    peak = peak_flops(args)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = gpu_model(Path(tmp) / "model", args.seed)
        n = args.seqs
        avg = args.gpu_tokens // n
        eps = make_episodes(n, max(64, avg // 4), 2 * avg - max(64, avg // 4), 151936, args.seed,
                            args.group_size)
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: {args.gpu_tokens} "
              f"tokens in one packed row of {n} segments; peak {peak / 1e12:.0f} TFLOP/s", flush=True)
        for variant in args.variants.split(","):
            torch.cuda.reset_peak_memory_stats()
            try:
                times, flops, tokens, peak_gib = gpu_variant(model_dir, eps, variant, args)
            except torch.OutOfMemoryError:
                print(f"{variant:<22} out of memory", flush=True)
                continue
            finally:
                gc.collect()
                torch.cuda.empty_cache()
            mfu = [100 * flops / t / peak for t in times]
            print(f"{variant:<22} tok/s {statistics.median([tokens / t for t in times]):9.0f}"
                  f"  MFU % {spread(mfu, '5.1f')}  peak mem {peak_gib:5.1f} GiB", flush=True)


def main(argv=None) -> None:
    ensure_allocator_env()
    args = parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.peak_of:
        run_peak(args)
    else:
        run_gpu(args) if args.gpu else run_cpu(args)


if __name__ == "__main__":
    main()
