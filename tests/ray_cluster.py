"""A local Ray cluster for tests: N nodes on 127.0.0.1 in their own temp dir and session.

It behaves alike on a fresh machine and on one where an earlier Ray run left `~/.ray/auth_token`:
the nodes see a HOME that holds a stale token, and RAY_AUTH_MODE=disabled is explicit, so the
token cannot switch the cluster to token auth. Multi-node clusters on one machine come from Ray's
own `ray.cluster_utils.Cluster` (a second `ray start --address` refuses to join while the node
address is pinned to 127.0.0.1), run as a script in its own process group and stopped by its id.

    python tests/ray_cluster.py --nodes 2 --cpus 1 --temp-dir DIR --ready FILE
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from process_support import stop


def ray_env(home: Path) -> dict[str, str]:
    """The environment of the cluster's processes: a used machine's HOME (with a stale token),
    explicit auth, loopback addresses."""
    stale = home / ".ray" / "auth_token"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("stale-token-of-an-earlier-run")
    return {**os.environ, "HOME": str(home), "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


@contextmanager
def ray_cluster(tmp: Path, nodes: int, cpus: int, env: dict[str, str],
                gpus: int = 0) -> Iterator[str]:
    """Start the cluster, yield its address (127.0.0.1:port), stop it and its process group.
    Everything Ray writes, its current-cluster file included, stays under `tmp`, but for its
    session directory: that goes to a short directory of its own under the system temp dir, since
    Ray's socket paths must fit AF_UNIX's 107 bytes and a pytest-xdist worker's `tmp` is long."""
    ready = tmp / "address"
    (tmp / "ray").mkdir(exist_ok=True)                  # Ray writes ray_current_cluster here
    session = Path(tempfile.mkdtemp(prefix="ray-"))
    proc = subprocess.Popen(
        [sys.executable, __file__, f"--nodes={nodes}", f"--cpus={cpus}", f"--gpus={gpus}",
         f"--temp-dir={session}", f"--ready={ready}"],
        env={**env, "RAY_TMPDIR": str(tmp)}, stdout=subprocess.DEVNULL,
        stderr=open(tmp / "cluster.log", "w"),
        start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not ready.exists():
            assert proc.poll() is None, (tmp / "cluster.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the Ray cluster did not start in 240 s"
            time.sleep(0.5)
        yield ready.read_text()
    finally:
        stop(proc)
        shutil.rmtree(session, ignore_errors=True)


def _serve(nodes: int, cpus: int, temp_dir: str, ready: Path, gpus: int = 0) -> None:
    from ray.cluster_utils import Cluster
    cluster = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=cpus, num_gpus=gpus, include_dashboard=False, temp_dir=temp_dir,
        node_ip_address="127.0.0.1"))
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=cpus, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    ready.with_suffix(".part").write_text(cluster.address)
    ready.with_suffix(".part").rename(ready)            # the test never reads half an address
    while not stopping:
        time.sleep(0.2)
    cluster.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--cpus", type=int, default=1)
    parser.add_argument("--gpus", type=int, default=0,
                        help="GPUs the head node declares (Ray counts them; none need exist)")
    parser.add_argument("--temp-dir", required=True)
    parser.add_argument("--ready", type=Path, required=True)
    args = parser.parse_args()
    _serve(args.nodes, args.cpus, args.temp_dir, args.ready, args.gpus)
