"""``http11.send_until_connection_ends``: a write blocked on a full send buffer is
shielded from the writing task's cancellation, and ended by the cancellation of the
connection's task group (the end of a shutdown's grace), over real loopback TCP.

The rest of ``dataplane.compat.http11`` (HTTP/1.1 only, FIN closes at once) is pinned through
real processes: ``tests/acceptance/test_edge_http2.py``, ``test_edge_connections.py``
and ``test_edge_stock_stack.py``."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
from hypercorn.config import Config
from hypercorn.events import Closed, RawData
from hypercorn.trio.task_group import TaskGroup
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext

from dataplane.compat.http11 import guard_connections, send_until_connection_ends

BIG = b"x" * 2_000_000  # far more than the send and receive buffers hold


class ProtocolEvents:
    """Stands for Hypercorn's protocol: what the server reported to it."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def handle(self, event: Any) -> None:
        self.events.append(event)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[TCPServer, trio.SocketStream]]:
    """A Hypercorn TCP server on the accepted end of a loopback connection (small send
    buffer), and the client's end, which reads only when told."""
    guard_connections()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    accepted = await listeners[0].accept()
    accepted.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    server = TCPServer(None, Config(), WorkerContext(None), {}, accepted)  # type: ignore[arg-type]
    server.protocol = ProtocolEvents()  # type: ignore[assignment]
    try:
        yield server, client
    finally:
        await accepted.aclose()
        await client.aclose()
        await listeners[0].aclose()


async def read_all(client: trio.SocketStream, size: int) -> bytes:
    received = bytearray()
    with trio.fail_after(30):
        while len(received) < size:
            chunk = await client.receive_some(65536)
            if not chunk:
                break
            received += chunk
    return bytes(received)


async def test_the_writing_tasks_cancellation_does_not_cut_a_write(
    pair: tuple[TCPServer, trio.SocketStream],
) -> None:
    server, client = pair
    writer = trio.CancelScope()
    async with TaskGroup() as task_group:
        server._task_group = task_group

        async def write() -> None:
            with writer:
                await send_until_connection_ends(server, RawData(data=BIG))

        task_group._nursery.start_soon(write)  # type: ignore[union-attr]
        await trio.testing.wait_all_tasks_blocked()  # blocked: the buffers are full
        writer.cancel()  # an app's timeout, a request cancelled on http.disconnect
        assert await read_all(client, len(BIG)) == BIG  # whole all the same
    events: list[Any] = server.protocol.events  # type: ignore[attr-defined]
    assert events == []


@pytest.mark.timeout(30)  # a write that is not cut blocks the test until then
async def test_the_connections_end_cuts_a_blocked_write_and_closes_it(
    pair: tuple[TCPServer, trio.SocketStream],
) -> None:
    server, client = pair
    async with TaskGroup() as task_group:
        server._task_group = task_group
        task_group._nursery.start_soon(send_until_connection_ends, server, RawData(data=BIG))  # type: ignore[union-attr]
        await trio.testing.wait_all_tasks_blocked()
        # What Hypercorn does at the end of a shutdown's grace: the server's tasks, this
        # connection's among them, are cancelled.
        task_group._nursery.cancel_scope.cancel()  # type: ignore[union-attr]
    received = await read_all(client, len(BIG))
    assert 0 < len(received) < len(BIG)  # cut, and the connection closed (EOF)
    events: list[Any] = server.protocol.events  # type: ignore[attr-defined]
    assert [type(e) for e in events] == [Closed]
