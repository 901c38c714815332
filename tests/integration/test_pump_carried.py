"""A small answer rides in its done notify, and the reply pump hands it over without
reading the row; a large answer, a blob's reference, an expected error's payload and a
poison park take the row read as before. Only while nobody who may connect to the
queue database is barred from reading its rows (LISTEN needs no privilege): a queue
DB open to PUBLIC, or to a role that may not read the queue, hears the job id alone.
Real pump, real Postgres, real notifies, real grants."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import trio

from dataplane.bff.pump import ReplyPump
from dataplane.db import Notification
from dataplane.queue import (
    DONE_NOTIFY_INLINE_MAX,
    Blob,
    JobRow,
    QueueClient,
    done_channel,
    parse_done_notify,
)
from dataplane.queue.records import ClaimedJob
from tests.conftest import wait_until
from tests.helpers import close_to_public, submit

TYPE = "surface-probe"
SWEEP = 600.0  # seconds: no sweep within a test, only notifies and reads


@pytest.fixture
async def closed(queue: QueueClient) -> None:
    """The queue DB closed to PUBLIC: small answers ride in done notifies."""
    await close_to_public(queue)


async def _waited_finish(
    queue: QueueClient, pump: ReplyPump, value: str, finish: Any
) -> tuple[JobRow, JobRow]:
    """Enqueue, wait on the pump, finish the job with ``finish(job)``: the row the
    waiter got, and the row as read from the table afterwards."""
    enq = await submit(queue, "probe", "echo", {"value": value})
    waiter = pump.add(enq.job_id)
    try:
        [job] = await queue.claim(TYPE, "test-worker")
        await finish(job)
        with trio.fail_after(10):  # far below the sweep: the notify delivered it
            got = await waiter.wait()
    finally:
        pump.discard(waiter)
    read = await queue.get(enq.job_id)
    assert read is not None
    return got, read


def _same_answer(got: JobRow, read: JobRow) -> None:
    """Every field an answer, a stream's end and their spans use."""
    for name in (
        "id",
        "type",
        "status",
        "result",
        "dequeue_count",
        "max_dequeues",
        "created_at",
        "claimed_at",
        "completed_at",
    ):
        assert getattr(got, name) == getattr(read, name), name
    for key in ("surface", "traceparent"):
        assert got.payload.get(key) == read.payload.get(key), key


async def test_a_small_answer_is_delivered_from_its_notify_without_a_read(
    queue: QueueClient, nursery: trio.Nursery, closed: None
) -> None:
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    result = {"data": {"echo": 'ünïcode "quoted" \\ and \n'}, "cache": "miss"}

    async def finish(job: ClaimedJob) -> None:
        await queue.complete(job, result)

    got, read = await _waited_finish(queue, pump, "small", finish)
    _same_answer(got, read)
    assert got.result == result
    stats = pump.statistics()
    assert (stats.carried, stats.reads) == (1, 0)


async def test_an_expected_error_is_carried_too(
    queue: QueueClient, nursery: trio.Nursery, closed: None
) -> None:
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)

    async def finish(job: ClaimedJob) -> None:
        await queue.complete(job, {"error": {"status": 403, "message": "staff only"}})

    got, read = await _waited_finish(queue, pump, "forbidden", finish)
    _same_answer(got, read)
    assert (pump.statistics().carried, pump.statistics().reads) == (1, 0)


async def test_a_large_answer_or_a_blob_is_read_from_the_row(
    queue: QueueClient, nursery: trio.Nursery, closed: None
) -> None:
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    large = {"data": "x" * DONE_NOTIFY_INLINE_MAX}

    async def finish_large(job: ClaimedJob) -> None:
        await queue.complete(job, large)

    got, read = await _waited_finish(queue, pump, "large", finish_large)
    assert got == read and got.result == large
    assert (pump.statistics().carried, pump.statistics().reads) == (0, 1)

    async def finish_blob(job: ClaimedJob) -> None:
        blob = Blob("application/pdf", b"%PDF-1.7\n")
        await queue.complete(job, {"blobRef": {"size": 9}}, blob=blob)

    got, read = await _waited_finish(queue, pump, "blob", finish_blob)
    assert got == read and got.payload["auth"]  # the whole envelope: its owner signs the URL
    assert (pump.statistics().carried, pump.statistics().reads) == (0, 2)


async def test_notify_payloads_say_what_they_carry(
    queue: QueueClient, nursery: trio.Nursery, closed: None
) -> None:
    """The notify itself, as any listener hears it: the id alone, or the id and the
    answer; a poison park names the id alone."""
    listener = queue.db.listener([done_channel(TYPE)])
    await nursery.start(listener.run)
    small = await submit(queue, "probe", "echo", {"value": "n-small"})
    big = await submit(queue, "probe", "echo", {"value": "n-big"})
    doomed = await submit(queue, "probe", "echo", {"value": "n-doomed"}, max_dequeues=1)
    jobs = {j.id: j for j in await queue.claim(TYPE, "w", limit=3)}
    await queue.complete(jobs[small.job_id], {"data": 1})
    await queue.complete(jobs[big.job_id], {"data": "y" * (DONE_NOTIFY_INLINE_MAX + 1)})
    assert await queue.fail(jobs[doomed.job_id], "boom") == "poison"
    heard: dict[uuid.UUID, JobRow | None] = {}
    with trio.fail_after(10):
        while len(heard) < 3:
            event = await listener.events.receive()
            if not isinstance(event, Notification):
                continue
            job_id, row = parse_done_notify(event.payload)
            heard[job_id] = row
    carried = heard[small.job_id]
    assert carried is not None and carried.result == {"data": 1}
    assert heard[big.job_id] is None and heard[doomed.job_id] is None


async def _heard(listener: Any, count: int) -> list[str]:
    """The next ``count`` done notifies' payloads."""
    payloads: list[str] = []
    with trio.fail_after(10):
        while len(payloads) < count:
            event = await listener.events.receive()
            if isinstance(event, Notification):
                payloads.append(event.payload)
    return payloads


async def test_a_queue_db_open_to_public_hears_the_job_id_alone(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    """Any role may connect to a database open to PUBLIC (Postgres's default) and LISTEN
    needs no privilege: the answer stays in the row, and the pump reads it."""
    assert await queue.check_notify_privacy() == ["PUBLIC"]
    assert not queue.answers_in_notify
    listener = queue.db.listener([done_channel(TYPE)])
    await nursery.start(listener.run)
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)

    async def finish(job: ClaimedJob) -> None:
        await queue.complete(job, {"data": "secret"})

    got, read = await _waited_finish(queue, pump, "open", finish)
    assert got == read and got.result == {"data": "secret"}
    assert (pump.statistics().carried, pump.statistics().reads) == (0, 1)
    [payload] = await _heard(listener, 1)
    assert payload == str(got.id)
    assert pump.answered(got.id) is None  # nothing carried: nothing kept


async def test_a_role_that_may_connect_but_not_read_the_queue_keeps_answers_out(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    """Closed to PUBLIC, a login role granted CONNECT alone could still LISTEN: named,
    and the notify carries the id alone until the role may read the queue too."""
    role = f"overhear_{uuid.uuid4().hex[:8]}"
    listener = queue.db.listener([done_channel(TYPE)])
    await nursery.start(listener.run)
    await close_to_public(queue)
    await queue.db.execute(f"CREATE ROLE {role} LOGIN")
    try:
        await queue.db.execute(
            f"DO $$ BEGIN EXECUTE format('GRANT CONNECT ON DATABASE %I TO {role}', "
            "current_database()); END $$"
        )
        assert await queue.check_notify_privacy() == [role]
        assert not queue.answers_in_notify
        enq = await submit(queue, "probe", "echo", {"value": "overheard"})
        [job] = await queue.claim(TYPE, "w")
        await queue.complete(job, {"data": 1})
        assert await _heard(listener, 1) == [str(enq.job_id)]

        await queue.db.execute(f"GRANT SELECT ON maestro_queues TO {role}")
        assert await queue.check_notify_privacy() == []
        enq = await submit(queue, "probe", "echo", {"value": "may read"})
        [job] = await queue.claim(TYPE, "w")
        await queue.complete(job, {"data": 2})
        [payload] = await _heard(listener, 1)
        job_id, carried = parse_done_notify(payload)
        assert job_id == enq.job_id and carried is not None and carried.result == {"data": 2}
    finally:
        await queue.db.execute(f"DROP OWNED BY {role}")
        await queue.db.execute(f"DROP ROLE {role}")


async def _finished_unwaited(queue: QueueClient, pump: ReplyPump, value: str, result: Any) -> Any:
    """Enqueue and complete a job nobody waits on; return once the pump heard it."""
    heard = pump.statistics().notifies
    enq = await submit(queue, "probe", "echo", {"value": value})
    [job] = await queue.claim(TYPE, "test-worker")
    await queue.complete(job, result)
    await wait_until(lambda: pump.statistics().notifies > heard, within=10)
    return enq.job_id


async def test_answers_that_went_by_unwaited_are_kept_for_a_later_caller(
    queue: QueueClient, nursery: trio.Nursery, closed: None
) -> None:
    """A stream or a poll that comes after the answer went by (most do, under load) is
    answered from what the notify carried; a large answer (not carried) is not kept,
    and the oldest answers go with their notifies past ``recent_notifies``."""
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP, recent_notifies=2)
    await nursery.start(pump.run)
    first = await _finished_unwaited(queue, pump, "first", {"data": "one"})
    kept = pump.answered(first)
    read = await queue.get(first)
    assert kept is not None and read is not None
    _same_answer(kept, read)
    large = await _finished_unwaited(queue, pump, "large", {"data": "z" * DONE_NOTIFY_INLINE_MAX})
    assert pump.answered(large) is None
    assert pump.answered(uuid.uuid4()) is None  # never heard
    await _finished_unwaited(queue, pump, "third", {"data": 3})  # pushes "first" out
    assert pump.answered(first) is None
    assert pump.statistics().reads == 0  # nobody waited: nothing was read


async def test_a_prefer_wait_whose_answer_went_by_before_its_waiter_reads_no_row(
    queue: QueueClient, nursery: trio.Nursery, closed: None
) -> None:
    """The job's notify came between the pump's ``heard`` (before the enqueue) and the
    waiter: it carried the answer, so ``wait_finished`` needs no row read."""
    from dataplane.bff.prefer import wait_finished

    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    before = pump.heard()
    job_id = await _finished_unwaited(queue, pump, "raced", {"data": "raced"})
    assert pump.may_have_missed(job_id, before)
    reads: list[Any] = []
    read = queue.get_finished_many

    async def counted(ids: Any) -> Any:
        reads.append(ids)
        return await read(ids)

    queue.get_finished_many = counted  # type: ignore[method-assign]
    row = await wait_finished(pump, queue, job_id, 5.0, heard_before=before)
    assert row is not None and row.result == {"data": "raced"}
    assert reads == []
