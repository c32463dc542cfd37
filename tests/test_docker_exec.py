"""The docker exec stream reader, without an engine: a socket pair stands in for the daemon."""

from __future__ import annotations

import http.client
import socket
import struct

import pytest

from sandbox.docker_exec import HeadTail, read_frames

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
