"""A waiting caller learns that an attempt failed: a real BFF, real workers, ``probe.fail``.

* A stream hears a ``retry`` event (no event id) for each failed attempt the job will
  be tried again after, with the attempt, the budget, the error as a POISON answer
  shows it and when the next try is due, then the answer: carried sealed in the notify
  (the worker holds the notify secret) or read from the row (it does not).
* A stream that connects or reconnects while the job waits out its backoff gets that
  state first, from the row, and a poll's 202 carries it (``retry``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import httpx
import pytest
import trio

from dataplane.queue import QueueClient
from tests.acceptance.test_bff import post
from tests.conftest import wait_until
from tests.helpers import SseEvent, read_sse, token

USER = token(sub="alice", branches=["acme-north"])


async def _stream(
    http: httpx.AsyncClient, url: str, headers: Mapping[str, str] | None = None
) -> list[SseEvent]:
    with trio.fail_after(30):
        status, _, events = await read_sse(http, url, headers)
    assert status == 200
    return events


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed-note", "row-read"])
async def test_a_stream_hears_each_failed_attempt_then_the_answer(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any], sealed: bool
) -> None:
    env = {"DATAPLANE_FAIL_BACKOFF_SECONDS": "1"}
    if not sealed:  # its retry notifies name the job alone: the BFF reads the row
        env["DATAPLANE_NOTIFY_SECRET"] = ""
    await spawn_worker(**env)
    params = {"times": 2, "nonce": f"stream-{sealed}"}
    body = (await post(http, "probe", "fail", params, USER)).json()
    events = await _stream(http, body["streamUrl"])
    assert [e.name for e in events] == ["queued", "retry", "retry", "done"], events
    retries = [e.json for e in events if e.name == "retry"]
    assert [r["attempt"] for r in retries] == [1, 2]
    for retry in retries:
        assert retry["jobId"] == body["jobId"] and retry["maxAttempts"] == 5
        assert retry["error"] == f"ProbeFailure: probe.fail: attempt {retry['attempt']} of 2"
        assert 0 < retry["retryInMs"] <= 1000, retry
        assert datetime.fromisoformat(retry["retryAt"]).tzinfo is not None
    assert all("id" not in e for e in events if e.name == "retry")  # Last-Event-ID stays 1
    assert events[-1].json["result"] == {"succeeded_on_attempt": 3}


async def test_a_stream_that_connects_while_the_job_waits_gets_the_failed_attempt_first(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any], queue: QueueClient
) -> None:
    await spawn_worker(DATAPLANE_FAIL_BACKOFF_SECONDS="4")
    body = (await post(http, "probe", "fail", {"times": 1, "nonce": "late"}, USER)).json()

    async def waits_out_a_failure() -> bool:
        row = await queue.get(body["jobId"])
        return row is not None and row.status == "pending" and row.dequeue_count == 1

    await wait_until(waits_out_a_failure, within=20)
    row = await queue.get(body["jobId"])
    assert row is not None
    polled = await http.get(body["pollUrl"])
    assert polled.status_code == 202, polled.text
    retry = polled.json()["retry"]
    assert retry["jobId"] == body["jobId"] and retry["attempt"] == 1, retry
    assert retry["maxAttempts"] == 5
    assert retry["error"] == "ProbeFailure: probe.fail: attempt 1 of 1"
    assert datetime.fromisoformat(retry["retryAt"]) == row.available_at
    assert 0 < retry["retryInMs"] <= 4000

    # A stream opened now, and one reconnecting after `queued`, while the job waits.
    late: list[SseEvent] = []
    resumed: list[SseEvent] = []

    async def collect(into: list[SseEvent], headers: Mapping[str, str]) -> None:
        into.extend(await _stream(http, body["streamUrl"], headers))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(collect, late, {})
        nursery.start_soon(collect, resumed, {"Last-Event-ID": "1"})
    assert [e.name for e in late] == ["queued", "retry", "done"], late
    assert [e.name for e in resumed] == ["retry", "done"], resumed
    for first in (late[1].json, resumed[0].json):
        assert first["attempt"] == 1 and first["retryAt"] == retry["retryAt"], first
    assert late[-1].json["result"] == {"succeeded_on_attempt": 2}
