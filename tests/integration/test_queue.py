"""The queue client against a real Postgres: coalescing, claims, leases, fencing,
failure and poison, expected errors, release, blobs."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest
import trio

from dataplane.core.errors import HttpError, InvalidArgument, LeaseLost
from dataplane.db import Database, DatabaseConfig, Gap, Notification, open_database
from dataplane.queue import (
    Blob,
    ClaimedJob,
    Completion,
    JobRow,
    Poisoned,
    QueueClient,
    QueueConfig,
    done_channel,
    split_done_notify,
    wake_channel,
)
from telemetry.failures import FAILURES_KEPT, AttemptFailure
from tests.conftest import wait_until
from tests.helpers import NOTIFY_SECRET, complete, read_blob

T = "surface-probe"


async def _row(db: Database, job_id: uuid.UUID) -> dict[str, object]:
    row = await db.fetchone("SELECT * FROM maestro_queues WHERE id = %(id)s", {"id": job_id})
    assert row is not None
    return dict(row)


async def test_concurrent_identical_enqueues_coalesce_on_one_row(
    queue_dsn: str, bridge: Any
) -> None:
    # 50 callers over 50 separate connections (a pool of 50, all checked out at once).
    async with open_database(DatabaseConfig(queue_dsn, pool_size=50), loop=bridge) as db:
        client = QueueClient(db)
        results = []
        gate = trio.Event()
        at_gate = 0
        all_at_gate = trio.Event()

        async def one() -> None:
            nonlocal at_gate
            at_gate += 1
            if at_gate == 50:
                all_at_gate.set()
            await gate.wait()
            results.append(await client.enqueue(T, "same-key", {"op": "echo"}))

        async with trio.open_nursery() as nursery:
            for _ in range(50):
                nursery.start_soon(one)
            await all_at_gate.wait()  # all 50 are lined up: open the gate on them at once
            gate.set()

        assert db.statistics().connects >= 25  # really concurrent, not serialised on one
        assert len({r.job_id for r in results}) == 1
        assert sorted(r.coalesced for r in results) == [False] + [True] * 49
        count = await db.fetchone("SELECT count(*) AS n FROM maestro_queues")
        assert count is not None and count["n"] == 1


async def test_finished_rows_do_not_absorb_new_requests(queue: QueueClient, db: Database) -> None:
    first = await queue.enqueue(T, "k", {})
    (job,) = await queue.claim(T, "w")
    await complete(queue, job, {"v": 1})
    second = await queue.enqueue(T, "k", {})
    assert not second.coalesced and second.job_id != first.job_id

    (job2,) = await queue.claim(T, "w", lease_seconds=60)
    await db.execute(
        "UPDATE maestro_queues SET max_dequeues = 1 WHERE id = %(id)s", {"id": job2.id}
    )
    assert await queue.fail(job2, "boom") == "poison"
    third = await queue.enqueue(T, "k", {})
    assert not third.coalesced and third.job_id not in (first.job_id, second.job_id)
    # ...while a live row does absorb.
    fourth = await queue.enqueue(T, "k", {})
    assert fourth.coalesced and fourth.job_id == third.job_id


async def test_enqueue_wakes_listeners_on_the_type_channel(
    db: Database, queue: QueueClient
) -> None:
    listener = db.listener([wake_channel(T)])
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        await queue.enqueue(T, "wake-1", {})
        with trio.fail_after(5):
            event = await listener.events.receive()
        assert event == Notification(wake_channel(T), "")
        # A coalesced enqueue inserts nothing and so wakes nobody.
        await queue.enqueue(T, "wake-1", {})
        with trio.move_on_after(0.3):
            extra = await listener.events.receive()
            pytest.fail(f"coalesced enqueue sent a notification: {extra}")
        nursery.cancel_scope.cancel()


async def test_four_claimers_take_every_job_exactly_once(queue_dsn: str, bridge: Any) -> None:
    n_jobs = 2000
    async with open_database(DatabaseConfig(queue_dsn, pool_size=8), loop=bridge) as db:
        client = QueueClient(db)

        async def produce(start: int) -> None:
            for i in range(start, n_jobs, 8):
                await client.enqueue(T, f"job-{i}", {"i": i})

        async with trio.open_nursery() as nursery:
            for s in range(8):
                nursery.start_soon(produce, s)

        claimed: dict[str, list[uuid.UUID]] = {f"w{i}": [] for i in range(4)}

        async def claimer(worker: str) -> None:
            idle = 0
            while idle < 3:
                jobs = await client.claim(T, worker, limit=25)
                if not jobs:
                    idle += 1
                    await trio.sleep(0.01)  # a polling interval: three empty claims end this one
                    continue
                idle = 0
                claimed[worker].extend(j.id for j in jobs)
                done = await client.complete_many([Completion(j, {"by": worker}) for j in jobs])
                assert done == {j.id for j in jobs}

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for worker in claimed:
                    nursery.start_soon(claimer, worker)

        every = [job for jobs in claimed.values() for job in jobs]
        assert len(every) == n_jobs
        assert len(set(every)) == n_jobs
        assert all(claimed.values()), "every claimer should have won some rows"
        stats = await db.fetchone(
            "SELECT count(*) FILTER (WHERE status = 'done') AS done,"
            " max(dequeue_count) AS max_dc, min(dequeue_count) AS min_dc FROM maestro_queues"
        )
        assert stats == {"done": n_jobs, "max_dc": 1, "min_dc": 1}


async def test_claim_takes_several_rows_oldest_first(queue: QueueClient) -> None:
    ids = [(await queue.enqueue(T, f"o-{i}", {"i": i})).job_id for i in range(5)]
    await queue.enqueue("surface-other", "other", {})
    jobs = await queue.claim(T, "w", limit=3)
    assert [j.id for j in jobs] == ids[:3]
    assert all(j.dequeue_count == 1 and j.type == T for j in jobs)
    rest = await queue.claim(T, "w", limit=10)
    assert [j.id for j in rest] == ids[3:]
    assert await queue.claim(T, "w") == []


async def _wait_claimable(queue: QueueClient, worker: str, lease: float = 30) -> ClaimedJob:
    got: list[ClaimedJob] = []

    async def claimed() -> bool:
        got.extend(await queue.claim(T, worker, lease_seconds=lease))
        return bool(got)

    await wait_until(claimed, within=10, interval=0.02)
    return got[0]


async def test_lapsed_lease_is_reclaimed_and_the_old_claim_is_fenced_out(
    queue: QueueClient, db: Database
) -> None:
    enq = await queue.enqueue(T, "lease", {})
    (old,) = await queue.claim(T, "worker-a", lease_seconds=0.2)
    assert old.dequeue_count == 1
    # Not claimable while the lease holds.
    assert await queue.claim(T, "worker-b", lease_seconds=30) == []
    new = await _wait_claimable(queue, "worker-b")
    assert new.id == enq.job_id and new.dequeue_count == 2
    before = await _row(db, enq.job_id)

    with pytest.raises(LeaseLost):
        await complete(queue, old, {"stale": True})
    assert await queue.renew([old]) == set()
    with pytest.raises(LeaseLost):
        await queue.fail(old, "stale failure")
    assert await queue.release([old]) == set()
    assert await _row(db, enq.job_id) == before  # untouched by every stale write

    assert await queue.renew([new]) == {new.id}
    await complete(queue, new, {"fresh": True})
    row = await _row(db, enq.job_id)
    assert row["status"] == "done" and row["result"] == {"fresh": True}
    assert row["locked_by"] == "worker-b" and row["dequeue_count"] == 2


async def _leases_lapsed(db: Database, *ids: uuid.UUID) -> bool:
    """Whether every listed row's lease has lapsed in Postgres' clock (``now()``)."""
    row = await db.fetchone(
        "SELECT bool_and(lease_expires_at <= now()) AS lapsed FROM maestro_queues"
        " WHERE id = ANY(%(ids)s)",
        {"ids": list(ids)},
    )
    return bool(row and row["lapsed"])


async def test_a_claim_returns_only_claimed_jobs_and_reports_the_rows_it_poisoned(
    queue: QueueClient, db: Database
) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    spent = await queue.enqueue(T, "spent", {"traceparent": traceparent}, max_dequeues=1)
    spent_too = await queue.enqueue(T, "spent-too", {}, max_dequeues=1)
    retried = await queue.enqueue(T, "retried", {}, max_dequeues=3)
    held = await queue.claim(T, "dies", limit=10, lease_seconds=0.05)
    assert {j.id for j in held} == {spent.job_id, spent_too.job_id, retried.job_id}
    fresh = await queue.enqueue(T, "fresh", {})
    await wait_until(
        lambda: _leases_lapsed(db, spent.job_id, spent_too.job_id, retried.job_id), within=5
    )

    # claim(): the spent rows in the same batch become poison and are not returned.
    listener = db.listener([done_channel(T)])
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        batch = await queue.claim_batch(T, "rescuer", limit=10)
        with trio.fail_after(5):
            heard = {(await listener.events.receive()).payload for _ in range(2)}
        nursery.cancel_scope.cancel()
    assert heard == {str(spent.job_id), str(spent_too.job_id)}
    assert [j.id for j in batch.jobs] == [retried.job_id, fresh.job_id]  # oldest first
    assert [(j.worker_id, j.dequeue_count) for j in batch.jobs] == [("rescuer", 2), ("rescuer", 1)]
    assert sorted(batch.poisoned, key=lambda p: p.traceparent is None) == [
        Poisoned(spent.job_id, T, 1, 1, traceparent),
        Poisoned(spent_too.job_id, T, 1, 1, None),
    ]
    assert batch.taken == 4
    for job_id in (spent.job_id, spent_too.job_id):
        row = await _row(db, job_id)
        assert row["status"] == "poison" and row["dequeue_count"] == 1
        assert "lease of its last attempt lapsed" in str(row["last_error"])

    # The same through claim(): a list of the claimed jobs only.
    again = await queue.enqueue(T, "spent-again", {}, max_dequeues=1)
    (dies,) = await queue.claim(T, "dies", lease_seconds=0.05)
    assert dies.id == again.job_id
    other = await queue.enqueue(T, "other", {})
    await wait_until(lambda: _leases_lapsed(db, again.job_id), within=5)
    claimed = await queue.claim(T, "rescuer", limit=10)
    assert all(isinstance(j, ClaimedJob) for j in claimed)
    assert [j.id for j in claimed] == [other.job_id]
    assert (await _row(db, again.job_id))["status"] == "poison"


async def test_fenced_write_also_needs_the_same_worker(queue: QueueClient) -> None:
    await queue.enqueue(T, "who", {})
    (job,) = await queue.claim(T, "worker-a")
    impostor = replace(job, worker_id="worker-b")
    with pytest.raises(LeaseLost):
        await complete(queue, impostor, {})
    await complete(queue, job, {})


async def test_failed_job_waits_for_its_backoff_then_poisons_at_the_cutoff(
    queue: QueueClient, db: Database
) -> None:
    enq = await queue.enqueue(T, "flaky", {}, max_dequeues=2)
    listener = db.listener([done_channel(T)])
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)

        (first,) = await queue.claim(T, "w")
        assert await queue.fail(first, "first failure", backoff_seconds=0.5) == "pending"
        row = await _row(db, enq.job_id)
        assert row["status"] == "pending" and row["last_error"] == "first failure"
        assert await queue.claim(T, "w") == []  # inside the backoff
        second = await _wait_claimable(queue, "w")
        waited = (second.claimed_at - row["available_at"]).total_seconds()  # type: ignore[operator]
        assert waited >= 0
        assert second.dequeue_count == 2
        # The wait since the row became claimable leaves the backoff out; the wait
        # since enqueue has it in.
        assert second.ready_at == row["available_at"]
        assert second.ready_wait_ms == pytest.approx(waited * 1000)
        assert second.queue_wait_ms >= 500 > second.ready_wait_ms

        assert await queue.fail(second, "second failure", backoff_seconds=0) == "poison"
        with trio.fail_after(5):
            event = await listener.events.receive()
        assert event == Notification(done_channel(T), str(enq.job_id))
        row = await _row(db, enq.job_id)
        assert row["status"] == "poison" and row["last_error"] == "second failure"
        assert row["completed_at"] is not None
        assert await queue.claim(T, "w") == []
        nursery.cancel_scope.cancel()


async def test_each_failure_s_record_is_kept_on_its_row_the_newest_20(
    queue: QueueClient, db: Database
) -> None:
    """job_fail appends the attempt's record to ``errors`` with the database's time, in
    its fenced statement, and its ``str()`` is ``last_error``: a fenced-out failure adds
    nothing; 25 failures keep the newest 20, oldest first; a NUL or an unpaired surrogate
    in a message is written escaped (jsonb and text hold neither) instead of losing the
    failure."""
    enq = await queue.enqueue(T, "kept", {}, max_dequeues=30)
    for n in range(1, 26):
        job = await _wait_claimable(queue, "w")
        record = AttemptFailure(n, "w", "KeyError", f"'oops' {n}\x00\ud800", "Traceback\n")
        assert await queue.fail(job, record, backoff_seconds=0)
        if n == 25:
            with pytest.raises(LeaseLost):  # fenced: the claim is no longer held
                await queue.fail(job, record, backoff_seconds=0)
    row = await _row(db, enq.job_id)
    errors = row["errors"]
    assert isinstance(errors, list) and len(errors) == FAILURES_KEPT == 20
    kept = [AttemptFailure.from_json(e) for e in errors]
    assert [k.attempt for k in kept if k] == list(range(6, 26))
    newest = kept[-1]
    assert newest is not None and newest.message == "'oops' 25\\x00\\ud800"
    assert newest.worker == "w" and newest.type == "KeyError" and newest.traceback
    stamps = [k.at for k in kept if k]
    assert all(stamps) and stamps == sorted(stamps)  # type: ignore[type-var]
    assert row["last_error"] == "KeyError: 'oops' 25\\x00\\ud800"  # the record's str()
    # A failure given as text alone (the queue's callers with no record) keeps the rest.
    job = await _wait_claimable(queue, "w")
    await queue.fail(job, "no record", backoff_seconds=0)
    assert (await _row(db, enq.job_id))["errors"] == errors


async def test_expected_error_completes_with_the_error_payload(
    queue: QueueClient, db: Database
) -> None:
    enq = await queue.enqueue(T, "forbidden", {})
    (job,) = await queue.claim(T, "w")
    await complete(queue, job, HttpError(403, "staff only").to_payload())
    row = await _row(db, enq.job_id)
    assert row["status"] == "done"
    assert row["result"] == {"error": {"status": 403, "message": "staff only"}}
    assert row["dequeue_count"] == 1
    assert await queue.claim(T, "w") == []


async def test_release_returns_the_row_without_counting_toward_poison(
    queue: QueueClient, db: Database
) -> None:
    enq = await queue.enqueue(T, "released", {}, max_dequeues=2)
    for _ in range(5):  # more releases than the dequeue budget
        (job,) = await queue.claim(T, "w")
        assert job.dequeue_count == 1
        assert await queue.release([job]) == {enq.job_id}
        row = await _row(db, enq.job_id)
        assert row["status"] == "pending" and row["dequeue_count"] == 0
        assert row["locked_by"] is None
    (job,) = await queue.claim(T, "w")
    await complete(queue, job, {"ok": 1})
    assert (await _row(db, enq.job_id))["status"] == "done"


async def test_done_notify_always_finds_the_finished_row(queue_dsn: str, bridge: Any) -> None:
    """Under concurrency, every listener wake-up can read the row it names."""
    n_jobs = 300
    async with open_database(DatabaseConfig(queue_dsn, pool_size=12), loop=bridge) as db:
        client = QueueClient(db, QueueConfig(notify_secret=NOTIFY_SECRET))  # answers ride
        for i in range(n_jobs):
            await client.enqueue(T, f"n-{i}", {"i": i})
        listener = db.listener([done_channel(T)])
        seen: dict[str, dict[str, object]] = {}

        carried: list[tuple[JobRow, JobRow]] = []

        async def reader() -> None:
            async for event in listener.events:
                assert isinstance(event, Notification)
                job_id, sealed = split_done_notify(event.payload)
                assert client.seal is not None
                note = None if sealed is None else client.seal.open(str(job_id), sealed)
                answer = None if note is None else JobRow.from_done_note(job_id, note)
                row = await client.get(job_id)  # a fresh read, another connection
                assert row is not None
                if answer is not None:
                    carried.append((answer, row))
                seen[str(job_id)] = {"status": row.status, "result": row.result}
                if len(seen) == n_jobs:
                    return

        async def completer(worker: str) -> None:
            while jobs := await client.claim(T, worker, limit=7):
                await client.complete_many([Completion(j, {"i": j.payload["i"]}) for j in jobs])

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                await nursery.start(listener.run)
                nursery.start_soon(reader)
                async with trio.open_nursery() as workers:
                    for w in range(6):
                        workers.start_soon(completer, f"w{w}")
                await wait_until(lambda: len(seen) == n_jobs, within=30)
                nursery.cancel_scope.cancel()
        assert len(seen) == n_jobs
        assert all(v["status"] == "done" and v["result"] is not None for v in seen.values())
        # Small answers ride in the notify, and what it carries is what the row holds.
        assert len(carried) == n_jobs
        for answer, row in carried:
            assert (answer.id, answer.type, answer.status, answer.result) == (
                row.id,
                row.type,
                row.status,
                row.result,
            )
            assert (answer.dequeue_count, answer.max_dequeues) == (
                row.dequeue_count,
                row.max_dequeues,
            )
            assert (answer.created_at, answer.claimed_at, answer.completed_at) == (
                row.created_at,
                row.claimed_at,
                row.completed_at,
            )


async def test_blob_goes_in_with_the_completion_and_only_then(
    queue: QueueClient, db: Database
) -> None:
    enq = await queue.enqueue(T, "pdf", {})
    (job,) = await queue.claim(T, "w", lease_seconds=0.1)
    pdf = b"%PDF-1.7\n" + bytes(range(256)) * 10
    await complete(queue, job, {"blobRef": {"size": len(pdf)}}, blob=Blob("application/pdf", pdf))
    blob = await read_blob(queue, enq.job_id)
    assert blob is not None and blob.data == pdf and blob.size == len(pdf)
    assert blob.content_type == "application/pdf"

    # A fenced-out completion writes no blob.
    enq2 = await queue.enqueue(T, "pdf2", {})
    (stale,) = await queue.claim(T, "a", lease_seconds=0.1)
    fresh = await _wait_claimable(queue, "b")
    with pytest.raises(LeaseLost):
        await complete(queue, stale, {}, blob=Blob("application/pdf", b"stale"))
    assert await read_blob(queue, enq2.job_id) is None
    await complete(queue, fresh, {}, blob=Blob("application/pdf", b"fresh"))
    got = await read_blob(queue, enq2.job_id)
    assert got is not None and got.data == b"fresh"


async def test_listener_reconnects_after_its_connection_is_killed(
    db: Database, queue: QueueClient
) -> None:
    listener = db.listener([wake_channel(T)], reconnect_delays=(0.1, 0.2), check_interval=0.5)
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        pid = listener.backend_pid()
        assert pid is not None
        await db.fetchone("SELECT pg_terminate_backend(%(pid)s)", {"pid": pid})
        with trio.fail_after(10):
            event = await listener.events.receive()
        assert isinstance(event, Gap)
        assert listener.backend_pid() not in (None, pid)
        await queue.enqueue(T, "after-reconnect", {})
        with trio.fail_after(5):
            event = await listener.events.receive()
        assert event == Notification(wake_channel(T), "")
        assert listener.statistics().reconnects == 1
        nursery.cancel_scope.cancel()


async def test_listener_listens_and_unlistens_while_it_runs_and_after_a_reconnect(
    db: Database, queue: QueueClient
) -> None:
    wake, other = wake_channel(T), "dataplane_test_other"
    # A 60 s wait for notifications: listen() and unlisten() must interrupt it.
    listener = db.listener([other], reconnect_delays=(0.1, 0.2), check_interval=60)
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        with trio.fail_after(5):
            await listener.listen(wake)
        assert listener.statistics().listening == (other, wake)
        await queue.enqueue(T, "heard", {})
        with trio.fail_after(5):
            assert await listener.events.receive() == Notification(wake, "")

        with trio.fail_after(5):
            await listener.unlisten(wake)
        assert listener.statistics().listening == (other,)
        # Commit order is delivery order: were the wake channel still listened, its
        # notification would come before the marker.
        await queue.enqueue(T, "not-heard", {})
        await queue.notify(other, "marker")
        with trio.fail_after(5):
            assert await listener.events.receive() == Notification(other, "marker")

        # A reconnect listens on what is wanted now: not the wake channel.
        pid = listener.backend_pid()
        assert pid is not None
        await db.fetchone("SELECT pg_terminate_backend(%(pid)s)", {"pid": pid})
        with trio.fail_after(10):
            assert isinstance(await listener.events.receive(), Gap)
        assert listener.statistics().listening == (other,)
        await queue.enqueue(T, "not-heard-either", {})
        await queue.notify(other, "marker-2")
        with trio.fail_after(5):
            assert await listener.events.receive() == Notification(other, "marker-2")
        # ... and one wanted while the connection is lost is listened on by the reconnect.
        pid = listener.backend_pid()
        await db.fetchone("SELECT pg_terminate_backend(%(pid)s)", {"pid": pid})
        with trio.fail_after(10):
            await listener.listen(wake)  # returns at once if the loss is already known
            assert isinstance(await listener.events.receive(), Gap)
        assert listener.statistics().listening == (other, wake)
        await queue.enqueue(T, "heard-again", {})
        with trio.fail_after(5):
            assert await listener.events.receive() == Notification(wake, "")
        nursery.cancel_scope.cancel()


async def test_done_channel_matches_the_sql_function(db: Database) -> None:
    for t in ("surface-probe", "surface-probe-dev", "surface-learner_views"):
        row = await db.fetchone("SELECT maestro_done_channel(%(t)s) AS c", {"t": t})
        assert row is not None and row["c"] == done_channel(t)
    assert done_channel("surface-x-dev") != done_channel("surface-x")


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.enqueue("Surface Probe", "k", {}),
        lambda c: c.enqueue("surface-" + "x" * 60, "k", {}),
        lambda c: c.enqueue(T, "", {}),
        lambda c: c.enqueue(T, "k", ["not", "an", "object"]),
        lambda c: c.enqueue(T, "k", {"when": object()}),
        lambda c: c.enqueue(T, "k", {"nan": float("nan")}),
        lambda c: c.enqueue(T, "k", {"nul": "a\x00b"}),
        lambda c: c.enqueue(T, "k", {}, max_dequeues=0),
        lambda c: c.claim(T, "w", lease_seconds=-1),
        lambda c: c.claim(T, "w", limit=0),
        lambda c: c.claim(T, "", limit=1),
        lambda c: c.list_jobs(status="finished"),
        lambda c: c.get("not-a-uuid"),
        lambda c: c.notify("dataplane_invalidate", "x" * 8000),
        lambda c: c.notify("x" * 64, ""),
        lambda c: c.invalidate("u:\ud800"),
        lambda c: c.invalidate("ok", ""),
        lambda c: c.invalidate("t" * 10_000),
    ],
)
async def test_bad_input_raises_a_clear_error(queue: QueueClient, call: object) -> None:
    with pytest.raises(InvalidArgument):
        await call(queue)  # type: ignore[operator]
    assert (await queue.list_jobs()) == []  # nothing written


def test_http_error_accepts_only_expected_statuses() -> None:
    for status in (400, 403, 404):
        assert HttpError(status, "x").to_payload() == {"error": {"status": status, "message": "x"}}
    for status in (200, 401, 500):
        with pytest.raises(InvalidArgument):
            HttpError(status, "x")


async def _claims_in_one_transaction(conn: Any, queue_type: str, claims: int) -> tuple[int, int]:
    """Rows taken by ``claims`` claims of 4, and the sequential scans of the queue table
    they made (this transaction's own statistics)."""
    taken = 0
    async with conn.transaction():
        for _ in range(claims):
            cur = await conn.execute(
                "SELECT * FROM maestro_claim(%(t)s, 'w-plan', 4, 30)", {"t": queue_type}
            )
            taken += len(await cur.fetchall())
        cur = await conn.execute(
            "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'maestro_queues'"
        )
        row = await cur.fetchone()
    return taken, int(row["seq_scan"]) if row else 0


@pytest.mark.parametrize("clients", [1, 5])
async def test_the_claim_keeps_one_plan_that_reads_the_table_by_index(
    db: Database, clients: int
) -> None:
    """The claim function is planned once per session (a generic plan, forced): that
    plan must reach and update its rows through indexes whatever the table holds,
    FIFO (one client) and fair (several). A generic plan costed for an unknown LIMIT
    hash-joins the claimed rows over a scan of the whole table."""
    config = await db.fetchone("SELECT proconfig FROM pg_proc WHERE proname = 'maestro_claim'", {})
    assert config is not None and "plan_cache_mode=force_generic_plan" in config["proconfig"]
    queue_type = f"surface-plan{clients}"
    await db.execute(
        "INSERT INTO maestro_queues (type, dedupe_key, payload, client)"
        " SELECT %(t)s, %(t)s || '-' || g, '{}'::jsonb, 'c' || (g %% %(n)s)"
        " FROM generate_series(1, 5000) AS g",
        {"t": queue_type, "n": clients},
    )
    await db.execute("ANALYZE maestro_queues", {})
    taken, seq_scans = await db.run(_claims_in_one_transaction, queue_type, 8)
    assert taken == 32
    assert seq_scans == 0


async def _plan_idle_then_grow(conn: Any, queue_type: str) -> tuple[int, int]:
    """Claim on an almost empty queue (the session's plan is made then), let a backlog
    of 20,000 rows arrive with no ANALYZE since, and claim again."""
    for i in range(3):
        await conn.execute(
            "INSERT INTO maestro_queues (type, dedupe_key, payload) VALUES (%(t)s, %(k)s, '{}')",
            {"t": queue_type, "k": f"idle-{i}"},
        )
        await conn.execute("SELECT * FROM maestro_claim(%(t)s, 'w-plan', 4, 30)", {"t": queue_type})
    await conn.execute(
        "INSERT INTO maestro_queues (type, dedupe_key, payload)"
        " SELECT %(t)s, 'backlog-' || g, '{}'::jsonb FROM generate_series(1, 20000) AS g",
        {"t": queue_type},
    )
    return await _claims_in_one_transaction(conn, queue_type, 4)


async def test_a_claim_planned_at_idle_still_reads_a_later_backlog_by_index(
    db: Database,
) -> None:
    """The session's plan is made at its first claim, often on an empty queue, and kept
    until the table is next analyzed. Planned for a tiny table, the claim would scan
    the whole table at every claim once a backlog arrives (110-200 ms per claim at
    100,000 rows): the function plans with sequential scans off."""
    await db.execute("ANALYZE maestro_queues", {})
    taken, seq_scans = await db.run(_plan_idle_then_grow, "surface-grow")
    assert taken == 16
    assert seq_scans == 0
