"""An operator's cancel (issue #41) against a real Postgres: a pending or running job
ends ``cancelled`` with its lease cleared, its done channel (and, running, its type's
cancel channel) notified in the same transaction as its audit row; a late completion is
fenced out; a finished job is a conflict naming its status, an unknown id not found;
and the worker's check of a cancel notify believes the row, never the notify."""

from __future__ import annotations

import uuid

import pytest
import trio

from dataplane.core.errors import InvalidArgument, LeaseLost
from dataplane.db import Database, Notification
from dataplane.operator import Conflict, NotFound, Operator, cancel, cancel_command, list_audit
from dataplane.queue import QueueClient, QueueType, done_channel
from dataplane.worker.claims.cancels import CancelWatch
from dataplane.worker.claims.held import HeldJobs
from tests.conftest import wait_until
from tests.helpers import complete, submit
from tests.integration.test_roles import REPORT
from tests.integration.test_worker import running_worker

T = "surface-probe"
OPS = Operator("ops@acme.example", "console")


async def _enqueue(queue: QueueClient, key: str) -> uuid.UUID:
    return (await queue.enqueue(T, key, {"operation": "sleep"})).job_id


async def _heard(db: Database, channels: list[str], act: object) -> list[Notification]:
    """The notifies on ``channels`` that ``act()`` (awaited) sends, within 5 s."""
    listener = db.listener(channels)
    heard: list[Notification] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        await act()  # type: ignore[operator]
        with trio.move_on_after(5):
            async for event in listener.events:
                if isinstance(event, Notification):
                    heard.append(event)
                    if len(heard) == len(channels):
                        break
        nursery.cancel_scope.cancel()
    return heard


async def test_a_running_job_is_cancelled_its_streams_and_worker_told_audited(
    db: Database, queue: QueueClient
) -> None:
    job_id = await _enqueue(queue, "running")
    (job,) = await queue.claim(T, "w1")
    channels = [done_channel(T), QueueType.parse(T).cancel_channel]
    outcomes = []

    async def act() -> None:
        outcomes.append(await cancel(db, OPS, str(job_id)))

    heard = await _heard(db, channels, act)
    assert outcomes[0].status_before == "in_progress" and outcomes[0].status_after == "cancelled"
    assert sorted((n.channel, n.payload) for n in heard) == sorted(
        (c, str(job_id)) for c in channels
    )
    row = await queue.get(job_id)
    assert row is not None and row.status == "cancelled" and row.completed_at is not None
    assert row.lease_expires_at is None
    assert row.locked_by == "w1" and row.dequeue_count == job.dequeue_count  # the claim named
    # The worker's late completion is fenced out; the row stays cancelled.
    with pytest.raises(LeaseLost):
        await complete(queue, job, {"slept_ms": 1})
    assert (await queue.get(job_id)).status == "cancelled"  # type: ignore[union-attr]
    assert await queue.renew([job], lease_seconds=30) == set()
    (audit,) = await list_audit(db)
    assert (audit.action, audit.target, audit.rows) == ("cancel", {"jobId": str(job_id)}, 1)
    assert audit.actor == OPS.actor and audit.via == "console"


async def test_a_pending_job_is_cancelled_never_claimed_and_its_worker_not_told(
    db: Database, queue: QueueClient
) -> None:
    job_id = await _enqueue(queue, "pending")
    outcomes = []

    async def act() -> None:
        outcomes.append(await cancel(db, OPS, job_id))

    heard = await _heard(db, [done_channel(T), QueueType.parse(T).cancel_channel], act)
    assert outcomes[0].status_before == "pending"
    assert [(n.channel, n.payload) for n in heard] == [(done_channel(T), str(job_id))]
    assert await queue.claim(T, "w1") == []
    assert (await queue.get(job_id)).status == "cancelled"  # type: ignore[union-attr]


async def test_a_finished_job_is_a_conflict_naming_its_status_and_changes_nothing(
    db: Database, queue: QueueClient, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = await _enqueue(queue, "done")
    (job,) = await queue.claim(T, "w1")
    await complete(queue, job, {"slept_ms": 1})
    with pytest.raises(Conflict) as info:
        await cancel(db, OPS, job_id)
    assert info.value.status == "done" and info.value.http_status == 409
    assert "done" in str(info.value)
    await cancel(db, OPS, job_id := await _enqueue(queue, "twice"))
    with pytest.raises(Conflict) as again:
        await cancel(db, OPS, job_id)
    assert again.value.status == "cancelled"
    assert len(await list_audit(db)) == 1  # the one cancel that changed a row
    assert await cancel_command(db, str(job_id)) == 1
    assert "cancelled" in capsys.readouterr().err


async def test_an_unknown_or_malformed_id_is_not_found_and_the_cli_exits_1(
    db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    unknown = uuid.uuid4()
    with pytest.raises(NotFound) as info:
        await cancel(db, OPS, unknown)
    assert info.value.http_status == 404
    with pytest.raises(InvalidArgument):
        await cancel(db, OPS, "not-a-uuid")
    assert await cancel_command(db, str(unknown)) == 1
    assert f"no job {unknown}" in capsys.readouterr().err
    assert await cancel_command(db, "nope") == 1
    assert await list_audit(db) == []


async def test_the_cli_command_cancels_and_says_so(
    db: Database, queue: QueueClient, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = await _enqueue(queue, "cli")
    await queue.claim(T, "w1")
    assert await cancel_command(db, str(job_id)) == 0
    assert capsys.readouterr().out.strip() == f"job {job_id} cancelled (it was running)"
    (audit,) = await list_audit(db)
    assert audit.via == "cli" and audit.actor.startswith("cli:")


async def test_the_worker_believes_the_row_not_the_notify(db: Database, queue: QueueClient) -> None:
    held = HeldJobs()
    watch = CancelWatch(queue, held)
    await _enqueue(queue, "forged")
    await _enqueue(queue, "real")
    forged_job, real_job = await queue.claim(T, "w1", limit=2)
    forged, real = held.add(forged_job), held.add(real_job)
    async with trio.open_nursery() as nursery:
        await nursery.start(watch.run)
        watch.heard(str(forged_job.id))  # no cancel behind it: anyone may NOTIFY
        watch.heard("not an id")
        watch.heard(str(uuid.uuid4()))  # a job this worker does not hold
        await cancel(db, OPS, real_job.id)
        watch.heard(f" {real_job.id} ")
        await wait_until(lambda: watch.cancelled + watch.refused == 2, within=5)
        nursery.cancel_scope.cancel()
    assert (watch.cancelled, watch.refused, watch.ignored) == (1, 1, 2)
    assert real.cancelled and real.lost and real.scope.cancel_called
    assert not (forged.cancelled or forged.lost or forged.scope.cancel_called)
    assert (await queue.get(forged_job.id)).status == "in_progress"  # type: ignore[union-attr]


async def test_the_worker_cancels_the_handler_and_reports_the_attempt_cancelled(
    db: Database, queue: QueueClient
) -> None:
    # Renewals far apart: only the cancel notify can stop the handler within the bound.
    async with running_worker(queue, lease_seconds=60, renew_seconds=30) as (worker, reports):
        enq = await submit(queue, "probe", "sleep", {"ms": 30_000})
        await wait_until(lambda: _in_progress(queue, enq.job_id), within=5)
        await cancel(db, OPS, enq.job_id)
        with trio.fail_after(2):
            await worker.held.wait_idle()
        stats = worker.statistics()
        assert (stats.cancelled, stats.lost, stats.released, stats.done) == (1, 0, 0, 0)
        assert worker.cancels.cancelled == 1
    assert [r.outcome for r in reports.items] == ["cancelled"]
    assert (await queue.get(enq.job_id)).status == "cancelled"  # type: ignore[union-attr]
    # The report's outcome is one worker_runs stores (migration 0019).
    await db.execute(REPORT.replace("'done'", "'cancelled'"))
    assert await db.fetchone("SELECT 1 FROM worker_runs WHERE outcome = 'cancelled'")


async def _in_progress(queue: QueueClient, job_id: uuid.UUID) -> bool:
    row = await queue.get(job_id)
    return row is not None and row.status == "in_progress"
