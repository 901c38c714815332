"""Queue failure paths through the real BFF and real worker processes: backpressure,
and cancellation by the requester."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio

from dataplane.queue import QueueClient
from tests.acceptance.test_bff import poll_until_done, post
from tests.helpers import read_sse, token
from tests.real_plane import start_bff


async def test_a_full_queue_pushes_back_with_retry_after(
    bff_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery
) -> None:
    monkeypatch.setenv("DATAPLANE_MAX_LIVE_JOBS", "4")
    monkeypatch.setenv("DATAPLANE_MAX_LIVE_PER_CLIENT", "3")
    base, _app, shutdown = await start_bff(nursery)
    other = token("globex", staff=True, sub="g1")
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:  # no worker runs
        for i in range(3):
            assert (await post(http, "probe", "echo", {"value": i})).status_code == 202
        over_share = await post(http, "probe", "echo", {"value": 3})
        assert over_share.status_code == 429 and int(over_share.headers["Retry-After"]) > 0
        assert over_share.json()["error"]["code"] == "TOO_MANY_REQUESTS"
        # Another client still has room, until the type itself is full.
        assert (await post(http, "probe", "echo", {"value": "g"}, other)).status_code == 202
        full = await post(http, "probe", "echo", {"value": "g2"}, other)
        assert full.status_code == 503 and int(full.headers["Retry-After"]) > 0
        assert "live jobs" in full.json()["error"]["message"]
        # Attaching to a live job adds no row: it is still accepted.
        same = await post(http, "probe", "echo", {"value": 0})
        assert same.status_code == 202 and same.json()["coalesced"]
    shutdown.set()


async def test_cancel_a_pending_job_ends_its_stream_and_it_never_runs(
    bff_env: dict[str, str],
    nursery: trio.Nursery,
    queue: QueueClient,
    spawn_worker: Callable[..., Any],
) -> None:
    base, _app, shutdown = await start_bff(nursery)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:  # no worker yet
        body = (await post(http, "probe", "echo", {"value": "never"})).json()
        async with trio.open_nursery() as streams:
            finals: list[Any] = []

            async def listen() -> None:
                _, _, events = await read_sse(http, body["streamUrl"])
                finals.append(events[-1])

            streams.start_soon(listen)
            cancelled = await http.delete(body["pollUrl"])
            assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        assert finals[0].name == "error" and finals[0].json["code"] == "CANCELLED"
        again = await http.delete(body["pollUrl"])
        assert again.status_code == 409
        await spawn_worker()
        probe = (await post(http, "probe", "echo", {"value": "after"})).json()
        await poll_until_done(http, probe["pollUrl"])  # the worker is up and serving
        row = await queue.get(body["jobId"])
        assert row is not None and row.status == "cancelled" and row.dequeue_count == 0
        answer = (await http.get(body["pollUrl"])).json()
        assert answer["status"] == "cancelled" and answer["error"]["code"] == "CANCELLED"
    shutdown.set()
