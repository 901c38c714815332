"""An operator cancels a running job (issue #41), end to end: a real worker process
running ``probe.sleep`` for 20 s, a real BFF streaming its answer.

* The stream ends ``error`` ``CANCELLED`` within 2 s of the cancel (long before the
  lease's renewal would have noticed), naming the operator and saying it ran (as the
  poll's 200 and a waiting ``Prefer: wait`` POST's 200 do), the row is ``cancelled``,
  the worker logs that it cancelled the handler, and serves the next job.
* A forged cancel notify (anyone who may connect may NOTIFY) of a running job whose
  row is not cancelled changes nothing: the job finishes ``done``.
* A pending job cancelled is never run; a finished job's cancel is a conflict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio

from dataplane.db import Database
from dataplane.operator import Conflict, Operator, cancel, list_audit
from dataplane.queue import QueueClient, QueueType
from tests.acceptance.test_bff import post
from tests.conftest import wait_until
from tests.helpers import bearer, read_sse, token

USER = token(sub="alice", branches=["acme-north"])
OPS = Operator("ops@acme.example", "console")
T = "surface-probe"


async def _status(queue: QueueClient, job_id: str) -> str | None:
    row = await queue.get(job_id)
    return row.status if row is not None else None


async def _running(queue: QueueClient, job_id: str) -> bool:
    return await _status(queue, job_id) == "in_progress"


async def _attached(db: Database, job_id: str) -> bool:
    """Whether a second request attached to the job (two requests counted on it)."""
    row = await db.fetchone(
        "SELECT requesters FROM maestro_queues WHERE id = %(id)s", {"id": job_id}
    )
    return row is not None and row["requesters"] == 2


async def _echo_answered(http: httpx.AsyncClient, value: str) -> None:
    body = (await post(http, "probe", "echo", {"value": value}, USER)).json()
    with trio.fail_after(20):
        _, _, events = await read_sse(http, body["streamUrl"])
    assert events[-1].name == "done" and events[-1].json["result"]["echo"] == value, events


async def test_a_running_job_cancelled_ends_its_stream_and_its_handler_at_once(
    http: httpx.AsyncClient,
    spawn_worker: Callable[..., Any],
    queue: QueueClient,
    db: Database,
) -> None:
    worker = await spawn_worker()
    body = (await post(http, "probe", "sleep", {"ms": 20000}, USER)).json()
    job_id = body["jobId"]
    events: list[Any] = []
    streamed = trio.Event()

    async def stream() -> None:
        _, _, got = await read_sse(http, body["streamUrl"])
        events.extend(got)
        streamed.set()

    waited: list[httpx.Response] = []

    async def wait_for_it() -> None:  # the same request again, waiting for its answer
        waited.append(
            await http.post(
                "/api/probe/q",
                json={"operation": "sleep", "params": {"ms": 20000}},
                headers={**bearer(USER), "Prefer": "wait=5"},
            )
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream)
        await wait_until(lambda: _running(queue, job_id), within=20)
        nursery.start_soon(wait_for_it)
        await wait_until(lambda: _attached(db, job_id), within=5)
        outcome = await cancel(db, OPS, job_id)
        with trio.fail_after(2):  # the lease renews every 10 s or so: this is the notify
            await streamed.wait()
            await wait_until(lambda: " cancelled by an operator" in worker.output(), within=2)
    assert outcome.status_before == "in_progress"
    assert events[-1].name == "error", events
    assert events[-1].json["code"] == "CANCELLED" and events[-1].json["jobId"] == job_id
    # Every answer names the operator, says it ran, and when: the stream's, the poll's
    # 200 and the Prefer: wait POST's 200 alike.
    said = events[-1].json
    assert said["message"].startswith(
        "the job was cancelled by the operator ops@acme.example while it ran, at "
    ), said
    assert said["cancellation"] == {
        "by": "operator",
        "operator": "ops@acme.example",
        "whileRunning": True,
        "at": said["message"].rsplit(" ", 1)[-1],
    }
    polled = await http.get(body["pollUrl"])
    assert polled.status_code == 200 and {"jobId": job_id, **polled.json()["error"]} == said
    assert waited[0].status_code == 200 and waited[0].json()["jobId"] == job_id
    assert {"jobId": job_id, **waited[0].json()["error"]} == said
    assert " cancelled by an operator (ops@acme.example)" in worker.output()
    assert await _status(queue, job_id) == "cancelled"
    (audit,) = await list_audit(db)
    assert (audit.action, audit.target, audit.rows) == ("cancel", {"jobId": job_id}, 1)
    await _echo_answered(http, "after the cancel")  # the worker serves on
    assert await _status(queue, job_id) == "cancelled"  # and wrote nothing to the row
    assert "Traceback" not in worker.output()
    with pytest.raises(Conflict) as info:
        await cancel(db, OPS, job_id)
    assert info.value.status == "cancelled"


async def test_a_forged_cancel_notify_changes_nothing(
    http: httpx.AsyncClient,
    spawn_worker: Callable[..., Any],
    queue: QueueClient,
    db: Database,
) -> None:
    worker = await spawn_worker()
    body = (await post(http, "probe", "sleep", {"ms": 1500}, USER)).json()
    job_id = body["jobId"]
    await wait_until(lambda: _running(queue, job_id), within=20)
    channel = QueueType.parse(T).cancel_channel
    await db.execute("SELECT pg_notify(%(c)s, %(p)s)", {"c": channel, "p": job_id})
    with trio.fail_after(20):
        _, _, events = await read_sse(http, body["streamUrl"])
    assert events[-1].name == "done" and events[-1].json["result"] == {"slept_ms": 1500}
    assert await _status(queue, job_id) == "done"
    assert "its row is not cancelled: ignored" in worker.output()
    assert " cancelled by an operator" not in worker.output()
    with pytest.raises(Conflict) as info:
        await cancel(db, OPS, job_id)
    assert info.value.status == "done"


async def test_a_pending_job_cancelled_never_runs(
    http: httpx.AsyncClient,
    spawn_worker: Callable[..., Any],
    queue: QueueClient,
    db: Database,
) -> None:
    body = (await post(http, "probe", "sleep", {"ms": 1}, USER)).json()  # no worker yet
    outcome = await cancel(db, OPS, body["jobId"])
    assert outcome.status_before == "pending"
    with trio.fail_after(20):
        _, _, events = await read_sse(http, body["streamUrl"])
    assert events[-1].name == "error" and events[-1].json["code"] == "CANCELLED"
    assert (
        events[-1]
        .json["message"]
        .startswith("the job was cancelled by the operator ops@acme.example before it ran, at ")
    )
    assert events[-1].json["cancellation"]["whileRunning"] is False
    await spawn_worker()
    await _echo_answered(http, "next")
    row = await queue.get(body["jobId"])
    assert row is not None and row.status == "cancelled"
    assert row.dequeue_count == 0 and row.claimed_at is None  # never claimed
