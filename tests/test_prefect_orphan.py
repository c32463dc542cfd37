"""A run on Prefect's ephemeral API takes its API server with it, even when SIGKILLed, and
`swe-rlvr sandbox sweep` stops the server of a run whose watchdog died too.

Regression: a run killed by the OOM killer left its `uvicorn ... prefect.server.api.server:
create_app` behind for 90+ minutes, holding ~220 MB and a port. Every process here is started by
this test in its own session and killed by its process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flows.ephemeral import OWNER_ENV, STOP_GRACE_S, _ephemeral_servers, _orphaned, orphaned_servers


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return {**env, "PREFECT_HOME": str(tmp_path / "prefect")}  # its own ephemeral database


def _start(argv: list[str], tmp_path: Path) -> subprocess.Popen:
    log = open(tmp_path / "run.log", "wb")  # noqa: SIM115 - kept open for the child's life
    return subprocess.Popen([sys.executable, *argv], env=_env(tmp_path), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _train(tmp_path: Path, model: Path) -> subprocess.Popen:
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump({
        "instances": {"source": "builtin", "limit": 1},
        "engine": {"name": "scripted", "model": str(model), "max_batch": 1},
        "sandbox": {"workdir": str(tmp_path / "work"), "env_cache": str(tmp_path / "envs")},
        "eval": {"runs": 1, "k": 1, "limit": 1},
        "orchestration": {"run_root": str(tmp_path / "runs"), "iterations": 0,
                          "rft_warmup": False, "max_workers": 1}}))
    return _start(["-m", "swe_rlvr.cli", "train", "--config", str(config)], tmp_path)


def _until(value, what: str, proc: subprocess.Popen, tmp_path: Path, timeout: float = 180):
    deadline = time.monotonic() + timeout
    while not (found := value()):
        assert proc.poll() is None, (f"{what}: the process exited ({proc.returncode}):\n"
                                     + (tmp_path / "run.log").read_text()[-3000:])
        assert time.monotonic() < deadline, f"{what}: not after {timeout}s"
        time.sleep(0.2)
    return found


def _server_of(pid: int) -> int | None:
    return next((server for server, _, _, ppid in _ephemeral_servers() if ppid == pid), None)


def _children(pid: int, module: str) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_child(int(p), pid, module)]


def _is_child(pid: int, parent: int, module: str) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return False
    return int(stat.rsplit(")", 1)[1].split()[1]) == parent and module in argv


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever of the run's session is left
    except ProcessLookupError:
        pass
    proc.wait()


@pytest.mark.e2e
def test_a_sigkilled_run_takes_its_ephemeral_server_with_it(tmp_path, tiny_model_dir):
    run = _train(tmp_path, tiny_model_dir)
    try:
        server = _until(lambda: _server_of(run.pid), "the run's ephemeral API server", run,
                        tmp_path)
        os.kill(run.pid, signal.SIGKILL)                      # the OOM killer's way: no clean-up
        run.wait()
        assert _gone_within(server, STOP_GRACE_S + 5), f"server {server} outlived its run"
    finally:
        _kill_group(run)


@pytest.mark.e2e
def test_sweep_stops_a_server_whose_run_and_watchdog_died(tmp_path):
    run = _start(["-c", "import time; from flows.ephemeral import watch_ephemeral_server; "
                        "watch_ephemeral_server(); time.sleep(600)"], tmp_path)
    try:
        server = _until(lambda: _server_of(run.pid), "the ephemeral API server", run, tmp_path)
        watchdog = _until(lambda: _children(run.pid, "flows.ephemeral"), "its watchdog", run,
                          tmp_path)
        for pid in (*watchdog, run.pid):
            os.kill(pid, signal.SIGKILL)
        run.wait()
        assert _alive(server) and server in orphaned_servers()
        swept = subprocess.run([sys.executable, "-m", "swe_rlvr.cli", "sandbox", "sweep",
                                "--workdir", str(tmp_path / "work")], env=_env(tmp_path),
                               capture_output=True, text=True, timeout=120)
        assert swept.returncode == 0, swept.stderr[-3000:]
        assert "orphaned Prefect API servers" in swept.stdout and str(server) in swept.stdout
        assert not _alive(server)
    finally:
        _kill_group(run)


def test_a_server_is_orphaned_once_its_owner_is_not_its_parent():
    """Labelled servers belong to the pid in their label; unlabelled ones (from before the
    watchdog) only when this interpreter started them and init adopted them."""
    ours = [sys.executable, "-m", "uvicorn"]
    assert not _orphaned(ours, {OWNER_ENV: "4242"}, ppid=4242)           # its run is alive
    assert _orphaned(ours, {OWNER_ENV: "4242"}, ppid=1)                  # its run died
    assert _orphaned(ours, {}, ppid=1)
    assert not _orphaned(ours, {}, ppid=4242)                            # someone's live server
    assert not _orphaned(["/other/python", "-m", "uvicorn"], {}, ppid=1)  # another installation
