"""The enqueuer (``dataplane.queue.batching``) against a real Postgres: enqueues that
arrive while another is in flight share one ``job_insert_many`` statement, with the
answers ``QueueClient.enqueue`` gives one by one (coalescing included); a batch held
up and then stopped fails its callers and leaves no row behind.

An enqueue is held in flight for real: another session inserts the same dedupe key
in a transaction it keeps open, so the statement waits on the unique index."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import trio

from dataplane.core.errors import DatabaseError, DatabaseUnavailable, InvalidArgument
from dataplane.db import Database
from dataplane.queue import EnqueueResult, QueueClient
from dataplane.queue.batching import Enqueuer
from tests.conftest import wait_until

TYPE = "surface-probe"


def _payload(value: str) -> dict[str, Any]:
    return {
        "surface": "probe",
        "op": "echo",
        "params": {"value": value},
        "auth": {"client": "acme"},
    }


@pytest.fixture
def holder(queue_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A session whose open transaction holds dedupe keys (inserted, not committed)."""
    with psycopg.connect(queue_dsn) as conn:
        yield conn
        conn.rollback()


def _hold(conn: psycopg.Connection[Any], *keys: str) -> None:
    for key in keys:
        conn.execute(
            "INSERT INTO maestro_queues (type, dedupe_key, payload, max_dequeues, client)"
            " VALUES (%s, %s, '{}'::jsonb, 5, 'acme')",
            (TYPE, key),
        )


async def _lock_waiters_at_least(db: Database, n: int) -> bool:
    """Whether ``n`` sessions wait on a lock (enqueues held up by the holder's keys)."""
    row = await db.fetchone(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    )
    assert row is not None
    return int(row["n"]) >= n


async def _requesters(db: Database, key: str) -> list[tuple[str, int]]:
    rows = await db.fetchall(
        "SELECT status, requesters FROM maestro_queues WHERE dedupe_key = %(k)s", {"k": key}
    )
    return [(r["status"], r["requesters"]) for r in rows]


async def _enqueue_noting(
    enqueuer: Enqueuer, outcomes: dict[str, BaseException | EnqueueResult], key: str
) -> None:
    """Enqueue ``key``; its result, or the database error it raised, into ``outcomes``."""
    try:
        outcomes[key] = await enqueuer.enqueue(TYPE, key, _payload(key))
    except DatabaseError as exc:
        outcomes[key] = exc


async def test_enqueues_that_arrive_together_share_one_statement(
    queue: QueueClient, nursery: trio.Nursery
) -> None:
    enqueuer = Enqueuer(queue)
    await nursery.start(enqueuer.run)
    keys = [f"together-{uuid.uuid4()}" for _ in range(20)]
    results: dict[str, EnqueueResult] = {}

    async def one(key: str) -> None:
        results[key] = await enqueuer.enqueue(TYPE, key, _payload(key))

    with trio.fail_after(20):
        async with trio.open_nursery() as tasks:
            for key in keys:
                tasks.start_soon(one, key)
    stats = enqueuer.statistics()
    assert len({r.job_id for r in results.values()}) == 20
    assert not any(r.coalesced for r in results.values())
    assert stats.batched >= 2 and stats.largest >= 2  # some shared a statement
    assert stats.single + stats.statements < 20  # fewer statements than enqueues
    for key, result in results.items():
        row = await queue.get(result.job_id)
        assert row is not None and row.dedupe_key == key and row.status == "pending"


async def test_a_batch_answers_as_enqueue_does_live_keys_and_duplicates_attach(
    queue: QueueClient, db: Database, holder: psycopg.Connection[Any], nursery: trio.Nursery
) -> None:
    enqueuer = Enqueuer(queue)
    await nursery.start(enqueuer.run)
    live = await queue.enqueue(TYPE, "batch-live", _payload("live"))
    _hold(holder, "batch-held")
    results: dict[str, list[EnqueueResult]] = {}

    async def one(key: str) -> None:
        result = await enqueuer.enqueue(TYPE, key, _payload(key))
        results.setdefault(key, []).append(result)

    with trio.fail_after(20):
        async with trio.open_nursery() as tasks:
            tasks.start_soon(one, "batch-held")  # in flight: waits on the held key
            await wait_until(lambda: _lock_waiters_at_least(db, 1))
            for key in ("batch-live", "batch-dup", "batch-dup", "batch-new"):
                tasks.start_soon(one, key)
            await wait_until(lambda: len(results) == 3 and len(results["batch-dup"]) == 2)
            assert enqueuer.statistics().statements == 1  # they did not wait for the held one
            holder.rollback()  # the held key is free: its enqueue inserts
    assert [r.job_id for r in results["batch-live"]] == [live.job_id]
    assert results["batch-live"][0].coalesced
    dup = sorted(results["batch-dup"], key=lambda r: r.coalesced)
    assert dup[0].job_id == dup[1].job_id and [r.coalesced for r in dup] == [False, True]
    assert not results["batch-new"][0].coalesced and not results["batch-held"][0].coalesced
    assert await _requesters(db, "batch-live") == [("pending", 2)]
    assert await _requesters(db, "batch-dup") == [("pending", 2)]
    assert await _requesters(db, "batch-new") == [("pending", 1)]
    assert await _requesters(db, "batch-held") == [("pending", 1)]


async def test_a_stopped_enqueuer_fails_its_batch_and_leaves_no_row(
    queue: QueueClient, db: Database, holder: psycopg.Connection[Any], nursery: trio.Nursery
) -> None:
    enqueuer = Enqueuer(queue)
    running = trio.CancelScope()

    async def run_enqueuer(
        *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        with running:
            await enqueuer.run(task_status=task_status)

    await nursery.start(run_enqueuer)
    _hold(holder, "stop-first", "stop-held")
    outcomes: dict[str, BaseException | EnqueueResult] = {}

    async def one(key: str) -> None:
        await _enqueue_noting(enqueuer, outcomes, key)

    with trio.fail_after(20):
        async with trio.open_nursery() as tasks:
            tasks.start_soon(one, "stop-first")  # in flight, alone: waits on its held key
            await wait_until(lambda: _lock_waiters_at_least(db, 1))
            tasks.start_soon(one, "stop-held")  # with "stop-free": a batch, held up too
            tasks.start_soon(one, "stop-free")
            await wait_until(lambda: _lock_waiters_at_least(db, 2))
            running.cancel()  # the process shuts down with the batch under way
            await wait_until(lambda: "stop-held" in outcomes and "stop-free" in outcomes)
            holder.rollback()
    assert isinstance(outcomes["stop-held"], DatabaseUnavailable)
    assert isinstance(outcomes["stop-free"], DatabaseUnavailable)
    assert await _requesters(db, "stop-free") == []  # the batch's statement rolled back
    first = outcomes["stop-first"]
    assert isinstance(first, EnqueueResult) and not first.coalesced  # its own statement


async def test_insert_many_takes_distinct_keys(queue: QueueClient) -> None:
    params = queue.enqueue_params(TYPE, "same", _payload("x"))
    with pytest.raises(InvalidArgument):
        await queue.insert_many([params, params])


async def test_a_failed_batch_statement_leaves_each_caller_its_own(
    queue: QueueClient,
    db: Database,
    queue_dsn: str,
    holder: psycopg.Connection[Any],
    nursery: trio.Nursery,
) -> None:
    with psycopg.connect(queue_dsn, autocommit=True) as admin:  # a real statement failure
        admin.execute(
            "CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'refused %', NEW.dedupe_key; END $$"
        )
        admin.execute(
            "CREATE TRIGGER refuse_bad BEFORE INSERT ON maestro_queues FOR EACH ROW"
            " WHEN (NEW.dedupe_key = 'fail-bad') EXECUTE FUNCTION refuse_bad()"
        )
    enqueuer = Enqueuer(queue)
    await nursery.start(enqueuer.run)
    _hold(holder, "fail-held")
    outcomes: dict[str, BaseException | EnqueueResult] = {}

    async def one(key: str) -> None:
        await _enqueue_noting(enqueuer, outcomes, key)

    with trio.fail_after(20):
        async with trio.open_nursery() as tasks:
            tasks.start_soon(one, "fail-held")  # in flight: the others make a batch
            await wait_until(lambda: _lock_waiters_at_least(db, 1))
            for key in ("fail-bad", "fail-ok-1", "fail-ok-2"):
                tasks.start_soon(one, key)
            await wait_until(lambda: len(outcomes) == 3)
            holder.rollback()
    stats = enqueuer.statistics()
    assert stats.statements == 0 and stats.batched == 0  # the batch statement failed
    bad = outcomes["fail-bad"]
    assert isinstance(bad, DatabaseError) and "refused fail-bad" in str(bad)
    for key in ("fail-ok-1", "fail-ok-2", "fail-held"):
        ok = outcomes[key]
        assert isinstance(ok, EnqueueResult) and not ok.coalesced
        assert await _requesters(db, key) == [("pending", 1)]
    assert await _requesters(db, "fail-bad") == []
