"""Helpers for tests (and `infra/screenshots.py`) that start a server process (Prefect, Ray,
vLLM, MLflow) on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server we started in its own session (its whole process group goes, children
    included); SIGKILL it if it has not exited 30 s later."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def wait_http(url: str, proc: subprocess.Popen | None = None, log: Path | None = None,
              timeout: float = 180) -> None:
    """Return once `url` answers; fail with the log's tail if `proc` (when given) exits, or when
    time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None:
            assert proc.poll() is None, f"{proc.args[:4]} exited: {log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            assert time.monotonic() < deadline, f"{url} did not answer in {timeout:.0f} s"
            time.sleep(0.5)


def http_json(url: str, body: dict | None = None, timeout: float = 30) -> object:
    """GET `url` (POST `body` as JSON when given) and parse the JSON answer."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                 method="POST" if data is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def start_mlflow_server(tmp: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """`mlflow server` on 127.0.0.1 in its own session: a SQLite backend and artifacts served by
    the server, both under `tmp`, its log in `tmp/mlflow.log`; (process, URL) once it answers."""
    port = free_port()
    log = tmp / "mlflow.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
             "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}",
             "--artifacts-destination", str(tmp / "mlartifacts"), "--serve-artifacts",
             "--workers", "1"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/health", proc, log)
    except BaseException:
        stop(proc)
        raise
    return proc, url
