"""Connections close as HTTP says (raw sockets against a real BFF, and a real
Hypercorn process)."""

from __future__ import annotations

from pathlib import Path

from dataplane.dev.embedded import free_port
from tests.acceptance.test_edge_connections import PROMPT, exchange
from tests.helpers import BffProcess


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


async def test_keep_alive_still_serves_several_requests(bff: str) -> None:
    """The fix closes idle connections only: two pipelined requests are both answered."""
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    last = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    received, closed = await exchange(bff, request + last, within=PROMPT)
    assert received.count(b"HTTP/1.1 200") == 2, received
    assert closed


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
