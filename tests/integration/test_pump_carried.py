"""A small answer rides sealed in its done notify, and the reply pump hands it over
without reading the row; a large answer, a blob's reference, an expected error's
payload and a poison park take the row read as before. Nothing else a notify carries
is believed: LISTEN and NOTIFY need no privilege, so a role that may only read the
queue (or, on a queue DB open to PUBLIC, any role) hears every done channel and may
send on it. Real pump, real Postgres, real notifies, real roles."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from psycopg import sql as pgsql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.bff.reply import answers
from dataplane.bff.reply.pump import ReplyPump
from dataplane.db import Database, DatabaseConfig, Notification, open_database
from dataplane.queue import (
    DONE_NOTIFY_INLINE_MAX,
    Blob,
    JobRow,
    QueueClient,
    QueueConfig,
    done_channel,
    split_done_notify,
)
from dataplane.queue.notices.seal import NotifySeal
from dataplane.queue.records import ClaimedJob
from tests.conftest import wait_until
from tests.helpers import NOTIFY_SECRET, complete, submit

TYPE = "surface-probe"
SWEEP = 600.0  # seconds: no sweep within a test, only notifies and reads


def _opened(queue: QueueClient, payload: str) -> tuple[uuid.UUID, JobRow | None]:
    """A done notify as a BFF with the tests' notify secret reads it."""
    job_id, sealed = split_done_notify(payload)
    if sealed is None:
        return job_id, None
    assert queue.seal is not None
    note = queue.seal.open(str(job_id), sealed)
    return job_id, None if note is None else JobRow.from_done_note(job_id, note)


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
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    result = {"data": {"echo": 'ünïcode "quoted" \\ and \n'}, "cache": "miss"}

    async def finish(job: ClaimedJob) -> None:
        await complete(queue, job, result)

    got, read = await _waited_finish(queue, pump, "small", finish)
    _same_answer(got, read)
    assert got.result == result
    stats = pump.statistics()
    assert (stats.carried, stats.reads) == (1, 0)


async def test_an_expected_error_is_carried_too(queue: QueueClient, nursery: trio.Nursery) -> None:
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)

    async def finish(job: ClaimedJob) -> None:
        await complete(queue, job, {"error": {"status": 403, "message": "staff only"}})

    got, read = await _waited_finish(queue, pump, "forbidden", finish)
    _same_answer(got, read)
    assert (pump.statistics().carried, pump.statistics().reads) == (1, 0)


async def test_a_large_answer_or_a_blob_is_read_from_the_row(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    large = {"data": "x" * DONE_NOTIFY_INLINE_MAX}

    async def finish_large(job: ClaimedJob) -> None:
        await complete(queue, job, large)

    got, read = await _waited_finish(queue, pump, "large", finish_large)
    assert got == read and got.result == large
    assert (pump.statistics().carried, pump.statistics().reads) == (0, 1)

    async def finish_blob(job: ClaimedJob) -> None:
        blob = Blob("application/pdf", b"%PDF-1.7\n")
        await complete(queue, job, {"blobRef": {"size": 9}}, blob=blob)

    got, read = await _waited_finish(queue, pump, "blob", finish_blob)
    assert got == read and got.payload["auth"]  # the whole envelope: its owner signs the URL
    assert (pump.statistics().carried, pump.statistics().reads) == (0, 2)


async def test_notify_payloads_say_what_they_carry(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    """The notify itself, as any listener hears it: the id alone, or the id and the
    answer; a poison park names the id alone."""
    listener = queue.db.listener([done_channel(TYPE)])
    await nursery.start(listener.run)
    small = await submit(queue, "probe", "echo", {"value": "n-small"})
    big = await submit(queue, "probe", "echo", {"value": "n-big"})
    doomed = await submit(queue, "probe", "echo", {"value": "n-doomed"}, max_dequeues=1)
    jobs = {j.id: j for j in await queue.claim(TYPE, "w", limit=3)}
    await complete(queue, jobs[small.job_id], {"data": 1})
    await complete(queue, jobs[big.job_id], {"data": "y" * (DONE_NOTIFY_INLINE_MAX + 1)})
    assert await queue.fail(jobs[doomed.job_id], "boom") == "poison"
    heard: dict[uuid.UUID, JobRow | None] = {}
    with trio.fail_after(10):
        while len(heard) < 3:
            event = await listener.events.receive()
            if not isinstance(event, Notification):
                continue
            job_id, row = _opened(queue, event.payload)
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


@pytest.fixture
async def unsealed(db: Database) -> QueueClient:
    """A queue client without a notify secret: a worker that sends ids alone."""
    return QueueClient(db, QueueConfig())


async def test_without_a_notify_secret_the_notify_names_the_job_alone(
    queue: QueueClient, unsealed: QueueClient, nursery: trio.Nursery
) -> None:
    listener = queue.db.listener([done_channel(TYPE)])
    await nursery.start(listener.run)
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)

    async def finish(job: ClaimedJob) -> None:
        await complete(unsealed, job, {"data": "secret"})

    got, read = await _waited_finish(queue, pump, "unsealed", finish)
    assert got == read and got.result == {"data": "secret"}
    assert (pump.statistics().carried, pump.statistics().reads) == (0, 1)
    [payload] = await _heard(listener, 1)
    assert payload == str(got.id)
    assert pump.answered(got.id) is None  # nothing carried: nothing kept


async def test_a_listener_hears_no_answer_in_a_sealed_notify(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    """What any role that may connect hears: the job id and bytes it cannot read."""
    listener = queue.db.listener([done_channel(TYPE)])
    await nursery.start(listener.run)
    enq = await submit(queue, "probe", "echo", {"value": "private"})
    [job] = await queue.claim(TYPE, "w")
    await complete(queue, job, {"data": {"secret": "the-answer-itself"}})
    [payload] = await _heard(listener, 1)
    job_id, sealed = split_done_notify(payload)
    assert job_id == enq.job_id and sealed is not None
    assert "the-answer-itself" not in payload and "secret" not in payload
    assert "surface-probe" not in sealed and "traceparent" not in sealed
    assert (
        NotifySeal(["another-secret-of-at-least-32-characters!"]).open(str(job_id), sealed) is None
    )  # another key opens nothing
    assert _opened(queue, payload)[1] is not None


@pytest.fixture
async def reader(queue_dsn: str, db: Database, bridge: Any) -> AsyncIterator[Database]:
    """A connection as a second role that may only connect and read the queue (a
    dashboard's login): it hears every done channel and may NOTIFY on them."""
    role = f"dash_{uuid.uuid4().hex[:8]}"
    await db.execute(
        pgsql.SQL("CREATE ROLE {} LOGIN PASSWORD 'dash'").format(pgsql.Identifier(role))
    )
    await db.execute(
        pgsql.SQL("GRANT SELECT ON maestro_queues TO {}").format(pgsql.Identifier(role))
    )
    params = conninfo_to_dict(queue_dsn)
    params.update(user=role, password="dash")
    try:
        config = DatabaseConfig(make_conninfo(**params), pool_size=1)  # type: ignore[arg-type]
        async with open_database(config, loop=bridge) as conn:
            yield conn
    finally:
        await db.execute(pgsql.SQL("DROP OWNED BY {}").format(pgsql.Identifier(role)))
        await db.execute(pgsql.SQL("DROP ROLE {}").format(pgsql.Identifier(role)))


def _forged(job_id: uuid.UUID, result: Any) -> str:
    """A carried answer in the format the worker sent before answers were sealed."""
    note = {
        "type": TYPE,
        "dequeueCount": 1,
        "maxDequeues": 5,
        "createdAt": "2026-01-01T00:00:00+00:00",
        "claimedAt": "2026-01-01T00:00:00+00:00",
        "completedAt": "2026-01-01T00:00:01+00:00",
        "surface": "probe",
        "traceparent": None,
        "result": result,
    }
    return f"{job_id} {json.dumps(note)}"


async def _send(conn: Database, payload: str) -> None:
    await conn.execute(
        "SELECT pg_notify(%(channel)s, %(payload)s)",
        {"channel": done_channel(TYPE), "payload": payload},
    )


async def test_a_notify_forged_by_a_role_that_may_only_read_is_not_believed(
    queue: QueueClient, nursery: trio.Nursery, reader: Database
) -> None:
    """The reader sees a pending job's id in the table and sends a done notify carrying
    an answer of its own, then (after the real answer) one more: the waiter gets the
    worker's answer, the pump remembers nothing forged, and counts both."""
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    enq = await submit(queue, "probe", "echo", {"value": "genuine"})
    waiter = pump.add(enq.job_id)
    try:
        rows = await reader.fetchall("SELECT id FROM maestro_queues WHERE status = 'pending'")
        assert [row["id"] for row in rows] == [enq.job_id]
        heard = pump.statistics().notifies
        await _send(reader, _forged(enq.job_id, {"data": {"echo": "forged"}}))
        await wait_until(lambda: pump.statistics().reads == 1)  # not believed: read instead
        assert waiter.row is None  # and the row is pending
        assert pump.statistics().rejected == 1 and pump.statistics().notifies == heard + 1
        [job] = await queue.claim(TYPE, "w")
        await complete(queue, job, {"data": {"echo": "genuine"}})
        with trio.fail_after(10):
            got = await waiter.wait()
        assert got is not None and got.result == {"data": {"echo": "genuine"}}
    finally:
        pump.discard(waiter)
    heard = pump.statistics().notifies
    await _send(reader, _forged(enq.job_id, {"data": {"echo": "forged again"}}))
    await wait_until(lambda: pump.statistics().notifies > heard)
    assert pump.answered(enq.job_id) is None  # the forgery replaced the real one: a read
    assert pump.statistics().rejected == 2


async def test_a_sealed_answer_moved_to_another_job_or_altered_does_not_open(
    queue: QueueClient, nursery: trio.Nursery, reader: Database
) -> None:
    listener = queue.db.listener([done_channel(TYPE)])
    await nursery.start(listener.run)
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    done = await _finished_unwaited(queue, pump, "sealed", {"data": "real"})
    [payload] = await _heard(listener, 1)
    _, sealed = split_done_notify(payload)
    assert sealed is not None
    other = await submit(queue, "probe", "echo", {"value": "other"})
    waiter = pump.add(other.job_id)
    try:
        flipped = sealed[:-3] + ("A" if sealed[-3] != "A" else "B") + sealed[-2:]
        for text in (sealed, flipped, sealed[:40], "", "!" * 60, "é" * 50):
            await _send(reader, f"{other.job_id} {text}")
        await wait_until(lambda: pump.statistics().rejected >= 6)
        assert waiter.row is None
    finally:
        pump.discard(waiter)
    assert pump.answered(done) is not None  # the genuine one still opens for its own job


async def test_a_rotated_secret_still_opens_what_the_old_one_sealed(db: Database) -> None:
    new = "a-new-notify-secret-of-32-characters-or-more"
    old = NotifySeal([NOTIFY_SECRET])
    both = NotifySeal([new, NOTIFY_SECRET])
    job_id = str(uuid.uuid4())
    assert both.open(job_id, old.seal(job_id, '{"a":1}')) == '{"a":1}'
    assert NotifySeal([new]).open(job_id, old.seal(job_id, '{"a":1}')) is None
    assert old.open(job_id, both.seal(job_id, '{"b":2}')) is None  # the first one seals


async def test_an_answer_is_not_remembered_past_a_deletion_of_queue_rows(
    queue: QueueClient, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator deletes a finished row: its owner's URL is not answered from memory
    any more (the delete trigger's notify), nor are other answers heard before it;
    those completed past the clock margin after it are."""
    monkeypatch.setattr(answers, "CLOCK_MARGIN", 0.3)
    pump = ReplyPump(queue, [done_channel(TYPE)], sweep_seconds=SWEEP)
    await nursery.start(pump.run)
    first = await _finished_unwaited(queue, pump, "kept", {"data": 1})
    second = await _finished_unwaited(queue, pump, "deleted", {"data": 2})
    assert pump.answered(first) is not None and pump.answered(second) is not None
    before = pump.listener.statistics().received
    await queue.db.execute("DELETE FROM maestro_queues WHERE id = %(id)s", {"id": second})
    await wait_until(lambda: pump.listener.statistics().received > before)
    await wait_until(lambda: pump.answered(second) is None)
    assert pump.answered(first) is None  # heard before the deletion: read it
    await trio.sleep(0.4)  # past the margin: what completes now is served from memory
    third = await _finished_unwaited(queue, pump, "after", {"data": 3})
    assert pump.answered(third) is not None
    before = pump.listener.statistics().received
    await queue.db.execute("DELETE FROM maestro_queues WHERE false")  # deletes nothing
    await _finished_unwaited(queue, pump, "later", {"data": 4})
    assert pump.answered(third) is not None


async def _finished_unwaited(queue: QueueClient, pump: ReplyPump, value: str, result: Any) -> Any:
    """Enqueue and complete a job nobody waits on; return once the pump heard it."""
    heard = pump.statistics().notifies
    enq = await submit(queue, "probe", "echo", {"value": value})
    [job] = await queue.claim(TYPE, "test-worker")
    await complete(queue, job, result)
    await wait_until(lambda: pump.statistics().notifies > heard, within=10)
    return enq.job_id


async def test_answers_that_went_by_unwaited_are_kept_for_a_later_caller(
    queue: QueueClient, nursery: trio.Nursery
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
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    """The job's notify came between the pump's ``heard`` (before the enqueue) and the
    waiter: it carried the answer, so ``wait_finished`` needs no row read."""
    from dataplane.bff.reply.prefer import wait_finished

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
