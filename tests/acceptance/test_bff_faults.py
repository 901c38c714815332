"""The reply pump under faults: LISTEN killed, deadlines, disconnects (poison:
tests/smoke/test_bff_faults.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio

from dataplane.bff.plane import BffServices
from dataplane.db import Database
from tests.acceptance.test_bff import STAFF, poll_until_done, post
from tests.conftest import wait_until
from tests.helpers import SseEvent, read_sse
from tests.real_plane import start_bff


def plane_of(app: Any) -> BffServices:
    plane = app.extensions["dataplane"].services
    assert plane is not None
    return plane  # type: ignore[no-any-return]


async def test_killed_listen_connection_still_answers_every_stream(
    bff_env: dict[str, str],
    nursery: trio.Nursery,
    db: Database,
    spawn_worker: Callable[..., Any],
) -> None:
    base, app, shutdown = await start_bff(nursery)
    plane = plane_of(app)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        bodies = [(await post(http, "probe", "sleep", {"ms": 500 + i})).json() for i in range(20)]
        finals: list[SseEvent] = []

        async def listen(url: str) -> None:
            _, _, events = await read_sse(http, url)
            finals.append(events[-1])

        async with trio.open_nursery() as streams:
            for body in bodies:
                streams.start_soon(listen, body["streamUrl"])
            await wait_until(lambda: plane.pump.statistics().waiters == 20, within=10)
            pid = plane.pump.listener.backend_pid()
            await db.fetchone("SELECT pg_terminate_backend(%(pid)s)", {"pid": pid})
            await spawn_worker()  # the jobs finish while the pump is reconnecting (2 s)
            with trio.fail_after(2 + 1 + 5):  # reconnect delay + sweep cadence + slack
                await wait_until(lambda: len(finals) == 20, within=30)
        assert all(e.name == "done" for e in finals)
        # The sweep may answer everyone before the listener is back; it does come back.
        await wait_until(lambda: plane.pump.listener.statistics().reconnects >= 1, within=10)
    shutdown.set()


async def test_deadline_gives_timeout_and_the_job_keeps_running(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    spawn_worker: Callable[..., Any],
) -> None:
    monkeypatch.setenv("DATAPLANE_SSE_DEADLINE_SECONDS", "0.5")
    base, _app, shutdown = await start_bff(nursery)
    await spawn_worker()
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        body = (await post(http, "probe", "sleep", {"ms": 1500})).json()
        _, _, events = await read_sse(http, body["streamUrl"])
        assert [e.name for e in events] == ["queued", "error"]
        assert events[-1].json["code"] == "TIMEOUT"
        assert events[-1]["id"] == "2"
        answer = await poll_until_done(http, body["pollUrl"])
        assert answer["result"] == {"slept_ms": 1500}
        # Reconnecting the stream (as EventSource does, with Last-Event-ID) gets the answer.
        _, _, again = await read_sse(http, body["streamUrl"], {"Last-Event-ID": "2"})
        assert [e.name for e in again] == ["done"]
        assert again[0].json == answer
        # And once the final event was seen, a reconnect is told to stop.
        status, _, _ = await read_sse(http, body["streamUrl"], {"Last-Event-ID": "3"})
        assert status == 204
    shutdown.set()


async def test_a_browser_disconnect_drops_only_its_waiter(
    bff_env: dict[str, str], nursery: trio.Nursery, spawn_worker: Callable[..., Any]
) -> None:
    base, app, shutdown = await start_bff(nursery)
    plane = plane_of(app)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        body = (await post(http, "probe", "sleep", {"ms": 800})).json()
        stayer_events: list[SseEvent] = []

        async def stayer() -> None:
            _, _, events = await read_sse(http, body["streamUrl"])
            stayer_events.extend(events)

        async with trio.open_nursery() as streams:
            streams.start_soon(stayer)
            with trio.move_on_after(0.5):
                await read_sse(http, body["streamUrl"])  # a browser that goes away
            await wait_until(lambda: plane.pump.statistics().waiters == 1, within=5)
            await spawn_worker()
        assert stayer_events[-1].name == "done"
        assert plane.pump.statistics().waiters == 0
        answer = await poll_until_done(http, body["pollUrl"])
        assert answer["result"] == {"slept_ms": 800}
    shutdown.set()


async def test_keep_alive_comments_flow_while_waiting(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    spawn_worker: Callable[..., Any],
) -> None:
    import dataplane.bff.reply.sse as sse_module

    monkeypatch.setattr(sse_module, "KEEPALIVE_SECONDS", 0.2)
    base, _app, shutdown = await start_bff(nursery)
    await spawn_worker()
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        body = (await post(http, "probe", "sleep", {"ms": 1000}, STAFF)).json()
        _, _, events = await read_sse(http, body["streamUrl"])
        comments = [c for e in events for c in e.get("comments", [])]
        assert comments.count("keep-alive") >= 2
        assert events[-1].name == "done"
    shutdown.set()
