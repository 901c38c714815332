"""The socket writes a response takes, on a real BFF (Hypercorn, in this process).

Every write Hypercorn's TCP servers make is recorded on its way to the socket (the
real one installed before still writes it). A sized answer is
one write; an event stream whose first event is ready leaves its head with that
event, and its last event with the body's end (``edge.cork_next_write``): a stream of
a finished job is one write, of a pending one two. A resumed stream (``Last-Event-ID``
past ``queued``) has no event ready: its head leaves at once, alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio
from hypercorn.events import RawData
from hypercorn.trio import tcp_server

from dataplane.compat.hypercorn import DeferredContinueH11Protocol
from dataplane.queue import QueueClient
from tests.acceptance.test_bff import post
from tests.conftest import wait_until
from tests.helpers import complete, read_sse

WORKER = "test-edge-writes"


@pytest.fixture
async def writes(bff: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[bytes]]:
    """The bytes of every socket write the BFF makes from now on, in order, with
    ``corking`` on (what these tests measure; DATAPLANE_STOCK_STACK may leave it out)."""
    monkeypatch.setattr(DeferredContinueH11Protocol, "corking", True)
    send = tcp_server.TCPServer.protocol_send
    recorded: list[bytes] = []

    async def recording(server: Any, event: Any) -> None:
        if isinstance(event, RawData):
            recorded.append(bytes(event.data))
        await send(server, event)

    monkeypatch.setattr(tcp_server.TCPServer, "protocol_send", recording)
    yield recorded


async def finish(queue: QueueClient, job_id: str) -> None:
    """Claim the (only) pending probe job and complete it, as a worker would."""
    [job] = await queue.claim("surface-probe", WORKER)
    assert str(job.id) == job_id
    await complete(queue, job, {"data": {"echo": "written"}})


async def test_a_sized_answer_is_one_write(http: httpx.AsyncClient, writes: list[bytes]) -> None:
    resp = await post(http, "probe", "echo", {"value": "one write"})
    assert resp.status_code == 202
    [written] = writes
    assert written.startswith(b"HTTP/1.1 202 ") and written.endswith(resp.content)


async def test_the_stream_of_a_finished_job_is_one_write(
    http: httpx.AsyncClient, writes: list[bytes], queue: QueueClient
) -> None:
    body = (await post(http, "probe", "echo", {"value": "finished"})).json()
    await finish(queue, body["jobId"])
    writes.clear()
    status, _, events = await read_sse(http, body["streamUrl"])
    assert status == 200 and [e.name for e in events] == ["done"]
    [written] = writes
    assert written.startswith(b"HTTP/1.1 200 ")
    assert b"event: done\n" in written and written.endswith(b"\r\n0\r\n\r\n")


async def test_the_stream_of_a_pending_job_is_two_writes(
    http: httpx.AsyncClient, writes: list[bytes], queue: QueueClient
) -> None:
    body = (await post(http, "probe", "echo", {"value": "pending"})).json()
    writes.clear()
    async with trio.open_nursery() as nursery:
        streamed: list[Any] = []

        async def stream() -> None:
            streamed.append(await read_sse(http, body["streamUrl"]))

        nursery.start_soon(stream)
        await wait_until(lambda: bool(writes), within=10)
        [first] = writes  # the head and the queued event, while the job waits
        assert first.startswith(b"HTTP/1.1 200 ") and b"event: queued\n" in first
        await finish(queue, body["jobId"])
    [(status, _, events)] = streamed
    assert status == 200 and [e.name for e in events] == ["queued", "done"]
    assert len(writes) == 2, writes
    assert b"event: done\n" in writes[1]
    assert writes[1].endswith(b"\r\n0\r\n\r\n")  # the body's end, in the same write


async def test_a_resumed_stream_sends_its_head_at_once(
    http: httpx.AsyncClient, writes: list[bytes], queue: QueueClient
) -> None:
    body = (await post(http, "probe", "echo", {"value": "resumed"})).json()
    writes.clear()
    async with http.stream("GET", body["streamUrl"], headers={"Last-Event-ID": "1"}) as resp:
        # The head arrived while the job is still pending: it was not held.
        assert resp.status_code == 200
        assert [w.split(b"\r\n", 1)[0] for w in writes] == [b"HTTP/1.1 200 "]
        assert b"event:" not in writes[0]
        await finish(queue, body["jobId"])
        text = (await resp.aread()).decode()
    assert "event: done" in text and "event: queued" not in text
    assert len(writes) == 2 and writes[1].endswith(b"\r\n0\r\n\r\n")


async def test_without_corking_the_head_and_the_body_are_written_apart(
    http: httpx.AsyncClient, writes: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DATAPLANE_STOCK_STACK=corking leaves the joining out: the stock path's writes."""
    monkeypatch.setattr(DeferredContinueH11Protocol, "corking", False)
    resp = await post(http, "probe", "echo", {"value": "two writes"})
    assert resp.status_code == 202
    head, *rest = writes
    assert head.startswith(b"HTTP/1.1 202 ") and not head.endswith(resp.content)
    assert b"".join(rest).endswith(resp.content)
