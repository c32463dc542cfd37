"""The docker backend's host-side readers, without an engine: the exec stream reader (a socket
pair stands in for the daemon) and the archive extractor that `diff()` feeds (hand-made tar
streams stand in for the engine's archive of a hostile /testbed), with tarfile's filters and with
their port for older Pythons."""

from __future__ import annotations

import http.client
import io
import os
import socket
import struct
import tarfile

import pytest

from sandbox import tar_safety
from sandbox.base import PatchTooLarge
from sandbox.docker_exec import HeadTail, read_frames
from sandbox.docker_repo import extract_tree

UPGRADED = (b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
            b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n")


def frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


def upgraded_response(*chunks: bytes) -> http.client.HTTPResponse:
    """A parsed 101 response whose socket then carries `chunks`, each sent in one write; the
    peer closes afterwards."""
    host, daemon = socket.socketpair()
    for chunk in chunks:
        daemon.sendall(chunk)
    daemon.close()
    response = http.client.HTTPResponse(host, method="POST")
    response.begin()
    return response


def test_output_sent_with_the_headers_is_not_lost():
    """A fast command's whole output arrives in the packet that carries the upgrade headers, so
    the header parser has already buffered it; reading the raw socket would skip it."""
    response = upgraded_response(UPGRADED + frame(1, b"swe-rlvr-begin\n") + frame(2, b"warn\n"),
                                 frame(1, b"tail\n") + frame(1, b""))
    assert response.status == 101
    out, err = HeadTail(1 << 20), HeadTail(1 << 20)
    read_frames(response.fp, out, err)
    assert out.text() == "swe-rlvr-begin\ntail\n"
    assert err.text() == "warn\n"


def test_a_frame_split_across_packets_is_joined():
    payload = b"x" * 10_000
    whole = frame(1, payload)
    response = upgraded_response(UPGRADED + whole[:3], whole[3:5000], whole[5000:])
    out = HeadTail(1 << 20)
    read_frames(response.fp, out, HeadTail(16))
    assert out.text() == payload.decode()


@pytest.mark.parametrize("cut", [3, 8 + 2])
def test_a_stream_cut_inside_a_frame_raises(cut):
    """Cut inside the header or inside the payload: the output is incomplete, never passed off
    as whole."""
    response = upgraded_response(UPGRADED + frame(1, b"first\n") + frame(1, b"second\n")[:cut])
    out = HeadTail(1 << 20)
    with pytest.raises(EOFError, match="inside a frame|into a frame"):
        read_frames(response.fp, out, HeadTail(16))
    assert out.text() == "first\n"


# --------------------------------------------------------------------------- archives of /testbed


def entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", link: str = "",
          mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.size = kind, link, mode, len(data)
    return info, data


def archive(*entries: tuple[tarfile.TarInfo, bytes], chunk: int = 700) -> list[bytes]:
    """The tar stream of `entries` cut into small chunks, as the engine's response arrives."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data else None)
    raw = buf.getvalue()
    return [raw[i:i + chunk] for i in range(0, len(raw), chunk)]


def files_under(root) -> dict[str, str]:
    """Every path under `root` (links not followed): its content, or "-> target" for a link."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                found[rel] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                found[rel] = open(path).read()
    return found


@pytest.fixture(params=["native", "port"])
def tar_filters(request, monkeypatch):
    """Each extraction test runs with tarfile's own filters and with `sandbox.tar_safety`'s port
    (what a Python before 3.11.4, such as Debian 12's, runs)."""
    if request.param == "native" and not tar_safety.NATIVE:
        pytest.skip("this Python's tarfile has no extraction filters")
    monkeypatch.setattr(tar_safety, "NATIVE", request.param == "native")
    return request.param


def test_the_tree_loses_its_top_directory_and_every_git(tmp_path, tar_filters):
    """The agent's `.git` (top-level or nested) never reaches the host: it may hold hooks,
    fsmonitor commands or a forged history. Modes keep only the executable bit git records."""
    chunks = archive(entry("testbed", tarfile.DIRTYPE, mode=0o755),
                     entry("testbed/calc.py", data=b"x = 1\n", mode=0o4777),
                     entry("testbed/run.sh", data=b"#!/bin/sh\n", mode=0o755),
                     entry("testbed/.git/config", data=b"[core]\n\tfsmonitor = evil\n"),
                     entry("testbed/vendor/.git/hooks/post-index-change", data=b"evil"))
    extract_tree(chunks, tmp_path, limit_bytes=1 << 20)
    assert files_under(tmp_path) == {"calc.py": "x = 1\n", "run.sh": "#!/bin/sh\n"}
    assert os.stat(tmp_path / "calc.py").st_mode & 0o7777 == 0o755  # setuid, group/other w gone
    assert os.access(tmp_path / "run.sh", os.X_OK)


def test_links_out_of_the_tree_are_kept_but_never_followed(tmp_path, tar_filters):
    """The agent plants links that leave /testbed (absolute, relative, a hard link to such a
    link), then files through them and a `..` path, hoping the host writes (or reads, for the
    patch) its own files; and hard links to what is left out (its `.git`, a device). Links are
    kept as links (git records their targets); every path through one, those hard links and
    device files are left out; nothing lands outside, and nothing crashes the extraction."""
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir(), outside.mkdir()
    (outside / "secret").write_text("host secret\n")
    chunks = archive(entry("testbed/abs", tarfile.SYMTYPE, link=str(outside)),
                     entry("testbed/up", tarfile.SYMTYPE, link="../outside"),
                     entry("testbed/abs/planted", data=b"through an absolute link"),
                     entry("testbed/up/planted", data=b"through a relative link"),
                     entry("testbed/../planted", data=b"dot-dot"),
                     entry("testbed/secret", tarfile.LNKTYPE, link="testbed/up/secret"),
                     entry("testbed/console", tarfile.CHRTYPE),
                     entry("testbed/pipe", tarfile.FIFOTYPE),
                     entry("testbed/.git/config", data=b"[core]\n"),
                     entry("testbed/config", tarfile.LNKTYPE, link="testbed/.git/config"),
                     entry("testbed/tty", tarfile.LNKTYPE, link="testbed/console"),
                     entry("testbed/ok.py", data=b"ok\n"))
    extract_tree(chunks, tree, limit_bytes=1 << 20)
    assert files_under(tree) == {"abs": f"-> {outside}", "up": "-> ../outside", "ok.py": "ok\n"}
    assert files_under(outside) == {"secret": "host secret\n"}
    assert not (tmp_path / "planted").exists()


def test_a_tree_too_large_is_refused_before_its_data_is_read(tmp_path, tar_filters):
    """A file claiming 1 TiB (a sparse file, say) is refused at its header: the stream here even
    ends right after it, so reading on would fail. So is an inode bomb of empty files."""
    header = tarfile.TarInfo("testbed/huge")
    header.size = 1 << 40
    with pytest.raises(PatchTooLarge, match="refused"):
        extract_tree([header.tobuf()], tmp_path / "a", limit_bytes=1 << 20)
    many = archive(*[entry(f"testbed/f{i}") for i in range(10)])
    with pytest.raises(PatchTooLarge, match="5 entries"):
        extract_tree(many, tmp_path / "b", limit_bytes=1 << 20, max_entries=5)
