"""A libpq multi-host DSN whose first host is down: every path that connects serves.

Issue #33: the plane reaches a Patroni primary through ``host=a,b port=…,…
target_session_attrs=read-write``. Here the first host is a closed port (connection
refused) or a silent one (accepts, never speaks: a host whose kernel still answers
while its Postgres hangs); the second is the session's real server. Each path that
opens a connection of its own is driven for real: the pool, the LISTEN connection,
the advisory locks (on-call, elected sessions, the migration lock) and the
"overhearer" check that LISTEN works through the DSN.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.db import DatabaseConfig, Listener, Notification, open_database, q
from dataplane.db.connection import attempt_timeout, dsn_endpoints
from dataplane.db.lock import SessionLock
from dataplane.db.session import _where, require_session_pooling, same_server
from dataplane.dev.embedded import free_port
from dataplane.queue.migrations import migrate


def _first_down(dsn: str, port: int, **extra: str) -> str:
    params = conninfo_to_dict(dsn)
    params["host"] = f"127.0.0.1,{params['host']}"
    params["port"] = f"{port},{params['port']}"
    params.update(target_session_attrs="read-write", **extra)
    return make_conninfo(**params)  # type: ignore[arg-type]


@pytest.fixture
def refused_dsn(queue_dsn: str) -> str:
    return _first_down(queue_dsn, free_port())  # nothing listens there: refused


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


async def test_pool_and_migration_lock_serve_through_the_second_host(
    bridge: object, refused_dsn: str
) -> None:
    async with open_database(DatabaseConfig(refused_dsn, pool_size=2)) as db:
        assert await db.fetchone(q("ping")) is not None
        assert await migrate(db) == []  # the migration lock taken and released; all applied


async def test_a_read_only_client_db_pool_fails_over_the_same_way(
    bridge: object, refused_dsn: str
) -> None:
    """DATAPLANE_CLIENT_DB_URL may be multi-host too (``target_session_attrs=prefer-standby`` for a
    replica first): a read-only pool serves through the second host, and is never
    refused for landing on a standby."""
    config = DatabaseConfig(refused_dsn.replace("read-write", "any"), pool_size=1, read_only=True)
    async with open_database(config) as db:
        row = await db.fetchone("SHOW default_transaction_read_only")
        assert row is not None and row["default_transaction_read_only"] == "on"


async def test_a_silent_first_host_costs_the_dsns_connect_timeout_only(
    bridge: object, queue_dsn: str, silent_port: int
) -> None:
    dsn = _first_down(queue_dsn, silent_port, connect_timeout="1")
    config = DatabaseConfig(dsn, pool_size=1, connect_timeout=5)
    assert attempt_timeout(config) == 1
    started = time.monotonic()
    async with open_database(config) as db:
        assert await db.fetchone(q("ping")) is not None
    assert time.monotonic() - started < 3.5  # 1 s on the silent host, not the config's 5


async def test_listen_and_notify_through_the_second_host(bridge: object, refused_dsn: str) -> None:
    config = DatabaseConfig(refused_dsn, pool_size=1)
    listener = Listener(config, ["ha_multihost"])
    async with trio.open_nursery() as nursery, open_database(config) as db:
        await nursery.start(listener.run)
        await db.execute(q("notify_send"), {"channel": "ha_multihost", "payload": "hello"})
        with trio.fail_after(5):
            event = await listener.events.receive()
        assert event == Notification("ha_multihost", "hello")
        nursery.cancel_scope.cancel()


async def test_advisory_locks_through_the_second_host(bridge: object, refused_dsn: str) -> None:
    config = DatabaseConfig(refused_dsn, pool_size=1)
    lock = SessionLock(config, "ha-multihost")
    with trio.fail_after(10):
        await lock.acquire()
        assert lock.held
        await lock.release()
    lock.close()


async def test_the_overhearer_check_passes_through_the_second_host(
    bridge: object, refused_dsn: str
) -> None:
    await require_session_pooling(DatabaseConfig(refused_dsn, pool_size=1))


def test_every_host_is_named_and_the_check_pins_one_server() -> None:
    dsn = (
        "host=db-a,db-b port=5432,5433 hostaddr=10.0.0.1,10.0.0.2 dbname=q "
        "load_balance_hosts=random password=secret"
    )
    assert dsn_endpoints(dsn) == ["db-a:5432", "db-b:5433"]
    assert dsn_endpoints("postgresql://u:secret@a:1,b:2/q") == ["a:1", "b:2"]
    assert dsn_endpoints("host=a,b port=6432") == ["a:6432", "b:6432"]
    assert "secret" not in _where(dsn) and "db-b:5433" in _where(dsn)

    class Info:
        host, port = "db-b", 5433

    class Conn:
        info = Info()

    pinned = conninfo_to_dict(same_server(DatabaseConfig(dsn), Conn()).dsn)  # type: ignore[arg-type]
    assert (pinned["host"], pinned["port"], pinned["dbname"]) == ("db-b", "5433", "q")
    assert "hostaddr" not in pinned and "load_balance_hosts" not in pinned
