"""What a jail's commands see of the host's file system: an allow-list, the same on every host.

A jail shows exactly:
- `/usr` read-only, with its `bin` and `sbin` replaced by the fixed tool set `TOOLS` (each one
  bound from the host where the host has it), and `/usr/local` emptied: a tool the host happens
  to have (`xdg-open`'s `open`, a compiler, `docker`) is not in the jail;
- the top-level links and library directories of a merged-`/usr` layout (`/bin`, `/lib64`, ...);
- a minimal `/etc` (`ETC`: users, name service, the dynamic loader's cache, time zone);
- a fresh `/proc` of the jail's own pid namespace and a minimal `/dev` with a size-capped
  `/dev/shm`;
- the instance's environment and the interpreters it links to, read-only, with this project's own
  installed package masked (it holds the built-in suite's gold patches and fixed code);
- the working copy at `REPO_DIR` and its private `/tmp`, writable.
Nothing else: not the project checkout, the run directory (Parquet, `mlflow.db`), datasets, the
repo store or other sandboxes, home directories, `/run`, `/var` (no socket of the host, the Docker
engine's included), `/sys`, or `/opt`.

`mounts()` describes the view as a list of `Mount`s; `bwrap_args` and `shell_script` render that
one list for bubblewrap and for the `unshare` level (which builds the same tree under a tmpfs and
chroots into it), so both levels show the same thing.

Simplifications: `/usr/lib`, `/usr/share` and `/usr/include` are shown whole (the tools and the
environments' interpreters load their libraries from there); a tool missing on the host is missing
in the jail too.
"""

from __future__ import annotations

import functools
import os
import shlex
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from sandbox.base import REPO_DIR

TOOLS = (
    # shells and the runner's needs
    "bash", "sh", "dash", "env", "setsid", "timeout", "nohup", "nice", "kill", "sleep",
    # coreutils
    "basename", "cat", "chmod", "cmp", "comm", "cp", "csplit", "cut", "date", "dd", "df", "diff",
    "diff3", "dirname", "du", "echo", "expand", "expr", "factor", "false", "fmt", "fold", "head",
    "id", "install", "join", "link", "ln", "ls", "md5sum", "mkdir", "mkfifo", "mktemp", "mv", "nl",
    "nproc", "numfmt", "od", "paste", "patch", "pathchk", "pr", "printenv", "printf", "ptx", "pwd",
    "readlink", "realpath", "rm", "rmdir", "sdiff", "seq", "sha1sum", "sha256sum", "sha512sum",
    "shuf", "sort", "split", "stat", "stdbuf", "sum", "tac", "tail", "tee", "test", "[", "touch",
    "tr", "true", "truncate", "tsort", "tty", "uname", "unexpand", "uniq", "unlink", "wc", "which",
    "whoami", "xargs", "yes", "tput", "clear",
    # search and text
    "grep", "egrep", "fgrep", "sed", "awk", "mawk", "gawk", "find", "file", "less", "more",
    "perl", "vi", "vim.tiny", "iconv",
    # archives
    "tar", "gzip", "gunzip", "zcat", "bzip2", "xz", "unzip", "zip",
    # version control and builds
    "git", "make", "gcc", "cc", "g++", "c++", "cpp", "ld", "as", "ar", "ranlib", "strip",
    "python3", "ps", "pgrep", "pkill", "top", "free", "uptime",
)
"""System tools every jail offers where the host has them (under `/usr/bin` or `/usr/sbin`)."""

ETC = ("passwd", "group", "hosts", "nsswitch.conf", "host.conf", "ld.so.cache", "ld.so.conf",
       "ld.so.conf.d", "localtime", "timezone", "mime.types", "os-release", "debian_version",
       "magic", "magic.mime", "perl", "vim", "inputrc")
"""`/etc` entries a jail shows (where the host has them)."""

TOOL_DIRS = ("/usr/bin", "/usr/sbin")
ROOT_LIBS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""Top-level entries of a merged-/usr layout: links into /usr (or directories, bound read-only)."""
OWN_DISTRIBUTION = "swe-rlvr"


@dataclass(frozen=True)
class Mount:
    kind: str
    """ro | rw (bind `source` at `dest`), tmpfs, symlink (`source` is the target), dir,
    remount-ro (make `dest`, a mount made earlier, read-only)."""
    dest: str
    source: str = ""
    size: int = 0
    """tmpfs: size cap in bytes (0: the kernel's default)."""
    mode: str = "755"
    """tmpfs: permissions of its root."""


def mounts(binds: tuple[str, ...], workdir: str, tmpdir: str, shm_bytes: int) -> list[Mount]:
    """The whole view of a jail, in order (see the module docstring). `binds` are host
    directories shown read-only at their own path (the environment and its interpreters)."""
    out = list(system_mounts())
    out.append(Mount("tmpfs", "/dev/shm", size=shm_bytes, mode="1777"))
    out += [Mount("rw", "/tmp", tmpdir), Mount("rw", REPO_DIR, workdir)]  # binds may lie under /tmp
    made = {"/", "/usr", "/etc", "/tmp", *TOOL_DIRS}
    for path in binds:
        parents = [str(p) for p in reversed(Path(path).parents) if str(p) not in made]
        made.update(parents)
        out += [Mount("dir", p) for p in parents]  # world-traversable, unlike /root on the host
        out.append(Mount("ro", path, path))
        out += [Mount("tmpfs", masked, size=4096) for masked in own_package_dirs(path)]
    return out + [Mount("remount-ro", d) for d in (*TOOL_DIRS, "/usr/local", "/")]


@functools.lru_cache(maxsize=1)
def system_mounts() -> tuple[Mount, ...]:
    """The host-independent part: /usr with the fixed tools, the root links, a minimal /etc."""
    out = [Mount("ro", "/usr", "/usr")]
    for tool_dir in TOOL_DIRS:
        out.append(Mount("tmpfs", tool_dir, size=4096))
        out += [Mount("ro", f"{tool_dir}/{t}", f"{tool_dir}/{t}") for t in TOOLS
                if os.path.exists(f"{tool_dir}/{t}")]
    out.append(Mount("tmpfs", "/usr/local", size=4096))
    for name in ROOT_LIBS:
        path = f"/{name}"
        if os.path.islink(path):
            out.append(Mount("symlink", path, os.readlink(path)))
        elif os.path.isdir(path) and name.startswith("lib"):
            out.append(Mount("ro", path, path))
    out.append(Mount("dir", "/etc"))
    out += [Mount("ro", f"/etc/{e}", f"/etc/{e}") for e in ETC if os.path.exists(f"/etc/{e}")]
    return tuple(out)


def environment_binds(bin_dir: str, runner: str) -> tuple[str, ...]:
    """Host paths a jail must show: the environment's prefix (the parent of `bin_dir`), and for
    every hop of its python's and of the runner's symlink chains (a venv -> pyenv -> system
    python) the hop's prefix, or the hop itself where it is a system tool directory's file that
    the jail's tool set lacks (a venv over a distribution's `/usr/bin/python3.12`). What /usr
    already shows is dropped, and so are nested paths."""
    hops = []
    if bin_dir:
        hops += link_chain(Path(bin_dir, "python"))
    if runner:
        hops.append(os.path.realpath(runner))
    wanted = [str(Path(bin_dir).parent)] if bin_dir else []
    wanted += [hop if _in_tool_dir(hop) else str(Path(hop).parent.parent) for hop in hops]
    wanted = [p for p in dict.fromkeys(wanted) if not _shown_by_system(p)]
    return tuple(p for p in wanted if not any(q != p and _under(p, q) for q in wanted))


def visible(path: str, binds: tuple[str, ...]) -> bool:
    """Whether `path` (a host path) is shown inside a jail with `binds`."""
    return _shown_by_system(path) or any(_under(path, b) for b in binds)


def _in_tool_dir(path: str) -> bool:
    return any(_under(path, d) for d in TOOL_DIRS)


def _shown_by_system(path: str) -> bool:
    """Under /usr, outside /usr/local, and in a tool directory only as one of `TOOLS`."""
    if _in_tool_dir(path):
        return str(Path(path).parent) in TOOL_DIRS and Path(path).name in TOOLS
    return _under(path, "/usr") and not _under(path, "/usr/local")


def link_chain(path: Path, limit: int = 16) -> list[str]:
    """Every hop of `path`'s symlink chain (normalised, not resolved further)."""
    hops: list[str] = []
    while path.is_symlink() and len(hops) < limit:
        path = path.parent / os.readlink(path)
        hops.append(os.path.normpath(path))
    return hops


@functools.lru_cache(maxsize=64)
def own_package_dirs(prefix: str) -> tuple[str, ...]:
    """This project's installed top-level packages and metadata in the site-packages of the
    environment at `prefix` (a non-editable install puts the built-in suite, gold patches
    included, there; an editable one its metadata)."""
    found = []
    for site in sorted(Path(prefix).glob("lib/python*/site-packages")):
        for dist in metadata.distributions(path=[str(site)]):
            if (dist.metadata["Name"] or "").lower().replace("_", "-") != OWN_DISTRIBUTION:
                continue
            tops = {Path(str(f)).parts[0] for f in (dist.files or ()) if Path(str(f)).parts}
            found += [str(site / top) for top in sorted(tops - {"..", "__pycache__"}) if (site / top).is_dir()]
    return tuple(dict.fromkeys(found))


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


# --------------------------------------------------------------------------- renderers


def bwrap_args(view: list[Mount]) -> list[str]:
    """bubblewrap options that build `view` (after `--proc /proc --dev /dev`)."""
    args = ["--proc", "/proc", "--dev", "/dev"]
    for m in view:
        if m.kind in ("ro", "rw"):
            args += ["--ro-bind" if m.kind == "ro" else "--bind", m.source, m.dest]
        elif m.kind == "tmpfs":
            args += ["--perms", m.mode, *(["--size", str(m.size)] if m.size else []), "--tmpfs", m.dest]
        elif m.kind == "symlink":
            args += ["--symlink", m.source, m.dest]
        elif m.kind == "dir":
            args += ["--perms", "0755", "--dir", m.dest]
        elif m.kind == "remount-ro":
            args += ["--remount-ro", m.dest]
    return args


DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def shell_script(view: list[Mount], root: str) -> str:
    """sh lines (run as root in a new mount namespace) that build `view` under `root`."""
    q = shlex.quote
    lines = ["umask 022", f"mount -t tmpfs -o mode=755 tmpfs {q(root)}", f"mkdir -p {q(root + '/proc')}",
             f"mount -t proc proc {q(root + '/proc')}",
             f"mkdir -p {q(root + '/dev')} && mount -t tmpfs -o mode=755 tmpfs {q(root + '/dev')}"]
    for dev in DEVICES:
        dest = q(f"{root}/dev/{dev}")
        lines.append(f"touch {dest} && mount --bind /dev/{dev} {dest}")
    for m in view:
        dest = q(root + m.dest)
        if m.kind in ("ro", "rw"):
            make = f"mkdir -p {dest}" if os.path.isdir(m.source) else \
                f"mkdir -p {q(os.path.dirname(root + m.dest))} && touch {dest}"
            lines.append(f"{make} && mount --rbind {q(m.source)} {dest}")
            if m.kind == "ro":
                lines.append(f"mount -o remount,bind,ro {dest}")
        elif m.kind == "tmpfs":
            size = f",size={m.size}" if m.size else ""
            lines.append(f"mkdir -p {dest} && mount -t tmpfs -o mode={m.mode}{size} tmpfs {dest}")
        elif m.kind == "symlink":
            lines.append(f"ln -s {q(m.source)} {dest}")
        elif m.kind == "dir":
            lines.append(f"mkdir -p {dest}")
        elif m.kind == "remount-ro":
            lines.append(f"mount -o remount,bind,ro {dest}")
    return " && \\\n".join(lines)


