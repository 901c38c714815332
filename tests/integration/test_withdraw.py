"""Withdrawals (``job_cancel``, issue 55) against a real Postgres: the last requester of a
running job cancels it as an operator's cancel does (the row names the claim, says the
requesters did it while it ran; the done and cancel notifies fire on its commit; a late
completion is fenced out), while one of several only withdraws; a withdrawal racing the
completion, in either order on the row's lock, leaves the row and what the withdrawal
answered in agreement; and every cancelled row says who and when, those an older
release cancelled included (migration 0025)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio

from dataplane.core.errors import LeaseLost
from dataplane.db import Database, DatabaseConfig, Notification, open_database, q
from dataplane.operator import Operator, cancel
from dataplane.queue import (
    CancelResult,
    ClaimedJob,
    Completion,
    QueueClient,
    QueueType,
    done_channel,
)
from dataplane.queue.migrations import available, migrate
from dataplane.queue.records import Cancellation, iso
from tests.conftest import wait_until
from tests.helpers import complete

T = "surface-probe"
CHANNELS = [done_channel(T), QueueType.parse(T).cancel_channel]


async def _running(queue: QueueClient, key: str, *requesters: str) -> ClaimedJob:
    """A job ``requesters`` asked for (each attaching in turn), claimed by worker w1."""
    for who in requesters:
        await queue.enqueue(T, key, {"operation": "sleep"}, requester=who)
    (job,) = await queue.claim(T, "w1")
    return job


async def _heard(db: Database, act: object) -> list[tuple[str, str]]:
    """The (channel, payload) notifies on CHANNELS that ``act()`` sends, within 2 s."""
    listener = db.listener(CHANNELS)
    heard: list[tuple[str, str]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        await act()  # type: ignore[operator]
        with trio.move_on_after(2):
            async for event in listener.events:
                if isinstance(event, Notification):
                    heard.append((event.channel, event.payload))
        nursery.cancel_scope.cancel()
    return sorted(heard)


async def test_the_last_requester_of_a_running_job_cancels_it_as_an_operator_would(
    db: Database, queue: QueueClient
) -> None:
    job = await _running(queue, "two", "alice", "bob")
    outcomes: list[CancelResult] = []

    async def alice_withdraws() -> None:
        outcomes.append(await queue.cancel(job.id, "alice", T))

    assert await _heard(db, alice_withdraws) == []  # bob still waits: it runs on
    withdrew = outcomes[0]
    assert (withdrew.status, withdrew.requesters, withdrew.running) == ("in_progress", 1, True)
    assert (await queue.get(job.id)).status == "in_progress"  # type: ignore[union-attr]
    assert await queue.renew([job], lease_seconds=30) == {job.id}  # its worker holds it

    async def bob_withdraws() -> None:
        outcomes.append(await queue.cancel(job.id, "bob", T))

    assert await _heard(db, bob_withdraws) == sorted((c, str(job.id)) for c in CHANNELS)
    last = outcomes[1]
    assert (last.status, last.requesters, last.running) == ("cancelled", 0, True)
    row = await queue.get(job.id)
    assert row is not None and row.status == "cancelled" and row.completed_at == last.at
    assert row.locked_by == "w1" and row.dequeue_count == job.dequeue_count  # the claim named
    assert row.cancellation == Cancellation("requesters", True, row.completed_at)
    assert await queue.cancelled_held(job) == row.cancellation  # what its worker believes
    with pytest.raises(LeaseLost):  # the handler's late completion is fenced out
        await complete(queue, job, {"slept_ms": 1})
    assert await queue.renew([job], lease_seconds=30) == set()
    assert (await queue.get(job.id)).status == "cancelled"  # type: ignore[union-attr]
    again = await queue.cancel(job.id, "bob", T)  # finished: nothing to withdraw from
    assert again.status is None


async def test_a_row_without_requesters_counts_its_attachments_running_too(
    queue: QueueClient,
) -> None:
    await queue.enqueue(T, "counted", {"operation": "sleep"})
    await queue.enqueue(T, "counted", {"operation": "sleep"})  # two, neither named
    (job,) = await queue.claim(T, "w1")
    first = await queue.cancel(job.id, "anyone", T)
    assert (first.status, first.requesters, first.running) == ("in_progress", 1, True)
    last = await queue.cancel(job.id, "someone else", T)
    assert (last.status, last.running) == ("cancelled", True)
    row = await queue.get(job.id)
    assert row is not None and row.cancellation == Cancellation("requesters", True, last.at)


async def test_a_pending_job_withdrawn_says_it_never_ran(queue: QueueClient) -> None:
    enq = await queue.enqueue(T, "pending", {"operation": "sleep"}, requester="alice")
    result = await queue.cancel(enq.job_id, "alice", T)
    assert (result.status, result.running) == ("cancelled", False)
    row = await queue.get(enq.job_id)
    assert row is not None and row.cancellation == Cancellation("requesters", False, result.at)
    assert row.locked_by is None and await queue.claim(T, "w1") == []


async def test_an_operators_cancel_names_the_operator(db: Database, queue: QueueClient) -> None:
    running = await _running(queue, "ops-running", "alice")
    pending = (await queue.enqueue(T, "ops-pending", {"operation": "x"}, requester="a")).job_id
    await cancel(db, Operator("ops@acme.example", "console"), running.id)
    await cancel(db, Operator("cli:root", "cli"), pending)
    ran, waited = await queue.get(running.id), await queue.get(pending)
    assert ran is not None and waited is not None
    assert ran.cancellation == Cancellation("operator", True, ran.completed_at, "ops@acme.example")
    assert waited.cancellation == Cancellation("operator", False, waited.completed_at, "cli:root")
    assert ran.completed_at is not None and ran.cancellation.says() == (
        "the job was cancelled by the operator ops@acme.example while it ran,"
        f" at {iso(ran.completed_at)}"
    )


def _hold_withdrawal(conn: psycopg.Connection, job_id: uuid.UUID, requester: str) -> None:
    """The withdrawal's statement in an open transaction: the row stays locked by it."""
    conn.execute(
        q("job_cancel"),
        {"id": job_id, "requester": requester, "cancel_channel": CHANNELS[1]},
    )


def _hold_completion(conn: psycopg.Connection, job: ClaimedJob) -> None:
    """The worker's completion statement in an open transaction (the row locked by it)."""
    conn.execute(
        q("job_complete"),
        {
            "ids": [job.id],
            "dequeue_counts": [job.dequeue_count],
            "results": ['{"slept_ms": 1}'],
            "completed_ats": [datetime.now(UTC)],
            "notes": [None],
            "blob_types": [None],
            "blob_data": [None],
            "worker_id": job.worker_id,
            "blob_ttl_seconds": 60,
        },
    )


async def _waits_on_a_lock(db: Database) -> bool:
    row = await db.fetchone(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND datname = current_database()"
    )
    return row is not None and int(row["n"]) == 1


async def test_a_withdrawal_committed_first_fences_the_completion_waiting_on_it(
    db: Database, queue: QueueClient, queue_dsn: str
) -> None:
    job = await _running(queue, "race-withdraw", "alice")
    completed: list[set[uuid.UUID]] = []
    with psycopg.connect(queue_dsn) as holder:
        _hold_withdrawal(holder, job.id, "alice")
        async with trio.open_nursery() as nursery:

            async def completion() -> None:
                completed.append(await queue.complete_many([Completion(job, {"slept_ms": 2})]))

            nursery.start_soon(completion)
            await wait_until(lambda: _waits_on_a_lock(db), within=5)  # it waits for the row
            holder.commit()
    assert completed == [set()]  # fenced out: the row it found is cancelled
    row = await queue.get(job.id)
    assert row is not None and row.status == "cancelled" and row.result is None
    assert row.cancellation is not None and row.cancellation.running


async def test_a_completion_committed_first_leaves_the_waiting_withdrawal_nothing(
    db: Database, queue: QueueClient, queue_dsn: str
) -> None:
    job = await _running(queue, "race-complete", "alice")
    withdrawn: list[CancelResult] = []
    with psycopg.connect(queue_dsn) as holder:
        _hold_completion(holder, job)
        async with trio.open_nursery() as nursery:

            async def withdrawal() -> None:
                withdrawn.append(await queue.cancel(job.id, "alice", T))

            nursery.start_soon(withdrawal)
            await wait_until(lambda: _waits_on_a_lock(db), within=5)
            holder.commit()
    assert withdrawn[0].status is None  # the BFF reads the row: 409, the job is done
    row = await queue.get(job.id)
    assert row is not None and row.status == "done" and row.result == {"slept_ms": 1}
    assert row.cancellation is None


async def test_rows_cancelled_before_0025_are_named_from_what_the_queue_kept(
    fresh_db: Callable[[str | None], str], bridge: Any, tmp_path: Path
) -> None:
    """Migration 0025 names the rows an older release cancelled: an operator's cancel by
    its audit row's actor (running when the row still names its claim), any other by the
    requesters, before it ran."""
    before = [m for m in available() if m.version < "0025"]
    for m in before:
        shutil.copy(m.path, tmp_path / m.path.name)
    async with open_database(DatabaseConfig(fresh_db(None), pool_size=1), loop=bridge) as db:
        await migrate(db, tmp_path)
        ids = {}
        for key, locked_by in (("withdrawn", None), ("by-ops", "w1"), ("finished", "w1")):
            row = await db.fetchone(
                "INSERT INTO maestro_queues (type, dedupe_key, payload, max_dequeues, client,"
                " status, locked_by, completed_at) VALUES ('surface-probe', %(k)s, '{}', 3,"
                " 'acme', %(s)s, %(w)s, now()) RETURNING id",
                {"k": key, "w": locked_by, "s": "done" if key == "finished" else "cancelled"},
            )
            assert row is not None
            ids[key] = row["id"]
        await db.execute(
            "INSERT INTO dataplane_audit (actor, via, action, target, rows)"
            " VALUES ('ops@acme.example', 'console', 'cancel', %(t)s::jsonb, 1)",
            {"t": f'{{"jobId": "{ids["by-ops"]}"}}'},
        )
        assert "0025_cancelled_by" in await migrate(db)
        queue = QueueClient(db)
        withdrawn, by_ops, finished = [await queue.get(ids[k]) for k in ids]
    assert withdrawn is not None and by_ops is not None and finished is not None
    assert withdrawn.cancellation == Cancellation("requesters", False, withdrawn.completed_at)
    assert by_ops.cancellation == Cancellation(
        "operator", True, by_ops.completed_at, "ops@acme.example"
    )
    assert finished.cancellation is None
