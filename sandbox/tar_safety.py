"""tarfile's "data" extraction filter (PEP 706), also where the running Python lacks it.

The docker backend reads a sandbox's tree from the engine as a tar stream, which the sandbox's
commands wrote, and unpacks it on the host with tarfile's "data" filter
(`sandbox.docker_repo.extract_tree`). CPython has the filters from 3.11.4 on; Debian 12's
`python3` is 3.11.2, which has neither the filters nor `TarInfo.replace` nor `extract(filter=)`.
There this module gives the same rule: a port of CPython 3.11.7's `_get_filtered_attrs` for
data, raising the same exception types, plus one guard of its own: names and link targets longer
than `MAX_PATH_CHARS` are refused, because the later CPython fixes for paths past PATH_MAX
(CVE-2025-4517 and its siblings) are not in this port. Where tarfile has the filters they are
used as they are; `tests/test_tar_safety.py` compares the port with them entry by entry.
"""

from __future__ import annotations

import copy
import os
import tarfile
from pathlib import Path
from typing import Any

NATIVE = hasattr(tarfile, "data_filter")
"""Whether tarfile has PEP 706's filters (CPython >= 3.11.4); tests turn it off to run the port."""
MAX_PATH_CHARS = 1024
"""Names and link targets the port accepts (the native filter has no such limit)."""


class _FilterError(tarfile.TarError):
    pass


class _AbsolutePathError(_FilterError):
    pass


class _OutsideDestinationError(_FilterError):
    pass


class _SpecialFileError(_FilterError):
    pass


class _AbsoluteLinkError(_FilterError):
    pass


class _LinkOutsideDestinationError(_FilterError):
    pass


FilterError = getattr(tarfile, "FilterError", _FilterError)
AbsolutePathError = getattr(tarfile, "AbsolutePathError", _AbsolutePathError)
OutsideDestinationError = getattr(tarfile, "OutsideDestinationError", _OutsideDestinationError)
SpecialFileError = getattr(tarfile, "SpecialFileError", _SpecialFileError)
AbsoluteLinkError = getattr(tarfile, "AbsoluteLinkError", _AbsoluteLinkError)
LinkOutsideDestinationError = getattr(tarfile, "LinkOutsideDestinationError",
                                      _LinkOutsideDestinationError)


def replace(member: tarfile.TarInfo, **attrs: Any) -> tarfile.TarInfo:
    """A shallow copy of `member` with `attrs` set (`TarInfo.replace(..., deep=False)`)."""
    if NATIVE:
        return member.replace(**attrs, deep=False)
    new = copy.copy(member)
    for key, value in attrs.items():
        setattr(new, key, value)
    return new


def data_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """`tarfile.data_filter(member, dest)`: the member to extract, with no owner and a safe mode,
    or a `FilterError` when it would land outside `dest`, through or as a link leaving it, or is
    a device or FIFO."""
    if NATIVE:
        return tarfile.data_filter(member, dest)
    new_attrs = _filtered_attrs(member, dest)
    return replace(member, **new_attrs) if new_attrs else member


def _filtered_attrs(member: tarfile.TarInfo, dest_path: str) -> dict[str, Any]:
    """CPython 3.11.7's `tarfile._get_filtered_attrs(member, dest_path, for_data=True)`."""
    if len(member.name) > MAX_PATH_CHARS or len(member.linkname) > MAX_PATH_CHARS:
        raise OutsideDestinationError(member, member.name[:80] + "...")
    new_attrs: dict[str, Any] = {}
    name = member.name
    dest_path = os.path.realpath(dest_path)
    if name.startswith(("/", os.sep)):
        name = new_attrs["name"] = member.path.lstrip("/" + os.sep)
    if os.path.isabs(name):
        raise AbsolutePathError(member)
    target_path = os.path.realpath(os.path.join(dest_path, name))
    if os.path.commonpath([target_path, dest_path]) != dest_path:
        raise OutsideDestinationError(member, target_path)
    mode: int | None = member.mode
    if mode is not None:
        mode = mode & 0o755                       # no setuid/setgid/sticky, no group/other write
        if member.isreg() or member.islnk():
            if not mode & 0o100:
                mode &= ~0o111                    # executable only if the owner may execute
            mode |= 0o600
        elif member.isdir() or member.issym():
            mode = None
        else:
            raise SpecialFileError(member)
        if mode != member.mode:
            new_attrs["mode"] = mode
    for owner in ("uid", "gid", "uname", "gname"):
        if getattr(member, owner) is not None:
            new_attrs[owner] = None
    if member.islnk() or member.issym():
        if os.path.isabs(member.linkname):
            raise AbsoluteLinkError(member)
        if member.issym():
            target_path = os.path.join(dest_path, os.path.dirname(name), member.linkname)
        else:
            target_path = os.path.join(dest_path, member.linkname)
        target_path = os.path.realpath(target_path)
        if os.path.commonpath([target_path, dest_path]) != dest_path:
            raise LinkOutsideDestinationError(member, target_path)
    return new_attrs


def extract_filtered(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: str | Path) -> None:
    """Extract a member that already passed `data_filter` (a file or a directory). Without the
    native filters, tarfile's own attribute setting is skipped (it would chown to the member's
    owner, which the filter cleared) and the filtered mode is applied here."""
    if NATIVE:
        tar.extract(member, dest, filter="fully_trusted")
        return
    tar.extract(member, dest, set_attrs=False)
    if member.mode is not None and member.isreg():
        os.chmod(os.path.join(dest, member.name), member.mode)
