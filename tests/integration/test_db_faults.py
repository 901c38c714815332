"""Losing the database mid-call raises, never hangs past its timeout, and never
leaves a row half-updated."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
import trio

from dataplane.core.errors import DatabaseError, DatabaseUnavailable, PoolTimeout
from dataplane.db import Database, DatabaseConfig, open_database
from dataplane.queue import QueueClient
from tests.conftest import wait_until
from tests.helpers import complete

T = "surface-probe"


async def _backend_of(db: Database, pattern: str) -> int:
    found: list[int] = []

    async def look() -> bool:
        rows = await db.fetchall(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE %(p)s AND pid <> pg_backend_pid()",
            {"p": pattern},
        )
        found.extend(r["pid"] for r in rows)
        return bool(found)

    await wait_until(look, within=5)
    return found[0]


async def test_a_killed_connection_raises_unavailable_and_the_pool_recovers(
    db: Database, queue_dsn: str, bridge: Any
) -> None:
    async with open_database(DatabaseConfig(queue_dsn, pool_size=2), loop=bridge) as victim:
        errors: list[BaseException] = []

        async def sleeper() -> None:
            try:
                await victim.fetchone("SELECT pg_sleep(30) AS slept_in_test")
            except DatabaseUnavailable as exc:
                errors.append(exc)

        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            pid = await _backend_of(db, "%slept_in_test%")
            await db.fetchone("SELECT pg_terminate_backend(%(pid)s)", {"pid": pid})
        assert len(errors) == 1
        assert time.monotonic() - started < 10
        row = await victim.fetchone("SELECT 1 AS one")  # a new connection replaces the dead one
        assert row == {"one": 1}


async def test_a_call_never_outlives_its_timeout(db: Database) -> None:
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable, match="timed out"):
        await db.fetchone("SELECT pg_sleep(30)", call_timeout=0.3)
    assert time.monotonic() - started < 6  # the timeout plus the server-side cancel
    assert await db.fetchone("SELECT 2 AS two") == {"two": 2}


async def test_pool_acquire_times_out_when_every_connection_is_busy(
    queue_dsn: str, bridge: Any
) -> None:
    config = DatabaseConfig(queue_dsn, pool_size=1, acquire_timeout=0.2)
    async with open_database(config, loop=bridge) as small, trio.open_nursery() as nursery:
        nursery.start_soon(small.fetchone, "SELECT pg_sleep(1)")
        await wait_until(lambda: small.statistics().in_use == 1, within=5)  # it holds the one slot
        with pytest.raises(PoolTimeout):
            await small.fetchone("SELECT 1")
    assert small.statistics().acquire_timeouts == 1


async def test_a_statement_in_a_cancelled_scope_is_cancelled_and_gives_its_slot_back(
    queue_dsn: str, bridge: Any
) -> None:
    """Taking a free slot is no checkpoint (the crossing that follows is one): a
    cancelled caller still never runs its statement, and the slot comes back."""
    config = DatabaseConfig(queue_dsn, pool_size=1)
    async with open_database(config, loop=bridge) as small:
        await small.fetchone("SELECT 1")  # its one connection opened, idle, slot free
        with trio.CancelScope() as scope:
            scope.cancel()
            await small.execute("CREATE TABLE cancelled_before_it_ran (x int)")
        assert scope.cancelled_caught
        assert small.statistics().in_use == 0
        row = await small.fetchone("SELECT to_regclass('cancelled_before_it_ran') AS t")
    assert row == {"t": None}


async def test_an_interrupted_completion_leaves_the_row_as_it_was(
    db: Database, queue: QueueClient, queue_dsn: str, bridge: Any
) -> None:
    enq = await queue.enqueue(T, "locked", {})
    (job,) = await queue.claim(T, "w")
    before = await db.fetchone("SELECT * FROM maestro_queues WHERE id = %(id)s", {"id": job.id})

    # Another session holds the row, so the completion blocks inside its statement...
    with psycopg.connect(queue_dsn, autocommit=False) as holder:
        holder.execute("SELECT 1 FROM maestro_queues WHERE id = %s FOR UPDATE", (job.id,))
        impatient = DatabaseConfig(queue_dsn, pool_size=1, call_timeout=0.5)
        async with open_database(impatient, loop=bridge) as worker:
            # ...once cut off by its call timeout,
            with pytest.raises(DatabaseUnavailable, match="timed out"):
                await complete(QueueClient(worker), job, {"late": 1})
            # ...once by the caller's own cancel scope,
            with trio.move_on_after(0.3) as scope:
                await complete(QueueClient(worker), job, {"late": 2})
            assert scope.cancelled_caught
        async with open_database(DatabaseConfig(queue_dsn, pool_size=1), loop=bridge) as worker:
            # ...and once by its connection being killed.
            errors: list[BaseException] = []

            async def complete_late() -> None:
                try:
                    await complete(QueueClient(worker), job, {"late": 3})
                except DatabaseError as exc:
                    errors.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(complete_late)
                pid = await _backend_of(db, "%UPDATE maestro_queues q%SET status = 'done'%")
                await db.fetchone("SELECT pg_terminate_backend(%(pid)s)", {"pid": pid})
            assert len(errors) == 1 and isinstance(errors[0], DatabaseUnavailable)
        holder.rollback()

    after = await db.fetchone("SELECT * FROM maestro_queues WHERE id = %(id)s", {"id": job.id})
    assert after == before
    assert after is not None and after["status"] == "in_progress" and after["result"] is None
    await complete(queue, job, {"finally": True})  # the claim itself is still good
    done = await queue.get(enq.job_id)
    assert done is not None and done.result == {"finally": True}


async def test_unreachable_database_raises_promptly(bridge: Any) -> None:
    from dataplane.dev.embedded import free_port

    config = DatabaseConfig(
        f"host=127.0.0.1 port={free_port()} user=nobody dbname=none", connect_timeout=2
    )
    started = time.monotonic()
    async with open_database(config, loop=bridge) as nowhere:
        with pytest.raises(DatabaseUnavailable):
            await nowhere.fetchone("SELECT 1")
    assert time.monotonic() - started < 5


async def test_a_refused_statement_keeps_the_connection(db: Database) -> None:
    with pytest.raises(DatabaseError) as info:
        await db.fetchone("SELECT * FROM no_such_table")
    assert not isinstance(info.value, DatabaseUnavailable)
    assert info.value.sqlstate == "42P01"
    connects = db.statistics().connects
    assert await db.fetchone("SELECT 3 AS three") == {"three": 3}
    assert db.statistics().connects == connects  # reused, not reconnected
