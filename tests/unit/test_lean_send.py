"""``edge.lean_protocol_send``: Hypercorn's ``TCPServer.protocol_send`` writing what the
socket takes at once without a scheduler pass, over real loopback TCP connections.

What the socket does not take follows under Hypercorn's send lock, in order and even
from a cancelled scope (half a response must never be left on a connection); a reset
connection is reported to the protocol as Hypercorn reports it. The number of writes
a real response takes is pinned by ``tests/acceptance/test_edge_writes.py``."""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
from hypercorn.config import Config
from hypercorn.events import Closed, RawData
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext

from dataplane.compat.hypercorn import lean_protocol_send, lean_socket_send


class ProtocolEvents:
    """Stands for Hypercorn's protocol: what the server reported to it."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def handle(self, event: Any) -> None:
        self.events.append(event)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[TCPServer, trio.SocketStream]]:
    """A Hypercorn TCP server on the accepted end of a loopback connection, and the
    client's end."""
    lean_socket_send()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    accepted = await listeners[0].accept()
    server = TCPServer(None, Config(), WorkerContext(None), {}, accepted)  # type: ignore[arg-type]
    server.protocol = ProtocolEvents()  # type: ignore[assignment]
    try:
        yield server, client
    finally:
        await accepted.aclose()
        await client.aclose()
        await listeners[0].aclose()


def test_hypercorn_trio_connections_write_with_it() -> None:
    lean_socket_send()
    lean_socket_send()  # a second call changes nothing
    assert TCPServer.protocol_send is lean_protocol_send  # type: ignore[comparison-overlap]


async def test_bytes_the_socket_takes_leave_without_a_checkpoint(
    pair: tuple[TCPServer, trio.SocketStream],
) -> None:
    server, client = pair
    with trio.CancelScope() as cancelled:
        cancelled.cancel()
        await server.protocol_send(RawData(data=b"HTTP/1.1 200 OK\r\n\r\n"))
    # Stock Hypercorn's lock would have raised Cancelled before writing anything.
    assert not cancelled.cancelled_caught
    assert await client.receive_some() == b"HTTP/1.1 200 OK\r\n\r\n"


async def test_the_rest_follows_in_order_even_from_a_cancelled_scope(
    pair: tuple[TCPServer, trio.SocketStream],
) -> None:
    server, client = pair
    # A send buffer far smaller than the write (Trio's TCP_NOTSENT_LOWAT, 16 KiB, must
    # fit in it, or the socket never reports room again).
    server.stream.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    big = b"".join(struct.pack(">I", i) for i in range(500_000))  # 2 MB, position-coded
    ended: dict[str, bool] = {}

    async def first() -> None:
        with trio.CancelScope() as scope:
            scope.cancel()  # cancelled before it starts: what leaves must still be whole
            await server.protocol_send(RawData(data=big))
        ended["first cancelled"] = scope.cancelled_caught

    async def second() -> None:
        await server.protocol_send(RawData(data=b"<next response>"))
        ended["second"] = True

    received = bytearray()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.testing.wait_all_tasks_blocked()  # the first waits for room, locked
        assert server.send_lock.locked()
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(30):
            while len(received) < len(big) + len(b"<next response>"):
                received += await client.receive_some(65536)
    assert bytes(received) == big + b"<next response>"
    assert ended == {"first cancelled": False, "second": True}


async def test_a_reset_connection_is_reported_closed(
    pair: tuple[TCPServer, trio.SocketStream],
) -> None:
    server, client = pair
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await client.aclose()  # linger 0: the peer resets the connection
    events: list[Any] = server.protocol.events  # type: ignore[attr-defined]
    with trio.fail_after(10):
        while not events:  # the reset may take a moment to arrive
            await server.protocol_send(RawData(data=b"x" * 1000))
            await trio.sleep(0.01)
    assert [type(e) for e in events] == [Closed]
