"""A process whose server dies never exits 0 (``docs/known-issues.md`` 5), through a
real ``dataplane bff`` process.

Hypercorn's CLI serves from a worker process, and its parent exits 0 whatever ended
that worker. ``dataplane bff`` serves in its own process: an exception that escapes
the server (a real one: Hypercorn's HTTP/2 protocol lets one DATA frame raise
``KeyError`` out of a connection) exits non-zero.
"""

from __future__ import annotations

import struct
from pathlib import Path

import hpack
import trio

from dataplane.dev.embedded import free_port
from tests.conftest import wait_until
from tests.helpers import BffProcess

# -- HTTP/2 on the wire (RFC 9113 §3.4, §4.1, §6) --------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS = 0x0, 0x1, 0x4
END_STREAM, END_HEADERS = 0x1, 0x4


def h2_frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame: 24-bit length, type, flags, 31-bit stream id, payload."""
    head = struct.pack(">I", len(payload))[1:] + bytes([kind, flags])
    return head + struct.pack(">I", stream) + payload


def h2_get(path: str = "/healthz", stream: int = 1) -> bytes:
    """A GET on ``stream``: HEADERS without END_STREAM (a body may follow)."""
    block = hpack.Encoder().encode(
        [(":method", "GET"), (":scheme", "http"), (":path", path), (":authority", "x")]
    )
    return h2_frame(HEADERS, END_HEADERS, stream, block)


OPENING = PREFACE + h2_frame(SETTINGS, 0, 0) + h2_get()  # prior knowledge, as curl sends it
DATA_ON_1 = h2_frame(DATA, END_STREAM, 1, b"x")  # the frame that ended Hypercorn's process
H2C_UPGRADE = (
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
    b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n"
)


# -- a crash exits non-zero ------------------------------------------------------------

# `dataplane bff` with Hypercorn's own protocols put back after the app installed the
# edge's: Hypercorn's HTTP/2 protocol, and its KeyError, are reachable as on Hypercorn
# alone.
UNGUARDED_BFF = """
import sys
import hypercorn.protocol
import hypercorn.protocol.h11
import hypercorn.trio.tcp_server
import dataplane.app  # installs the edge
hypercorn.trio.tcp_server.ProtocolWrapper = hypercorn.protocol.ProtocolWrapper
hypercorn.protocol.H11Protocol = hypercorn.protocol.h11.H11Protocol
from dataplane.cli import main
sys.exit(main(sys.argv[1:]))
"""


async def test_an_exception_that_ends_the_server_exits_non_zero(
    bff_env: dict[str, str], tmp_path: Path
) -> None:
    proc = BffProcess(
        bff_env, str(tmp_path / "bff.log"), port=free_port(), command=("-c", UNGUARDED_BFF, "bff")
    )
    try:
        await proc.wait_ready()
        host, port = "127.0.0.1", proc.port
        async with await trio.open_tcp_stream(host, port) as stream:
            await stream.send_all(OPENING)
            await stream.receive_some(65536)  # HTTP/2: SETTINGS, then the answer
            with trio.move_on_after(1):
                while await stream.receive_some(65536):
                    pass
            await stream.send_all(DATA_ON_1)
        await wait_until(lambda: proc.proc.poll() is not None, within=20, interval=0.05)
        assert "KeyError: 1" in proc.output(), proc.output()[-3000:]
        assert proc.proc.returncode != 0, "the server ended with an exception, and exit 0"
    finally:
        proc.stop()
