"""The port of tarfile's "data" filter (`sandbox.tar_safety`, for Pythons before 3.11.4, such as
Debian 12's 3.11.2) against the real one on this Python, entry by entry: the same member out, or
the same refusal."""

from __future__ import annotations

import os
import tarfile

import pytest

from sandbox import tar_safety

needs_reference = pytest.mark.skipif(not tar_safety.NATIVE, reason="needs tarfile.data_filter "
                                     "(Python 3.11.4+) as the reference")


def member(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = "",
           uid: int = 1000) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    info.uid, info.gid, info.uname, info.gname = uid, uid, "agent", "agent"
    return info


CASES = [
    member("calc.py"),
    member("run.sh", mode=0o755),
    member("suid", mode=0o4777),
    member("group-writable", mode=0o664),
    member("no-owner-exec", mode=0o611),
    member("private", mode=0o000),
    member("pkg", tarfile.DIRTYPE, mode=0o777),
    member("pkg/mod.py"),
    member("/etc/cron.d/evil"),
    member("//abs"),
    member("../escape"),
    member("a/../../escape"),
    member("a/./b/../c"),
    member("in-link", tarfile.SYMTYPE, link="pkg/mod.py"),
    member("up-link", tarfile.SYMTYPE, link="../outside"),
    member("deep/up-link", tarfile.SYMTYPE, link="../../outside"),
    member("deep/ok-link", tarfile.SYMTYPE, link="../calc.py"),
    member("abs-link", tarfile.SYMTYPE, link="/etc/passwd"),
    member("hard", tarfile.LNKTYPE, link="calc.py"),
    member("hard-out", tarfile.LNKTYPE, link="../outside/secret"),
    member("hard-abs", tarfile.LNKTYPE, link="/etc/shadow"),
    member("console", tarfile.CHRTYPE),
    member("disk", tarfile.BLKTYPE),
    member("pipe", tarfile.FIFOTYPE),
    member("planted-link/file"),                  # through a link already on disk, leaving dest
    member("inner-link/file"),                    # through a link on disk that stays inside
]


def outcome(filter_member, info: tarfile.TarInfo, dest: str):
    try:
        out = filter_member(info, dest)
    except tarfile.TarError as exc:
        return type(exc).__name__
    return (out.name, out.type, out.mode, out.linkname, out.uid, out.gid, out.uname, out.gname)


@pytest.fixture
def dest(tmp_path):
    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", root / "planted-link")
    os.symlink("pkg", root / "inner-link")
    return str(root)


@needs_reference
@pytest.mark.parametrize("info", CASES, ids=[c.name for c in CASES])
def test_the_port_filters_every_entry_as_tarfile_does(info, dest, monkeypatch):
    native = outcome(tarfile.data_filter, info, dest)
    monkeypatch.setattr(tar_safety, "NATIVE", False)
    assert outcome(tar_safety.data_filter, info, dest) == native


@needs_reference
def test_the_cases_cover_every_refusal_possible_on_posix_and_kept_members(dest):
    seen = {outcome(tarfile.data_filter, info, dest) for info in CASES}
    refusals = {o for o in seen if isinstance(o, str)}
    assert refusals == {"AbsoluteLinkError", "LinkOutsideDestinationError",
                        "OutsideDestinationError", "SpecialFileError"}
    assert len(seen - refusals) > 10


def test_the_port_refuses_paths_longer_than_it_checks(dest, monkeypatch):
    monkeypatch.setattr(tar_safety, "NATIVE", False)
    with pytest.raises(tar_safety.FilterError):
        tar_safety.data_filter(member("a/" * 600 + "f"), dest)
    with pytest.raises(tar_safety.FilterError):
        tar_safety.data_filter(member("l", tarfile.SYMTYPE, link="x/" * 600), dest)
