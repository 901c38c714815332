"""Retention removes exactly what it says, and poisons what can never run again."""

from __future__ import annotations

import uuid

import trio

from dataplane.db import Database, Notification
from dataplane.maintenance.retention import RetentionConfig, reap_once
from dataplane.queue import QueueClient, done_channel

T = "surface-probe"


async def _make(
    db: Database, queue: QueueClient, key: str, status: str, age_h: float, t: str = T
) -> uuid.UUID:
    enq = await queue.enqueue(t, key, {})
    await db.execute(
        "UPDATE maestro_queues SET status = %(s)s,"
        " completed_at = CASE WHEN %(s)s IN ('done', 'poison')"
        "   THEN now() - make_interval(secs => %(age)s) END,"
        " created_at = now() - make_interval(secs => %(age)s)"
        " WHERE id = %(id)s",
        {"s": status, "age": age_h * 3600, "id": enq.job_id},
    )
    return enq.job_id


async def test_reaper_deletes_exactly_what_retention_says(db: Database, queue: QueueClient) -> None:
    old_done = await _make(db, queue, "a", "done", 25)
    new_done = await _make(db, queue, "b", "done", 23)
    old_poison = await _make(db, queue, "c", "poison", 8 * 24)
    new_poison = await _make(db, queue, "d", "poison", 6 * 24)
    old_pending = await _make(
        db, queue, "e", "pending", 30 * 24, t="surface-other"
    )  # live rows are never reaped

    for job_id, hours in ((old_done, -1), (new_done, 1)):
        await db.execute(
            "INSERT INTO surface_result_blobs (job_id, content_type, data, size, expires_at)"
            " VALUES (%(j)s, 'application/pdf', '\\x00', 1, now() + make_interval(secs => %(s)s))",
            {"j": job_id, "s": hours * 3600},
        )

    # A lapsed lease at the cutoff -> poison (with notify); one below the cutoff stays.
    at_cutoff = (await queue.enqueue(T, "f", {}, max_dequeues=1)).job_id
    below = (await queue.enqueue(T, "g", {}, max_dequeues=3)).job_id
    claimed = {j.id for j in await queue.claim(T, "w", limit=10, lease_seconds=0.05)}
    assert {at_cutoff, below} <= claimed
    await trio.sleep(0.1)  # wall-clock: the 0.05 s leases must lapse in Postgres' clock (now())

    listener = db.listener([done_channel(T)])
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        result = await reap_once(db, RetentionConfig(batch=1))  # batches of one: loops work
        with trio.fail_after(5):
            event = await listener.events.receive()
        assert event == Notification(done_channel(T), str(at_cutoff))
        nursery.cancel_scope.cancel()

    assert (result.done_deleted, result.poison_deleted, result.blobs_deleted, result.poisoned) == (
        1,
        1,
        1,
        1,
    )
    rows = {
        r["id"]: r["status"] for r in await db.fetchall("SELECT id, status FROM maestro_queues")
    }
    assert old_done not in rows and old_poison not in rows
    assert rows[new_done] == "done" and rows[new_poison] == "poison"
    assert rows[old_pending] == "pending"
    assert rows[at_cutoff] == "poison" and rows[below] == "in_progress"
    blobs = await db.fetchall("SELECT job_id FROM surface_result_blobs")
    assert [b["job_id"] for b in blobs] == [new_done]

    again = await reap_once(db)
    assert again == type(again)(0, 0, 0, 0)
