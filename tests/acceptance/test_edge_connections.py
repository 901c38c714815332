"""Connections close as HTTP says (raw sockets against a real BFF).

After an HTTP/1.0 or ``Connection: close`` exchange the server sends FIN at once;
an idle keep-alive connection is closed after Hypercorn's keep-alive timeout; an
SSE stream over HTTP/1.0 (a close-delimited body) ends with the connection. The
in-process BFF is served by Hypercorn's trio ``serve``; one case runs against a
real ``hypercorn -k trio dataplane.app:app`` process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import trio
from hypercorn.config import Config

from dataplane.dev.embedded import free_port
from tests.acceptance.test_bff import STAFF, post
from tests.helpers import BffProcess

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


async def test_http10_exchange_closes_the_connection(bff: str) -> None:
    received, closed = await exchange(bff, b"GET /healthz HTTP/1.0\r\n\r\n", within=PROMPT)
    assert received.startswith(b"HTTP/1.1 200"), received[:200]
    assert received.endswith(b'{"status":"ok"}')
    assert closed, "no FIN after an HTTP/1.0 exchange"


async def test_connection_close_closes_the_connection(bff: str) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    received, closed = await exchange(bff, request, within=PROMPT)
    assert received.startswith(b"HTTP/1.1 200"), received[:200]
    assert closed, "no FIN after Connection: close"


async def test_an_error_answer_with_connection_close_closes_too(bff: str) -> None:
    request = b"GET /no/such/route HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    received, closed = await exchange(bff, request, within=PROMPT)
    assert received.startswith(b"HTTP/1.1 404"), received[:200]
    assert closed


async def test_an_idle_keep_alive_connection_closes_after_the_timeout(bff: str) -> None:
    started = trio.current_time()
    received, closed = await exchange(
        bff, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", within=KEEP_ALIVE + PROMPT
    )
    idle = trio.current_time() - started
    assert received.startswith(b"HTTP/1.1 200"), received[:200]
    assert closed, f"an idle keep-alive connection was still open after {idle:.1f} s"
    assert KEEP_ALIVE - 0.5 <= idle, f"closed after {idle:.1f} s, before the keep-alive timeout"


async def test_keep_alive_still_serves_several_requests(bff: str) -> None:
    """The fix closes idle connections only: two pipelined requests are both answered."""
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    last = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    received, closed = await exchange(bff, request + last, within=PROMPT)
    assert received.count(b"HTTP/1.1 200") == 2, received
    assert closed


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


async def test_a_real_hypercorn_process_closes_http10_connections(
    bff_env: dict[str, str], tmp_path: Path
) -> None:
    proc = BffProcess(bff_env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    try:
        await proc.wait_ready()
        received, closed = await exchange(
            proc.base, b"GET /healthz HTTP/1.0\r\n\r\n", within=PROMPT
        )
        assert received.startswith(b"HTTP/1.1 200"), received[:200]
        assert closed, "no FIN from `hypercorn -k trio dataplane.app:app` after HTTP/1.0"
    finally:
        proc.stop()
