"""Progress events end to end: a real BFF, a real worker, ``probe.progress``.

* A stream gets ``queued``, each progress the handler reported (done/total, message,
  partial; no event id), then ``done``.
* A handler that reports faster than five a second reaches its stream at most five
  times a second, in order, the latest winning.
* A stream that connects late, or reconnects with ``Last-Event-ID``, gets the kept
  progress first, and a poll's 202 carries it; ``Prefer: wait`` answers with the
  result alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import trio

from dataplane.queue import QueueClient
from tests.acceptance.test_bff import post
from tests.conftest import wait_until
from tests.helpers import bearer, read_sse, token

USER = token(sub="alice", branches=["acme-north"])


async def _stream(http: httpx.AsyncClient, url: str, **headers: str) -> list[Any]:
    with trio.fail_after(30):
        status, _, events = await read_sse(http, url, headers)
    assert status == 200
    return events


async def test_a_stream_gets_each_progress_then_the_answer(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any]
) -> None:
    await spawn_worker()
    body = (await post(http, "probe", "progress", {"steps": 4, "ms": 350}, USER)).json()
    events = await _stream(http, body["streamUrl"])
    names = [e.name for e in events]
    assert names == ["queued", "progress", "progress", "progress", "progress", "done"], names
    progress = [e.json for e in events if e.name == "progress"]
    assert [p["done"] for p in progress] == [1, 2, 3, 4]
    assert [p["seq"] for p in progress] == [1, 2, 3, 4]
    assert all(p["total"] == 4 and p["attempt"] == 1 for p in progress)
    assert progress[1]["fraction"] == 0.5 and progress[1]["message"] == "step 2 of 4"
    assert progress[3]["partial"] == {"step": 4} and progress[0]["jobId"] == body["jobId"]
    assert all("id" not in e for e in events if e.name == "progress")
    assert events[-1].json["result"] == {"steps": 4}


async def test_a_fast_reporter_reaches_its_stream_at_most_five_times_a_second(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any]
) -> None:
    await spawn_worker()
    # 60 reports 25 ms apart: 1.5 s of reporting at 40 a second.
    params = {"steps": 60, "ms": 25}
    body = (await post(http, "probe", "progress", params, USER)).json()
    started = trio.current_time()
    events = await _stream(http, body["streamUrl"])
    elapsed = trio.current_time() - started
    seqs = [e.json["seq"] for e in events if e.name == "progress"]
    assert events[-1].name == "done"
    assert seqs == sorted(set(seqs)), seqs  # in order, none twice
    assert 2 <= len(seqs) <= 5 * elapsed + 2, (seqs, elapsed)
    assert len(seqs) < 30  # most reports were superseded, not queued


async def test_a_late_or_reconnecting_stream_gets_the_kept_progress_first(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any], queue: QueueClient
) -> None:
    await spawn_worker()
    body = (await post(http, "probe", "progress", {"steps": 2, "ms": 2500}, USER)).json()

    await wait_until(lambda: _has_progress(queue, body["jobId"]), within=20)
    polled = await http.get(body["pollUrl"])
    assert polled.status_code == 202 and polled.json()["progress"]["seq"] >= 1, polled.text
    assert polled.json()["progress"]["total"] == 2
    late = await _stream(http, body["streamUrl"])
    assert [e.name for e in late][:2] == ["queued", "progress"]
    assert late[1].json["seq"] >= 1
    assert late[-1].name == "done"

    # A reconnect after `queued` (Last-Event-ID 1) of a running job: progress first.
    again = (
        await post(http, "probe", "progress", {"steps": 2, "ms": 2500, "nonce": "b"}, USER)
    ).json()
    await wait_until(lambda: _has_progress(queue, again["jobId"]), within=20)
    resumed = await _stream(http, again["streamUrl"], **{"Last-Event-ID": "1"})
    assert resumed[0].name == "progress" and resumed[-1].name == "done"


async def _has_progress(queue: QueueClient, job_id: str) -> bool:
    row = await queue.get(job_id)
    return row is not None and row.progress is not None


async def test_prefer_wait_answers_with_the_result_alone(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any]
) -> None:
    await spawn_worker()
    resp = await http.post(
        "/api/probe/q",
        json={"operation": "progress", "params": {"steps": 3, "ms": 250}},
        headers={**bearer(USER), "Prefer": "wait=20"},
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["result"] == {"steps": 3}
    assert "progress" not in resp.json()
