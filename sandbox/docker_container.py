"""The container a docker sandbox runs in: its image, and what it allows, hides and caps.

The image is `sandbox.docker_image` if set, else the instance's own (`swebench/sweb.eval.x86_64.
<id, "__" -> "_1776_">:latest` for SWE-bench), else, for the built-in suite, the base image that
`infra/docker/base-image.sh` builds. An image the engine lacks is pulled; the base image is never
pulled (it is built here).

What the container allows: root with only the capabilities in CAPS (all others dropped: no
mounts, raw sockets, device nodes, chroot or file capabilities), no-new-privileges, never
privileged (so Docker keeps /proc/sys, /sys and /proc's other kernel knobs read-only and masks
/proc/kcore and friends), `init` as PID 1 to reap orphans.
What it hides: the network (`network_mode="none"`, unless `sandbox.network`), every host socket
(nothing of the host is mounted: no engine or containerd socket; its own network namespace hides
the host's abstract sockets) and the host's files. Nothing it prints is logged on the host (log
driver `none`: writing to PID 1's stdout fills no json log).
What it caps: memory (the cgroup's limit over every process, swap included where the engine can
limit it, /tmp's and /dev/shm's pages too), pids, CPUs, each file's size (RLIMIT_FSIZE), and disk:
the writable layer may grow by `sandbox.disk_mb` (the engine's quota where its storage driver has
one, else `sandbox.docker_exec.DiskWatch`, which kills the container past it), /tmp and /dev/shm
are tmpfs of min(disk_mb, memory_mb) MiB.

Simplifications: the root filesystem stays writable (test suites write caches beside the code);
`cfg.cpu_time_s` is not applied (the wall-clock timeout and the CPU quota bound a command); the
engine's own bind mounts (/etc/hosts, /etc/hostname, /etc/resolv.conf) stay writable and lie
outside the layer the watch measures, each bounded by RLIMIT_FSIZE alone; the disk watch polls, so
a fast writer may pass disk_mb by what it writes in one poll before the container dies; with an
engine quota the copied-in repository counts against disk_mb; /tmp's tmpfs hides whatever the
image kept in /tmp; root in the container is root on the host's kernel (no user namespace: the
engine would need `userns-remap`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandbox.base import SandboxError
from sandbox.docker_sweep import sandbox_labels

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

    from swe_rlvr.config import SandboxConfig
    from swe_rlvr.instances import Instance

BASE_IMAGE = "swe-rlvr/sandbox-base:bookworm"
CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"]
"""The only capabilities commands keep: what root needs to install packages and run test suites
(own and chmod any file, signal its processes, switch users). Docker's defaults less NET_RAW,
NET_BIND_SERVICE, MKNOD, AUDIT_WRITE, SETFCAP, SETPCAP and SYS_CHROOT."""
MIB = 1 << 20
ENV = {"HOME": "/root", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
       "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PAGER": "cat",
       "GIT_PAGER": "cat", "TERM": "dumb"}


def docker_client() -> DockerClient:
    """A docker SDK client for the engine of $DOCKER_HOST or the default socket."""
    try:
        import docker
    except ModuleNotFoundError as exc:
        raise SandboxError("The docker backend needs the docker SDK; "
                           "pip install 'docker>=7.1'.") from exc
    try:
        return docker.from_env()
    except docker.errors.DockerException as exc:
        raise SandboxError(f"No Docker engine answers ({exc}); start one with infra/docker/engine.sh "
                           f"or choose sandbox.backend=local.") from exc


def resolve_image(instance: Instance, cfg: SandboxConfig) -> str:
    """The image to run `instance` in (see the module docstring)."""
    if cfg.docker_image:
        return cfg.docker_image
    if instance.image:
        return instance.image
    if instance.source == "swe-bench":
        key = instance.instance_id.replace("__", "_1776_").lower()
        return f"swebench/sweb.eval.x86_64.{key}:latest"
    if instance.source == "builtin":
        return BASE_IMAGE
    raise SandboxError(f"Instance {instance.instance_id!r} names no Docker image; set "
                       f"sandbox.docker_image=<image> or choose sandbox.backend=local.")


def ensure_image(client: DockerClient, image: str) -> None:
    """Pull `image` unless the engine has it; the base image is built, never pulled."""
    import docker
    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    if image == BASE_IMAGE:
        raise SandboxError(f"The base image {BASE_IMAGE} is missing; build it with "
                           f"infra/docker/base-image.sh.")
    try:
        client.images.pull(image)
    except docker.errors.APIError as exc:
        raise SandboxError(f"Docker image {image!r} is not in the engine and pulling it "
                           f"failed ({exc.explanation or exc}); `docker pull` or `docker load` "
                           f"it, or set sandbox.docker_image.") from exc


def start_container(client: DockerClient, cfg: SandboxConfig, image: str,
                    instance_id: str) -> tuple[Container, bool]:
    """The running container, and whether the engine caps its writable layer itself (a
    quota through `storage_opt`; engines whose storage driver refuses it are remembered)."""
    import docker
    options = container_options(cfg, image, instance_id, _swap_limit(client))
    url = client.api.base_url
    if _DISK_QUOTA.get(url, True):
        try:
            container = client.containers.run(**options, storage_opt={"size": f"{cfg.disk_mb}m"})
            _DISK_QUOTA[url] = True
            return container, True
        except docker.errors.APIError as exc:
            if "storage" not in str(exc).lower():
                raise
            _DISK_QUOTA[url] = False  # e.g. overlay2 on ext4: "only for overlay over xfs"
    return client.containers.run(**options), False


def container_options(cfg: SandboxConfig, image: str, instance_id: str, swap_limit: bool) -> dict[str, Any]:
    """`containers.run` arguments for a sandbox: its isolation and caps (see the module docstring)."""
    from docker.types import LogConfig, Ulimit
    fsize = cfg.file_size_mb * MIB
    ram_disk = max(1, min(cfg.disk_mb, cfg.memory_mb))  # MiB; tmpfs pages count as memory too
    options: dict[str, Any] = dict(
        image=image, command=["sleep", str(int(cfg.ttl_s))], detach=True, auto_remove=True,
        init=True, labels=sandbox_labels(instance_id, cfg.ttl_s), hostname="sandbox",
        environment=ENV, working_dir="/", cap_drop=["ALL"], cap_add=CAPS,
        security_opt=["no-new-privileges"], ulimits=[Ulimit(name="fsize", soft=fsize, hard=fsize)],
        tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={ram_disk}m,mode=1777"},
        shm_size=f"{ram_disk}m", log_config=LogConfig(type=LogConfig.types.NONE),
        mem_limit=f"{cfg.memory_mb}m", pids_limit=cfg.max_procs,
        nano_cpus=int(cfg.docker_cpus * 1e9))
    if swap_limit:
        options["memswap_limit"] = f"{cfg.memory_mb}m"
    if not cfg.network:
        options["network_mode"] = "none"
    return options


_SWAP_LIMIT: dict[str, bool] = {}
_DISK_QUOTA: dict[str, bool] = {}
"""Per engine: whether its storage driver takes a size quota (unknown engines are tried once)."""


def _swap_limit(client: DockerClient) -> bool:
    """Whether the engine can limit swap (asked once per engine)."""
    url = client.api.base_url
    if url not in _SWAP_LIMIT:
        _SWAP_LIMIT[url] = bool(client.info().get("SwapLimit"))
    return _SWAP_LIMIT[url]
