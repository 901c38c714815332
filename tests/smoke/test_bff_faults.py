"""The reply pump under a fault: poison is reported at once, not at the deadline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio

from tests.acceptance.test_bff import post
from tests.helpers import read_sse
from tests.real_plane import start_bff


async def test_poison_is_reported_at_once(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    spawn_worker: Callable[..., Any],
) -> None:
    monkeypatch.setenv("DATAPLANE_MAX_DEQUEUES", "1")
    base, _app, shutdown = await start_bff(nursery)
    await spawn_worker()
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        body = (await post(http, "probe", "fail", {"times": 5})).json()
        started = trio.current_time()
        _, _, events = await read_sse(http, body["streamUrl"])
        assert events[-1].name == "error"
        assert events[-1].json["code"] == "POISON" and "ProbeFailure" in events[-1].json["message"]
        assert trio.current_time() - started < 10  # not the 60 s deadline
        poll = await http.get(body["pollUrl"])
        assert poll.status_code == 200 and poll.json()["status"] == "poison"
    shutdown.set()
