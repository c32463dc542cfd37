"""The `hf` engine in a process of its own (`engine.process`): the episodes' threads keep this
process, the decode loop gets the child's GIL to itself.

In one process, each of a decode step's ~6,000 torch op calls returns to Python and must take the
GIL back from the episode threads (parsing replies, building prompts, waiting on the sandbox's
pipes). `bench.decode_step --beside` measured what that costs on two cores: a SmolLM2 step on
one torch thread took 1.71x as long beside four threads of its own process, each busy 10% of the
time, and 1.05x beside four such processes (docs/benchmarks.md).

    engine = ProcessEngine(cfg)     # cfg.name "hf", cfg.process true; spawns the child, which loads
    engine.generate([ids], params)  # the model; callable from many threads, as HFEngine.generate

The child runs a plain `HFEngine` (`engine.torch_threads` sets its torch threads), so sampling,
seeds, stops and the prefix cache are that engine's. Calls travel over one socket as pickled token
ids; each generate call gets a thread in the child that waits for its samples. With every reply
comes the child's span totals, and the difference from the last ones is added to this process's
(`swe_rlvr.spans`), so stage manifests and `bench.iteration` count the child's prefill, decode and
batch spans as before; the child's resident set counts in this process's memory windows
(`spans.watch`).

When the engine is dropped (or closed), its child frees the model and stays as the spare, which
the next engine loads its model into: a stage's new engine then skips the child's start (a Python,
torch and transformers: about 5 s on two cores). A second child with nothing to do stops; the
spare stops with this process.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import pickle
import socket
import subprocess
import sys
import threading
import weakref
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from agent.engines.base import UNFILTERED, Sample, SamplingParams
from swe_rlvr import spans

log = logging.getLogger(__name__)

START_TIMEOUT_S = 600.0
"""Longest wait for the child to load its model (a first load of a large checkpoint included)."""


class EngineProcessError(RuntimeError):
    """The engine's process failed: its load, or it exited while calls were in flight."""


class ProcessEngine:
    """`HFEngine` in a child process of its own; `cfg` is an EngineConfig (name "hf")."""

    continuous = True
    """The `Batcher` sends each episode's call at once: the child's engine batches continuously."""

    def __init__(self, cfg: Any) -> None:
        from transformers import AutoTokenizer

        from agent.engines.hf import require_model

        if cfg.name != "hf":
            raise ValueError(f"engine.process runs the hf engine in a process of its own, but "
                             f"engine.name is {cfg.name!r}; set engine.process=false.")
        require_model(cfg)
        self.cfg = cfg
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        self.policy_version = 0
        self._temperature = cfg.temperature
        self._link = _spare.take() or _Link.spawn()
        ready = self._link.call("start", dataclasses.replace(cfg, process=False))
        try:
            ready.result(timeout=START_TIMEOUT_S)
        except BaseException:
            _shutdown(self._link)
            raise
        spans.watch(self._link.process.pid)
        self._finalizer = weakref.finalize(self, _release, self._link)

    # ------------------------------------------------------------------ Engine protocol

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        """Sample one reply per prompt in the child; callable from many threads at once."""
        self._temperature = params.temperature
        return self._link.call("generate", ([list(p) for p in prompts], params)).result()

    def load_weights(self, checkpoint_dir: str) -> None:
        """The child reloads the policy from `checkpoint_dir`; bumps `policy_version`."""
        self._link.call("load_weights", str(checkpoint_dir)).result()
        self.policy_version += 1
        log.info("hf engine (own process): policy version %d from %s", self.policy_version,
                 checkpoint_dir)

    def end_episode(self, ids: list[int]) -> None:
        self._link.send("end_episode", None, list(ids))

    def effective_sampling(self) -> dict:
        """What the child's loop applies: temperature only (`agent.engines.hf`)."""
        return {"temperature": self._temperature, **UNFILTERED}

    def close(self) -> None:
        """Free the child's model now (dropping the engine does it too); the child itself stays,
        empty, as the next engine's (`_Spare`)."""
        self._finalizer()

    @property
    def pid(self) -> int | None:
        return self._link.process.pid


@dataclasses.dataclass(eq=False)
class _Link:
    """The parent's end of the socket: calls in flight by id, and one thread that reads replies.

    It holds no reference to the engine, so dropping the engine runs its finalizer."""

    conn: Any
    process: Any
    pending: dict[int, Future] = dataclasses.field(default_factory=dict)
    seen: dict[str, spans.Total] = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    ids: Any = dataclasses.field(default_factory=itertools.count)
    closed: bool = False

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, name="hf-engine-replies", daemon=True).start()

    @classmethod
    def spawn(cls) -> _Link:
        """Start `python -m agent.engines.process FD`: a new interpreter (no fork of a process
        that holds threads), which unlike multiprocessing's spawn does not import the caller's
        main module again (a script without a `__main__` guard would start its run twice)."""
        ours, theirs = socket.socketpair()
        root = str(Path(__file__).resolve().parents[2])   # where `agent` and `swe_rlvr` live
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        process = subprocess.Popen([sys.executable, "-m", "agent.engines.process",
                                    str(theirs.fileno())], pass_fds=[theirs.fileno()], env=env)
        theirs.close()
        return cls(Connection(ours.detach()), process)

    def call(self, kind: str, payload: Any) -> Future:
        future: Future = Future()
        with self.lock:
            if self.closed:
                raise EngineProcessError(self._gone())
            rid = next(self.ids)
            self.pending[rid] = future
            self.conn.send((kind, rid, payload))
        return future

    def send(self, kind: str, rid: int | None, payload: Any) -> None:
        with self.lock:
            if not self.closed:
                self.conn.send((kind, rid, payload))

    def _read(self) -> None:
        while True:
            try:
                rid, ok, value, totals = self.conn.recv()
            except (EOFError, OSError):
                break
            self._merge(totals)
            with self.lock:
                future = self.pending.pop(rid, None)
            if future is not None:
                future.set_result(value) if ok else future.set_exception(value)
        with self.lock:
            self.closed = True
            failed, self.pending = list(self.pending.values()), {}
        for future in failed:
            future.set_exception(EngineProcessError(self._gone()))

    def _merge(self, totals: dict[str, spans.Total]) -> None:
        """Add what the child's spans did since its last reply to this process's totals."""
        for name, total in totals.items():
            spans.add(name, total.minus(self.seen.get(name, spans.Total())))
        self.seen = totals

    def _gone(self) -> str:
        try:
            self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        return (f"the hf engine's process (pid {self.process.pid}) exited with code "
                f"{self.process.returncode}; its log lines above say why (engine.process=false runs "
                f"the engine in this process)")


class _Spare:
    """At most one child kept, empty, after its engine was dropped: the next engine loads its
    model there instead of starting a process (python, torch and transformers: about 5 s a
    stage on two cores, outside every span of `bench.iteration`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._link: _Link | None = None

    def take(self) -> _Link | None:
        with self._lock:
            link, self._link = self._link, None
        if link is not None and (link.closed or link.process.poll() is not None):
            _shutdown(link)
            return None
        return link

    def keep(self, link: _Link) -> bool:
        with self._lock:
            if self._link is None and not link.closed:
                self._link = link
                return True
        return False


_spare = _Spare()


def stop_spare() -> None:
    """Stop the spare child now, if there is one (it stops with this process anyway)."""
    link = _spare.take()
    if link is not None:
        _shutdown(link)


def _release(link: _Link) -> None:
    """An engine was dropped: its child frees the model and waits as the spare, or stops."""
    try:
        link.call("stop", None).result(timeout=30.0)
    except Exception:
        _shutdown(link)
        return
    if not _spare.keep(link):
        _shutdown(link)


def _shutdown(link: _Link) -> None:
    link.send("close", None, None)
    try:
        link.process.wait(timeout=10.0)
    except subprocess.TimeoutExpired:
        link.process.kill()
        link.process.wait()
    spans.unwatch(link.process.pid)
    link.conn.close()


# ---------------------------------------------------------------------- the child


def serve(conn: Any) -> None:
    """The child's loop: build an engine on "start", answer calls, drop it on "stop"; until
    "close" or the parent's end."""
    import gc

    import torch

    from agent.engines.hf import HFEngine
    from swe_rlvr import memory

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sending = threading.Lock()

    def reply(rid: int | None, ok: bool, value: Any) -> None:
        if not ok:
            value = _portable(value)
        with sending:
            conn.send((rid, ok, value, spans.totals()))

    def answer(rid: int, fn: Any, *args: Any) -> None:
        try:
            value = fn(*args)
        except Exception as exc:
            reply(rid, False, exc)
        else:
            reply(rid, True, value)

    engine: Any = None
    threads = torch.get_num_threads()           # torch's default here, for engines that keep it
    while True:
        try:
            kind, rid, payload = conn.recv()
        except (EOFError, OSError):
            return
        if kind == "start":
            torch.set_num_threads(payload.torch_threads or threads)   # not the last engine's
            try:
                engine = HFEngine(payload)
            except Exception as exc:
                reply(rid, False, exc)
                return                          # a failed load leaves nothing worth keeping
            reply(rid, True, None)
        elif kind == "stop":
            engine = None
            gc.collect()
            memory.trim()                       # glibc's malloc keeps the freed weights otherwise
            reply(rid, True, None)
        elif kind == "generate":
            threading.Thread(target=answer, args=(rid, engine.generate, *payload),
                             daemon=True).start()
        elif kind == "load_weights":
            answer(rid, engine.load_weights, payload)
        elif kind == "end_episode":
            engine.end_episode(payload)
        elif kind == "close":
            return


def _portable(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling, else a RuntimeError with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    serve(Connection(int(sys.argv[1])))
