"""``prefer.wait_finished`` against a real reply pump and Postgres: a job that finishes
before its waiter is added is found by the one row read; one finishing after is heard."""

from __future__ import annotations

import trio

from dataplane.bff.prefer import wait_finished
from dataplane.bff.pump import ReplyPump
from dataplane.queue import JobRow, QueueClient, done_channel
from tests.conftest import wait_until
from tests.helpers import submit

TYPE = "surface-probe"
SWEEP = 600.0  # seconds: no sweep within a test, only notifies and the row read


async def _finish(queue: QueueClient) -> None:
    [job] = await queue.claim(TYPE, "test-worker")
    await queue.complete(job, {"data": {"ok": True}})


async def test_a_job_finished_before_its_waiter_is_found_by_the_row_read(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    heard = pump.heard()  # as the POST route reads it, before the enqueue
    job = await submit(queue, "probe", "echo", {"value": "early"})
    await _finish(queue)
    await wait_until(lambda: pump.heard() > heard)  # its notify went by: nobody waited
    with trio.fail_after(10):  # far below the sweep: the read found it
        row = await wait_finished(pump, queue, job.job_id, SWEEP, heard_before=heard)
    assert row is not None and row.status == "done" and row.id == job.job_id
    assert pump.statistics().waiters == 0


async def test_a_job_finished_after_its_waiter_is_heard(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    heard = pump.heard()
    job = await submit(queue, "probe", "echo", {"value": "late"})
    rows: list[JobRow | None] = []

    async def wait() -> None:
        rows.append(await wait_finished(pump, queue, job.job_id, SWEEP, heard_before=heard))

    with trio.fail_after(10):
        async with trio.open_nursery() as waiting:
            waiting.start_soon(wait)
            await wait_until(lambda: pump.statistics().waiters == 1)
            await _finish(queue)
    assert rows[0] is not None and rows[0].status == "done"
    assert pump.statistics().waiters == 0


async def test_no_answer_within_the_time_is_none(queue: QueueClient, nursery: trio.Nursery) -> None:
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    job = await submit(queue, "probe", "echo", {"value": "never"})
    assert await wait_finished(pump, queue, job.job_id, 0.2, heard_before=pump.heard()) is None
    assert pump.statistics().waiters == 0
