"""A running job's progress, from the worker's write to a waiting stream's waiter.

Real Postgres, real notifies, a real reply pump: a progress write lands on the row only
while its claim holds (fenced), its sealed note is handed to the job's waiters without
a read, an older progress never replaces a newer one, a retried attempt's replaces the
last attempt's, and nothing a notify carries is believed unless it opens as a progress
note (a forged one, or a done note moved onto the progress channel, is refused and the
row is read instead). Without a notify secret the waiters get the row's progress."""

from __future__ import annotations

import uuid

import trio

from dataplane.bff.reply.pump import ReplyPump
from dataplane.bff.reply.waiter import Waiter
from dataplane.db import Database
from dataplane.queue import QueueClient, QueueConfig, done_channel
from dataplane.queue.notices.progress import Progress, progress_report, write_progress
from dataplane.queue.records import ClaimedJob
from dataplane.queue.types import progress_channel
from tests.conftest import wait_until
from tests.helpers import complete, submit

TYPE = "surface-probe"
SWEEP = 600.0  # no sweep within a test


def _progress(attempt: int, seq: int, done: int = 1, total: int = 4) -> Progress:
    return Progress(attempt, seq, progress_report(done=done, total=total, message=f"{done}"))


async def _pump(queue: QueueClient, nursery: trio.Nursery) -> ReplyPump:
    pump = ReplyPump(
        queue, [done_channel(TYPE)], sweep_seconds=SWEEP, progress_channels=[progress_channel(TYPE)]
    )
    await nursery.start(pump.run)
    return pump


async def _claimed(queue: QueueClient, pump: ReplyPump, value: str) -> tuple[ClaimedJob, Waiter]:
    enq = await submit(queue, "probe", "echo", {"value": value})
    waiter = pump.add(enq.job_id)
    [job] = await queue.claim(TYPE, "test-worker")
    return job, waiter


async def _heard(waiter: Waiter, order: tuple[int, int]) -> None:
    with trio.fail_after(10):
        await waiter.changed((-1, -1) if order == (1, 1) else (order[0], order[1] - 1))


async def test_a_sealed_progress_reaches_the_waiter_without_a_read(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    pump = await _pump(queue, nursery)
    job, waiter = await _claimed(queue, pump, "sealed")
    written = await write_progress(queue.db, queue.seal, [(job, _progress(1, 1, 1, 4))])
    assert written == {job.id}
    await _heard(waiter, (1, 1))
    assert waiter.progress is not None and waiter.progress.report["done"] == 1
    assert waiter.progress.report["fraction"] == 0.25
    stats = pump.statistics()
    assert (stats.progress, stats.reads, stats.rejected) == (1, 0, 0)
    row = await queue.get(job.id)
    assert row is not None and row.progress["seq"] == 1 and row.progress["message"] == "1"

    # An older progress heard late changes nothing; a newer one replaces it.
    assert not waiter.deliver_progress(_progress(1, 1))
    await write_progress(queue.db, queue.seal, [(job, _progress(1, 3, 3, 4))])
    await _heard(waiter, (1, 3))
    assert waiter.progress is not None and waiter.progress.order == (1, 3)

    # The answer ends it: a progress written after the finish matches no row.
    await complete(queue, job, {"data": "done"})
    with trio.fail_after(10):
        assert (await waiter.wait()) is not None
    assert await write_progress(queue.db, queue.seal, [(job, _progress(1, 4))]) == set()
    assert not waiter.deliver_progress(_progress(1, 9))


async def test_a_progress_of_a_lost_claim_is_fenced_out(
    queue: QueueClient, nursery: trio.Nursery, db: Database
) -> None:
    pump = await _pump(queue, nursery)
    job, waiter = await _claimed(queue, pump, "fenced")
    await db.execute(
        "UPDATE maestro_queues SET dequeue_count = dequeue_count + 1 WHERE id = %(id)s",
        {"id": job.id},
    )  # another claim now holds it
    assert await write_progress(queue.db, queue.seal, [(job, _progress(1, 1))]) == set()
    row = await queue.get(job.id)
    assert row is not None and row.progress is None
    assert waiter.progress is None


async def test_a_retried_attempt_replaces_the_last_attempts_progress(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    pump = await _pump(queue, nursery)
    job, waiter = await _claimed(queue, pump, "retried")
    await write_progress(queue.db, queue.seal, [(job, _progress(1, 7, 3, 4))])
    await _heard(waiter, (1, 7))
    await queue.fail(job, "boom", backoff_seconds=0)
    [again] = await queue.claim(TYPE, "test-worker")
    assert again.dequeue_count == 2
    await write_progress(queue.db, queue.seal, [(again, _progress(2, 1, 1, 4))])
    await _heard(waiter, (2, 1))
    assert waiter.seen() == (2, 1) and waiter.progress is not None
    assert waiter.progress.report["done"] == 1
    assert not waiter.deliver_progress(_progress(1, 8))  # the first attempt's, late


async def test_a_forged_or_moved_note_is_refused_and_the_row_read(
    queue: QueueClient, nursery: trio.Nursery, db: Database
) -> None:
    pump = await _pump(queue, nursery)
    job, waiter = await _claimed(queue, pump, "forged")
    assert queue.seal is not None
    channel = progress_channel(TYPE)
    forged = Progress(1, 99, {"fraction": 1.0, "message": "forged"}).note()
    moved = queue.seal.seal(str(job.id), forged)  # sealed, but as a done note
    other = queue.seal.seal(str(uuid.uuid4()), forged, kind="progress")  # another job's
    for payload in (f"{job.id} {forged}", f"{job.id} {moved}", f"{job.id} {other}", "nonsense"):
        await db.notify(channel, payload)
    await wait_until(lambda: pump.statistics().rejected >= 4, within=10)
    assert waiter.progress is None  # the row holds no progress: nothing was delivered
    # The row's own progress is what a refused note makes the pump read.
    await write_progress(queue.db, None, [(job, _progress(1, 2))])  # id alone, unsealed
    await _heard(waiter, (1, 2))
    assert waiter.progress is not None and waiter.progress.report["message"] == "1"
    assert pump.statistics().progress == 1


async def test_without_a_notify_secret_the_waiter_gets_the_rows_progress(
    db: Database, nursery: trio.Nursery
) -> None:
    queue = QueueClient(db, QueueConfig())  # no notify secret: ids alone
    assert queue.seal is None
    pump = await _pump(queue, nursery)
    job, waiter = await _claimed(queue, pump, "unsealed")
    await write_progress(queue.db, queue.seal, [(job, _progress(1, 1, 2, 4))])
    await _heard(waiter, (1, 1))
    assert waiter.progress is not None and waiter.progress.report["done"] == 2
