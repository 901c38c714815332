"""LeanConnection (psycopg without a loop timer per wait): statements, errors and a
cancelled statement behave as with psycopg's own wait."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import trio

from dataplane.compat import psycopg as compat_psycopg
from dataplane.compat.psycopg import LeanConnection
from dataplane.core.errors import DatabaseError, DatabaseUnavailable
from dataplane.db import Database, DatabaseConfig, open_database, with_params
from dataplane.db.connection import connection_class, use_connection_class
from dataplane.db.lock import SessionLock
from tests.conftest import wait_until


@pytest.fixture(autouse=True)
def _lean_wait() -> Iterator[None]:
    """LeanConnection installed whatever the kill switch says; as it was afterwards."""
    before = connection_class()
    compat_psycopg.install(frozenset())
    yield
    use_connection_class(before)


async def test_the_pool_runs_its_statements_on_lean_connections(db: Database) -> None:
    assert await db.fetchone("SELECT 1 AS one") == {"one": 1}
    assert db._idle and all(isinstance(conn, LeanConnection) for conn in db._idle)
    big = await db.fetchone("SELECT repeat('x', 3000000) AS big")  # many reads for one answer
    assert big is not None and len(big["big"]) == 3_000_000
    with pytest.raises(DatabaseError, match="22012"):  # division_by_zero, and the conn is fine
        await db.fetchone("SELECT 1 / 0")
    assert await db.fetchone("SELECT 2 AS two") == {"two": 2}


async def test_a_timed_out_statement_is_cancelled_on_the_server(db: Database) -> None:
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable, match="timed out"):
        await db.fetchone("SELECT pg_sleep(30) AS lean_cancel_in_test", call_timeout=0.3)
    assert time.monotonic() - started < 6

    async def gone() -> bool:
        rows = await db.fetchall(
            "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE %(p)s"
            " AND pid <> pg_backend_pid()",
            {"p": "%lean_cancel_in_test%"},
        )
        return not rows

    await wait_until(gone, within=5)  # psycopg's cancel request reached the server


async def test_a_timed_wait_wakes_at_its_deadline_not_every_tenth_of_a_second(
    db: Database,
) -> None:
    """The listener's ``notifies(timeout=...)``: psycopg polls every 0.1 s, which woke an
    idle listening process ten times a second; a LeanConnection's timed wait polls at the
    deadline only, and a notification still ends it at once."""
    from psycopg.generators import notifies

    def counting(conn: LeanConnection, sends: list[int]) -> Any:
        gen = notifies(conn.pgconn)
        value = next(gen)
        try:
            while True:
                ready = yield value
                sends.append(ready)
                value = gen.send(ready)
        except StopIteration as done:
            return done.value

    listening: list[bool] = []  # set on the asyncio side, polled from Trio

    async def wait(conn: LeanConnection, within: float) -> tuple[list[int], float]:
        await conn.execute("LISTEN lean_timed_wait")
        listening.append(True)
        sends: list[int] = []
        started = time.monotonic()
        got = None
        with contextlib.suppress(psycopg.errors._WaitTimeout):
            got = await conn.wait(counting(conn, sends), timeout=within)
        await conn.execute("UNLISTEN lean_timed_wait")
        return sends if got is None else [*sends, -len(got)], time.monotonic() - started

    sends, took = await db.run(wait, 0.8)
    assert 0.7 <= took < 3
    assert len(sends) <= 2, f"{len(sends)} wake-ups in {took:.2f} s: polling every 0.1 s"
    listening.clear()
    async with trio.open_nursery() as nursery:
        got: list[tuple[list[int], float]] = []

        async def waiter() -> None:
            got.append(await db.run(wait, 5.0))

        nursery.start_soon(waiter)
        await wait_until(lambda: listening)
        await db.execute("NOTIFY lean_timed_wait, 'hi'")
    ((sends, took),) = got
    assert took < 2 and sends[-1] == -1, (sends, took)  # the notification ended it at once


@pytest.mark.parametrize("read_only", [False, True])
async def test_the_dsns_own_startup_options_are_kept(
    queue_dsn: str, bridge: Any, read_only: bool
) -> None:
    """A deployer's ``options`` in the URL (a search_path, a statement_timeout) reach
    the server, and a client DB's pool adds its read-only default to them."""
    dsn = with_params(queue_dsn, options="-c statement_timeout=4321")
    async with open_database(DatabaseConfig(dsn, pool_size=1, read_only=read_only)) as pool:
        row = await pool.fetchone(
            "SELECT current_setting('statement_timeout') AS timeout,"
            " current_setting('default_transaction_read_only') AS ro"
        )
    assert row == {"timeout": "4321ms", "ro": "on" if read_only else "off"}


async def test_a_statement_timeout_leaves_the_pools_connections_alone(
    queue_dsn: str, bridge: Any
) -> None:
    """A statement the server cancels at its statement_timeout is the caller's error
    (``DatabaseUnavailable``, 57014); the link is fine, so neither the idle connections
    nor the one it ran on are thrown away, as they are when the link drops."""
    dsn = with_params(queue_dsn, options="-c statement_timeout=100")
    async with open_database(DatabaseConfig(dsn, pool_size=2)) as pool:
        async with trio.open_nursery() as nursery:  # two connections, both idle after
            for _ in range(2):
                nursery.start_soon(pool.fetchone, "SELECT pg_sleep(0.05)")
        assert pool.statistics().connects == 2
        with pytest.raises(DatabaseUnavailable, match="statement timeout"):
            await pool.fetchone("SELECT pg_sleep(1)")
        assert await pool.fetchone("SELECT 1 AS one") == {"one": 1}
        stats = pool.statistics()
    assert (stats.connects, stats.discarded) == (2, 0)


async def test_a_lock_wait_outlasts_the_urls_statement_and_lock_timeouts(
    queue_dsn: str, bridge: Any
) -> None:
    """The on-call lock waits inside Postgres for as long as another worker holds it:
    a statement_timeout or lock_timeout in the URL must not cancel that wait."""
    config = DatabaseConfig(
        with_params(queue_dsn, options="-c statement_timeout=100 -c lock_timeout=100")
    )
    holder, waiter = (
        SessionLock(config, "untimed", loop=bridge),
        SessionLock(config, "untimed", loop=bridge),
    )
    try:
        await holder.acquire()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter.acquire)
            await trio.sleep(0.5)  # well past both timeouts
            assert not waiter.held
            await holder.release()
            await wait_until(lambda: waiter.held, within=5)
    finally:
        holder.close()
        waiter.close()


async def test_statements_and_timed_waits_use_the_bridges_waiters_not_the_loops_readers(
    db: Database, bridge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement's socket waits, and the listener's timed ones, go through the bridge's
    own Trio waiters (dataplane.db.bridge.wait_fd): trio-asyncio's add_reader spawns a
    task, queues a handle and is cancelled per wait, and its timers are heap entries."""

    def refused(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("a wait went through the loop's reader or timer")

    await db.fetchone("SELECT 1")  # connecting is psycopg's own wait: done before
    monkeypatch.setattr(bridge, "add_reader", refused)
    monkeypatch.setattr(bridge, "call_later", refused)
    assert await db.fetchone("SELECT pg_sleep(0.05), 1 AS one") == {"pg_sleep": "", "one": 1}

    async def drain(conn: LeanConnection) -> tuple[int, float]:
        await conn.execute("LISTEN lean_bridge_wait")
        started = time.monotonic()
        got = [n async for n in conn.notifies(timeout=0.2)]
        await conn.execute("UNLISTEN lean_bridge_wait")
        return len(got), time.monotonic() - started

    count, took = await db.run(drain)
    assert count == 0 and 0.15 <= took < 2
