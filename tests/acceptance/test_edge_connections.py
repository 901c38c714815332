"""Connections close as HTTP says (raw sockets against a real BFF).

After an HTTP/1.0 or ``Connection: close`` exchange the server sends FIN at once;
an idle keep-alive connection is closed after Hypercorn's keep-alive timeout; an
SSE stream over HTTP/1.0 (a close-delimited body) ends with the connection. The
in-process BFF is served by Hypercorn's trio ``serve``; one case runs against a
real ``hypercorn -k trio dataplane.app:app`` process. The quick cases (FIN after
HTTP/1.0 and ``Connection: close``, pipelined keep-alive, the real process) are in
tests/smoke/test_edge_connections.py.

Against real processes (``dataplane bff`` and the card's Hypercorn command): a
connection the peer closes is closed on our side at once, not left in CLOSE-WAIT for
the keep-alive; and SIGTERM stops the server within its grace, exit status 0, even
while clients that never read keep its writes blocked on full send buffers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import signal
import socket
import struct
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import trio
from hypercorn.config import Config

from dataplane.dev.embedded import free_port
from dataplane.queue import QueueClient
from tests.acceptance.test_bff import STAFF, post
from tests.conftest import wait_until
from tests.helpers import BffProcess, complete

KEEP_ALIVE = Config().keep_alive_timeout  # seconds (Hypercorn's default: 5)
PROMPT = 3.0  # seconds within which a connection that should close has closed


async def exchange(base: str, request: bytes, *, within: float) -> tuple[bytes, bool]:
    """Send ``request`` on a fresh connection; read until FIN or ``within`` seconds.

    Returns (everything received, whether the server closed the connection)."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    received = b""
    closed = False
    async with stream:
        await stream.send_all(request)
        with trio.move_on_after(within):
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    closed = True
                    break
                received += chunk
    return received, closed


async def test_an_idle_keep_alive_connection_closes_after_the_timeout(bff: str) -> None:
    started = trio.current_time()
    received, closed = await exchange(
        bff, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", within=KEEP_ALIVE + PROMPT
    )
    idle = trio.current_time() - started
    assert received.startswith(b"HTTP/1.1 200"), received[:200]
    assert closed, f"an idle keep-alive connection was still open after {idle:.1f} s"
    assert KEEP_ALIVE - 0.5 <= idle, f"closed after {idle:.1f} s, before the keep-alive timeout"


async def test_an_sse_stream_over_http10_ends_with_the_connection(
    bff: str, http: httpx.AsyncClient, spawn_worker: Callable[..., Any]
) -> None:
    await spawn_worker()
    resp = await post(http, "probe", "echo", {"value": "bye"}, STAFF)
    assert resp.status_code == 202, resp.text
    request = f"GET {resp.json()['streamUrl']} HTTP/1.0\r\n\r\n".encode()
    received, closed = await exchange(bff, request, within=15)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"event: done" in body, body
    assert closed, "the SSE stream ended but the connection was left open"
    done = body.split(b"event: done", 1)[1]
    data = next(ln for ln in done.splitlines() if ln.startswith(b"data: "))
    assert json.loads(data[len(b"data: ") :])["result"]["echo"] == "bye"


# -- connections the peer ends, and a shutdown's grace (docs/known-issues.md 6) ----------

SERVERS = {
    "dataplane bff": {"command": ("-m", "dataplane", "bff")},
    "hypercorn -k trio dataplane.app:app": {"args": ("-k", "trio", "--keep-alive", "75")},
}
PEER_CLOSED = 200  # connections opened and closed by the client
GRACE = 2  # seconds: the shutdown grace given to the server
READ_NOTHING = 5  # clients that never read their answer
ANSWER_BYTES = 200_000  # of the answer they do not read


def close_waits(proc: BffProcess) -> int:
    """The server's sockets whose peer has closed and which we have not (CLOSE-WAIT)."""
    return sum(1 for c in proc.connections() if c.status == psutil.CONN_CLOSE_WAIT)


@pytest.mark.parametrize("served", list(SERVERS))
async def test_connections_the_peer_closes_are_closed_at_once(
    served: str, bff_env: dict[str, str], tmp_path: Path
) -> None:
    """Connect-then-close, and request-then-close: the server closes its side at the
    peer's FIN, not after the 75 s keep-alive (each would hold a descriptor meanwhile)."""
    proc = BffProcess(bff_env, str(tmp_path / "bff.log"), port=free_port(), **SERVERS[served])  # type: ignore[arg-type]
    try:
        await proc.wait_ready()
        for i in range(PEER_CLOSED):
            stream = await trio.open_tcp_stream("127.0.0.1", proc.port)
            if i % 4 == 0:  # a quarter ask first: then the connection is idle, kept alive
                await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                assert (await stream.receive_some(65536)).startswith(b"HTTP/1.1 200")
            await stream.aclose()
        await wait_until(lambda: close_waits(proc) == 0, within=PROMPT, interval=0.1)
        assert proc.proc.poll() is None
    finally:
        proc.stop()


def unread(sock: socket.socket) -> int:
    """Bytes that arrived on ``sock`` and nobody has read."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]


@pytest.mark.parametrize("served", list(SERVERS))
async def test_sigterm_stops_within_the_grace_with_clients_that_never_read(
    served: str,
    bff_env: dict[str, str],
    tmp_path: Path,
    queue: QueueClient,
) -> None:
    """Five clients ask for a 200 KB answer and never read it: the server's writes
    block on full send buffers. SIGTERM stops the server within its grace (plus a
    margin), exit status 0, the unread answers cut."""
    grace = ("--graceful-timeout", str(GRACE))
    options = SERVERS[served]
    options = {**options, "args": (*options.get("args", ()), *grace)}
    proc = BffProcess(bff_env, str(tmp_path / "bff.log"), port=free_port(), **options)  # type: ignore[arg-type]
    clients: list[socket.socket] = []
    try:
        await proc.wait_ready()
        async with httpx.AsyncClient(base_url=proc.base, timeout=30) as http:
            resp = await post(http, "probe", "echo", {"value": "large"}, STAFF)
            assert resp.status_code == 202, resp.text
        [job] = await queue.claim("surface-probe", "test-edge-connections")
        await complete(queue, job, {"data": {"filler": "x" * ANSWER_BYTES}})
        request = f"GET {resp.json()['pollUrl']} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        for _ in range(READ_NOTHING):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window
            sock.connect(("127.0.0.1", proc.port))
            sock.sendall(request)
            clients.append(sock)
        # Every answer has started (its first bytes wait unread): the writes are blocked.
        await wait_until(lambda: all(unread(s) > 0 for s in clients), within=PROMPT)
        started = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        await wait_until(lambda: proc.proc.poll() is not None, within=GRACE + 20, interval=0.05)
        took = time.monotonic() - started
        assert proc.proc.returncode == 0, proc.output()[-3000:]
        assert took <= GRACE + 3, f"stopped {took:.1f} s after SIGTERM (grace {GRACE} s)"
        for sock in clients:  # each answer was cut, not delivered whole
            received = b""
            sock.settimeout(PROMPT)
            with contextlib.suppress(OSError):
                while chunk := sock.recv(65536):
                    received += chunk
            assert len(received) < ANSWER_BYTES, "an answer went out whole: nothing was blocked"
    finally:
        for sock in clients:
            sock.close()
        proc.stop()
