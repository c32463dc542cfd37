"""Labels on every sandbox container, and the sweeper that removes leaked ones.

A container is leaked when its owner died without `close()` (SIGKILL, OOM, a lost node) or it
outlived its TTL. Two dead-man switches cover that:
- the container's main process is `sleep <ttl>` with `auto_remove`, so the engine removes it by
  itself once the TTL passes, whoever owns it;
- `sweep_containers` (behind `swe-rlvr sandbox sweep`) removes labelled containers whose owner
  process is gone (same host: the pid is dead or was reused, checked by its start time) or whose
  TTL passed, and with `dead_owner_only=False` every labelled container older than `older_than_s`.

Simplification: an owner on another host cannot be checked, so only its TTL applies there.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING

from sandbox.workspace import process_start

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

LABEL = "swe-rlvr.sandbox"
OWNER_PID = "swe-rlvr.owner-pid"
OWNER_START = "swe-rlvr.owner-start"
OWNER_HOST = "swe-rlvr.owner-host"
CREATED_AT = "swe-rlvr.created-at"
TTL = "swe-rlvr.ttl-s"
INSTANCE = "swe-rlvr.instance"


def sandbox_labels(instance_id: str, ttl_s: int) -> dict[str, str]:
    """The labels of a new sandbox container owned by this process."""
    pid = os.getpid()
    return {LABEL: "1", OWNER_PID: str(pid), OWNER_START: process_start(pid),
            OWNER_HOST: socket.gethostname(), CREATED_AT: f"{time.time():.3f}",
            TTL: str(int(ttl_s)), INSTANCE: instance_id}


def owner_dead(labels: dict[str, str]) -> bool:
    """True when the owner ran on this host and its process is gone (or the pid was reused)."""
    if labels.get(OWNER_HOST) != socket.gethostname():
        return False
    try:
        pid = int(labels.get(OWNER_PID, ""))
    except ValueError:
        return True
    return process_start(pid) != labels.get(OWNER_START, "")


def is_leaked(labels: dict[str, str], now: float, older_than_s: float, dead_owner_only: bool) -> bool:
    """The sweeper's rule for one container, from its labels alone."""
    try:
        age = now - float(labels.get(CREATED_AT, "0"))
        ttl = float(labels.get(TTL, "0"))
    except ValueError:
        return True
    if age < older_than_s:
        return False
    if ttl and age > ttl:
        return True
    return owner_dead(labels) if dead_owner_only else True


def sweep_containers(client: DockerClient, older_than_s: float = 0, dead_owner_only: bool = True) -> int:
    """Remove leaked sandbox containers (see the module docstring); returns how many were removed.

    `older_than_s` spares younger containers; `dead_owner_only=False` removes every labelled
    container of at least that age, live owners included (use it when no run is in progress).
    """
    now, removed = time.time(), 0
    for container in client.containers.list(all=True, sparse=True, filters={"label": f"{LABEL}=1"}):
        labels = container.attrs.get("Labels") or {}
        if is_leaked(labels, now, older_than_s, dead_owner_only):
            removed += remove_container(container)
    return removed


def remove_container(container: Container) -> int:
    """Force-remove one container; 1 if this call removed it, 0 if it was already going."""
    from docker.errors import APIError, NotFound
    try:
        container.remove(force=True)
        return 1
    except NotFound:
        return 0
    except APIError as exc:
        if exc.status_code == 409:  # auto_remove is already removing it
            return 0
        raise
