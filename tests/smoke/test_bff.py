"""The BFF over real HTTP (Hypercorn) with a real worker process: POST, then SSE ``done``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.acceptance.test_bff import post
from tests.helpers import read_sse


async def test_echo_post_202_then_sse_done(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any]
) -> None:
    await spawn_worker()
    resp = await post(http, "probe", "echo", {"value": {"hello": "wörld"}})
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert set(body) == {"jobId", "streamUrl", "pollUrl", "coalesced"}
    assert body["coalesced"] is False
    assert resp.headers["Location"] == body["pollUrl"]
    assert int(resp.headers["Retry-After"]) >= 1
    status, headers, events = await read_sse(http, body["streamUrl"])
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache" and headers["x-accel-buffering"] == "no"
    assert events[-1].name == "done"
    done = events[-1].json
    assert done["jobId"] == body["jobId"] and done["status"] == "done"
    assert done["result"] == {"echo": {"hello": "wörld"}, "client": "acme"}
    assert done["cache"] == "bypass" and done["coalesced"] is False
    assert all("id" in e for e in events)
    assert "retry" in events[0]

    poll = await http.get(body["pollUrl"])
    assert poll.status_code == 200 and poll.json() == done
