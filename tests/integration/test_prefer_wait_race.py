"""``prefer.wait_finished`` against a real reply pump and Postgres: a job that finishes
before its waiter is added is found by the one row read; one finishing after is heard;
other jobs' notifies heard in between cost no row read, unless the pump has forgotten
some of them."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import trio

from dataplane.bff.reply.prefer import wait_finished
from dataplane.bff.reply.pump import ReplyPump
from dataplane.queue import JobRow, QueueClient, done_channel
from tests.conftest import wait_until
from tests.helpers import complete, submit

TYPE = "surface-probe"
SWEEP = 600.0  # seconds: no sweep within a test, only notifies and the row read


async def _finish(queue: QueueClient) -> uuid.UUID:
    """Claim and complete the oldest claimable job; its id."""
    [job] = await queue.claim(TYPE, "test-worker")
    await complete(queue, job, {"data": {"ok": True}})
    return job.id


class ReadCounting(QueueClient):
    """The test's queue, counting the row reads ``wait_finished`` makes through it."""

    def __init__(self, queue: QueueClient) -> None:
        super().__init__(queue.db, queue.config)
        self.reads = 0

    async def get_finished_many(self, job_ids: Iterable[uuid.UUID | str]) -> list[JobRow]:
        self.reads += 1
        return await super().get_finished_many(job_ids)


async def test_a_job_finished_before_its_waiter_is_found_by_the_row_read(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    heard = pump.heard()  # as the POST route reads it, before the enqueue
    job = await submit(queue, "probe", "echo", {"value": "early"})
    await _finish(queue)
    await wait_until(lambda: pump.heard().notifies > heard.notifies)  # went by: nobody waited
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


async def test_other_jobs_notifies_before_the_waiter_cost_no_row_read(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    counting = ReadCounting(queue)
    heard = pump.heard()
    other = await submit(queue, "probe", "echo", {"value": "other"})  # the oldest
    job = await submit(queue, "probe", "echo", {"value": "mine"})
    assert await _finish(queue) == other.job_id
    await wait_until(lambda: pump.heard().notifies > heard.notifies)  # heard before our waiter
    assert not pump.may_have_missed(job.job_id, heard)
    assert pump.may_have_missed(other.job_id, heard)
    rows: list[JobRow | None] = []

    async def wait() -> None:
        rows.append(await wait_finished(pump, counting, job.job_id, SWEEP, heard_before=heard))

    with trio.fail_after(10):
        async with trio.open_nursery() as waiting:
            waiting.start_soon(wait)
            await wait_until(lambda: pump.statistics().waiters == 1)
            assert await _finish(queue) == job.job_id
    assert rows[0] is not None and rows[0].id == job.job_id and rows[0].status == "done"
    assert counting.reads == 0  # the waiter heard it; no row check was needed


async def test_a_pump_that_forgot_notifies_since_checks_the_row(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP, recent_notifies=1)
    await nursery.start(pump.run)
    counting = ReadCounting(queue)
    heard = pump.heard()
    job = await submit(queue, "probe", "echo", {"value": "forgotten"})  # the oldest
    await submit(queue, "probe", "echo", {"value": "later"})
    assert await _finish(queue) == job.job_id
    await _finish(queue)  # its notify pushes ours out of the pump's memory of one
    await wait_until(lambda: pump.heard().notifies >= heard.notifies + 2)
    assert pump.may_have_missed(job.job_id, heard)
    with trio.fail_after(10):  # far below the sweep: the read found it
        row = await wait_finished(pump, counting, job.job_id, SWEEP, heard_before=heard)
    assert row is not None and row.id == job.job_id and row.status == "done"
    assert counting.reads == 1
