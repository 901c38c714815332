"""Abort and cancel say and do the same thing (issue 55), through a real BFF and real
worker processes running ``probe.sleep``.

* The DELETE of a running job's last requester stops it within a second, measured from
  the DELETE: its stream ends ``CANCELLED`` saying the requesters cancelled it while it
  ran, the worker counts the attempt ``cancelled``, its one slot takes the next job, and
  the job never ends ``done``.
* A browser that goes away mid-job withdraws nobody: the job runs to ``done``.
* Of two requesters, the first to withdraw leaves the job running for the other (who gets
  its answer); when both withdraw, it stops.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
import trio

from dataplane.dev.embedded import free_port
from dataplane.queue import QueueClient
from tests.acceptance.test_bff import poll_until_done, post
from tests.conftest import wait_until
from tests.helpers import SseEvent, WorkerProcess, read_sse, token

ALICE = token(staff=True, sub="alice")
BOB = token(staff=True, sub="bob")
STOPPED_WITHIN = 1.0  # seconds from the DELETE to the handler stopped and its slot free


async def _status(queue: QueueClient, job_id: str) -> str | None:
    row = await queue.get(job_id)
    return row.status if row is not None else None


async def _running(queue: QueueClient, job_id: str) -> None:
    async def running() -> bool:
        return await _status(queue, job_id) == "in_progress"

    await wait_until(running, within=20)


def _attempts(scrape: str, outcome: str) -> float:
    """``dataplane_jobs_total`` of this outcome, summed over operations, in a scrape."""
    found = re.findall(
        r'^dataplane_jobs_total\{[^}]*dataplane_outcome="' + outcome + r'"[^}]*\} (\S+)$',
        scrape,
        re.M,
    )
    return sum(float(n) for n in found)


class Stream:
    """A job's event stream read in the background: its events, and when it ended."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http, self.url = http, url
        self.events: list[SseEvent] = []
        self.ended = trio.Event()

    async def read(self) -> None:
        _, _, events = await read_sse(self.http, self.url)
        self.events.extend(events)
        self.ended.set()

    @property
    def final(self) -> SseEvent:
        assert self.ended.is_set() and self.events, self.events
        return self.events[-1]


async def test_a_delete_stops_a_running_job_within_a_second_and_frees_its_slot(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any], queue: QueueClient
) -> None:
    port = free_port()
    worker: WorkerProcess = await spawn_worker(
        DATAPLANE_CONCURRENCY="1", DATAPLANE_METRICS="1", DATAPLANE_METRICS_PORT=str(port)
    )
    metrics = f"http://127.0.0.1:{port}/metrics"
    job = (await post(http, "probe", "sleep", {"ms": 30_000}, ALICE)).json()
    stream = Stream(http, job["streamUrl"])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream.read)
        await _running(queue, job["jobId"])
        queued = (await post(http, "probe", "echo", {"value": "next"}, ALICE)).json()
        assert await _status(queue, queued["jobId"]) == "pending"  # the one slot is taken

        async def stopped() -> bool:
            return _attempts((await http.get(metrics)).text, "cancelled") == 1

        async def next_answered() -> bool:
            return await _status(queue, queued["jobId"]) == "done"

        started = trio.current_time()
        withdrawn = await http.delete(job["pollUrl"])
        with trio.fail_after(STOPPED_WITHIN):
            await stream.ended.wait()
            await wait_until(stopped, within=STOPPED_WITHIN)
            await wait_until(next_answered, within=STOPPED_WITHIN)
        took = trio.current_time() - started
    assert took < STOPPED_WITHIN, took
    assert withdrawn.status_code == 200, withdrawn.text
    body = withdrawn.json()
    assert (body["status"], body["cancellation"]["by"]) == ("cancelled", "requesters")
    assert body["cancellation"]["whileRunning"] is True
    final = stream.final
    assert (final.name, final.json["code"], final.json["jobId"]) == (
        "error",
        "CANCELLED",
        job["jobId"],
    )
    assert final.json["message"].startswith(
        "the job was cancelled by its requesters (every one withdrew) while it ran, at "
    )
    assert final.json["cancellation"] == body["cancellation"]
    assert "cancelled by its requesters; cancelling its handler" in worker.output()
    scrape = (await http.get(metrics)).text
    assert _attempts(scrape, "done") == 1  # the echo; the sleep never finished
    assert await _status(queue, job["jobId"]) == "cancelled"
    polled = await http.get(job["pollUrl"])
    assert polled.status_code == 200  # the poll's answer says what the stream said
    assert {"jobId": job["jobId"], **polled.json()["error"]} == final.json
    again = await http.delete(job["pollUrl"])  # finished: nothing left to withdraw from
    assert again.status_code == 409 and "cancelled" in again.json()["error"]["message"]


async def test_a_disconnect_mid_job_withdraws_nobody_and_the_job_runs_to_done(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any], queue: QueueClient
) -> None:
    """The seed's rule: a browser's disconnect never cancels work (nor does a stream's
    TIMEOUT: tests/acceptance/test_bff_faults.py); only an explicit withdrawal does."""
    worker: WorkerProcess = await spawn_worker()
    job = (await post(http, "probe", "sleep", {"ms": 1500}, ALICE)).json()
    async with http.stream("GET", job["streamUrl"]) as resp:  # a browser that goes away
        assert resp.status_code == 200
        await _running(queue, job["jobId"])
    # Closed mid-job, the stream unread: its connection is gone (the BFF notes `disconnect`).
    answer = await poll_until_done(http, job["pollUrl"])
    assert (answer["status"], answer["result"]) == ("done", {"slept_ms": 1500})
    row = await queue.get(job["jobId"])
    assert row is not None and row.status == "done" and row.cancellation is None
    assert "cancelling its handler" not in worker.output()


async def test_one_of_two_requesters_withdraws_and_the_job_runs_on_both_and_it_stops(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any], queue: QueueClient
) -> None:
    worker: WorkerProcess = await spawn_worker()
    # One withdraws mid-run: the job runs on, and the other gets its answer.
    hers = (await post(http, "probe", "sleep", {"ms": 1500}, ALICE)).json()
    his = (await post(http, "probe", "sleep", {"ms": 1500}, BOB)).json()
    assert his["coalesced"] and his["jobId"] == hers["jobId"]
    await _running(queue, hers["jobId"])
    withdrawn = await http.delete(hers["pollUrl"])
    assert withdrawn.status_code == 202, withdrawn.text
    assert withdrawn.json() == {"jobId": hers["jobId"], "status": "in_progress", "requesters": 1}
    with trio.fail_after(20):
        _, _, events = await read_sse(http, his["streamUrl"])
    assert events[-1].name == "done" and events[-1].json["result"] == {"slept_ms": 1500}

    # Both withdraw: it stops, and the stream of each says the requesters cancelled it.
    hers = (await post(http, "probe", "sleep", {"ms": 30_000}, ALICE)).json()
    his = (await post(http, "probe", "sleep", {"ms": 30_000}, BOB)).json()
    assert his["jobId"] == hers["jobId"]
    stream = Stream(http, his["streamUrl"])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream.read)
        await _running(queue, hers["jobId"])
        first = await http.delete(hers["pollUrl"])
        assert first.status_code == 202 and first.json()["requesters"] == 1
        assert await _status(queue, hers["jobId"]) == "in_progress"
        started = trio.current_time()
        last = await http.delete(his["pollUrl"])
        with trio.fail_after(STOPPED_WITHIN):
            await stream.ended.wait()
            await wait_until(lambda: "cancelling its handler" in worker.output(), within=1)
        assert trio.current_time() - started < STOPPED_WITHIN
    assert last.status_code == 200 and last.json()["cancellation"]["whileRunning"] is True
    assert stream.final.json["code"] == "CANCELLED"
    assert stream.final.json["cancellation"]["by"] == "requesters"
    assert await _status(queue, hers["jobId"]) == "cancelled"
