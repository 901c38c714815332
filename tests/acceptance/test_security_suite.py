"""Attacks beyond tokens: slow clients (SQL injection through every string parameter
and newline injection into SSE fields: tests/smoke/test_security_suite.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import trio

from tests.acceptance.test_bff import STAFF
from tests.helpers import bearer


async def test_slow_clients_are_cut_off_without_starving_others(
    bff: str, http: httpx.AsyncClient, spawn_worker: Callable[..., Any]
) -> None:
    await spawn_worker()
    host, port = bff.removeprefix("http://").split(":")
    closed_at: list[float] = []
    trickling = 0
    all_trickling = trio.Event()

    async def trickler() -> None:
        nonlocal trickling
        stream = await trio.open_tcp_stream(host, int(port))
        head = (
            "POST /api/probe/q HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {STAFF}\r\nContent-Length: 1000\r\n\r\n"
        )
        await stream.send_all(head.encode())
        trickling += 1
        if trickling == 20:
            all_trickling.set()
        started = trio.current_time()
        answer = b""
        with trio.move_on_after(30):
            try:
                for _ in range(1000):
                    await stream.send_all(b" ")
                    with trio.move_on_after(0.5):
                        answer += await stream.receive_some(4096)
                    if answer.startswith(b"HTTP/1.1 "):
                        break
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        closed_at.append(trio.current_time() - started)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(trickler)
        with trio.fail_after(10):
            await all_trickling.wait()  # every trickler holds a request open
        for i in range(20):  # everyone else is served promptly meanwhile
            with trio.fail_after(5):
                resp = await http.post(
                    "/api/probe/q",
                    json={"operation": "echo", "params": {"value": i}},
                    headers=bearer(STAFF),
                )
                assert resp.status_code == 202
    assert len(closed_at) == 20
    assert max(closed_at) < 15, closed_at  # the body timeout (10 s) cut them off
