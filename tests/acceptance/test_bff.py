"""The BFF over real HTTP (Hypercorn), with real worker processes and Postgres."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import trio

from dataplane.queue import QueueClient
from tests.conftest import wait_until
from tests.helpers import SseEvent, bearer, read_sse, token

STAFF = token(staff=True, sub="boss")
NORTH = token(sub="n1", branches=["acme-north"])


async def post(
    http: httpx.AsyncClient, surface: str, operation: str, params: Any, tok: str = STAFF
) -> httpx.Response:
    return await http.post(
        f"/api/{surface}/q", json={"operation": operation, "params": params}, headers=bearer(tok)
    )


async def poll_until_done(http: httpx.AsyncClient, url: str, within: float = 20) -> Any:
    answers: list[Any] = []

    async def done() -> bool:
        resp = await http.get(url)
        if resp.status_code == 200:
            answers.append(resp.json())
        return resp.status_code == 200

    await wait_until(done, within=within, interval=0.02)
    return answers[0]


async def test_poll_answers_202_while_live_and_blob_fallback(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any], queue: QueueClient
) -> None:
    resp = await post(http, "probe", "large", {"bytes": 300_000})
    body = resp.json()
    live = await http.get(body["pollUrl"])
    assert live.status_code == 202 and live.json() == {"jobId": body["jobId"], "status": "pending"}
    assert "Retry-After" in live.headers
    await spawn_worker()
    answer = await poll_until_done(http, body["pollUrl"])
    ref = answer["blobRef"]
    assert ref["contentType"] == "application/json" and ref["size"] > 300_000
    blob = await http.get(ref["url"])
    assert blob.status_code == 200
    assert blob.headers["content-type"].startswith("application/json")
    assert int(blob.headers["content-length"]) == ref["size"] == len(blob.content)
    assert blob.json()["filler"] == "x" * 300_000


async def test_a_job_done_before_the_stream_opens_answers_at_once(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any]
) -> None:
    await spawn_worker()
    body = (await post(http, "probe", "echo", {"value": 1})).json()
    await poll_until_done(http, body["pollUrl"])
    status, _, events = await read_sse(http, body["streamUrl"])
    assert status == 200
    assert [e.name for e in events] == ["done"]  # no "queued": it was already done


async def test_identical_concurrent_posts_share_one_job(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any], queue: QueueClient
) -> None:
    n = 200
    bodies: list[dict[str, Any]] = []

    async def one() -> None:
        r = await post(http, "probe", "sleep", {"ms": 300})
        assert r.status_code == 202, r.text
        bodies.append(r.json())

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(one)
    assert len({b["jobId"] for b in bodies}) == 1
    assert sum(not b["coalesced"] for b in bodies) == 1
    await spawn_worker()
    finals: list[SseEvent] = []

    async def listen(url: str) -> None:
        _, _, events = await read_sse(http, url)
        finals.append(events[-1])

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for b in bodies:
                nursery.start_soon(listen, b["streamUrl"])
    assert len(finals) == n and all(e.name == "done" for e in finals)
    rows = await queue.list_jobs()
    assert len(rows) == 1 and rows[0].dequeue_count == 1  # one execution
