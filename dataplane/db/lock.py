"""Session-level advisory locks, each on a dedicated connection (never from the pool).

A session advisory lock lives as long as its session: whoever holds it keeps it until
it lets go or its connection dies, so a crashed holder hands over by itself.
:class:`SessionLock` waits for its lock *inside Postgres* (:meth:`SessionLock.acquire`):
a waiting session costs nothing, and when the holder lets go Postgres grants the lock
to exactly one waiter, the longest waiting. A hand-over between processes that wakes
one of them, not all (the workers' on-call lock). An advisory lock needs no privilege,
so any role that may connect can take one: elections that must be the plane's are rows
of ``dataplane_elections`` (:mod:`dataplane.maintenance.elections`), not locks.

Failure handling: a statement that fails, times out or is cancelled
closes the session, and with it every lock it held or waited for; a holder, who runs
no statement while it holds, asks :meth:`SessionLock.lost` (the server hung up: a
restart or a failover took the lock with it); driver errors come
out as the project's (:func:`~dataplane.db.connection.translate`). A :class:`SessionLock`
connects again on its next :meth:`~SessionLock.acquire`.

States of a :class:`SessionLock`: ``closed`` (no connection) -> ``waiting`` -> ``held``
-> ``released`` -> ``waiting`` ...
"""

from __future__ import annotations

import logging
from typing import Any, LiteralString

import psycopg
import trio
from psycopg.rows import DictRow

from dataplane.core.errors import DatabaseUnavailable
from dataplane.db.bridge import current_loop, run_on_loop
from dataplane.db.connection import (
    Connection,
    DatabaseConfig,
    close_now,
    connect,
    looks_dead,
    translate,
)
from dataplane.db.pool import Database
from dataplane.db.sql import q

log = logging.getLogger(__name__)


class DedicatedSession:
    """One connection of its own, for state that lives with the session (advisory locks)."""

    def __init__(self, config: DatabaseConfig, loop: Any = None) -> None:
        self.config = config
        self.loop = loop  # the bridge loop; default: the one of the calling task
        self._conn: Connection | None = None

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    async def open(self) -> None:
        """Connect, unless connected (``DatabaseUnavailable`` when that fails)."""
        if not self.connected:
            self._conn = await connect(self.config, self._loop())

    async def fetchall(
        self,
        query: LiteralString,
        params: dict[str, Any] | None = None,
        *,
        wait: bool = False,
    ) -> list[DictRow]:
        """One statement on the session; its rows. It must answer within the config's
        call timeout, unless ``wait`` (a lock wait: waiting is the point). Any failure or
        cancellation closes the session; a closed session raises ``DatabaseUnavailable``."""
        conn = self._conn
        if conn is None or conn.closed:
            raise DatabaseUnavailable("the dedicated session is closed")
        ok = False
        try:
            if wait:
                rows = await run_on_loop(self._loop(), _fetchall(conn, query, params))
            else:
                with trio.fail_after(self.config.call_timeout):
                    rows = await run_on_loop(self._loop(), _fetchall(conn, query, params))
            ok = True
            return rows
        except trio.TooSlowError:
            raise DatabaseUnavailable(
                f"dedicated session: no answer within {self.config.call_timeout:g}s"
            ) from None
        except (psycopg.Error, OSError) as exc:
            raise translate(exc) from exc
        finally:
            if not ok:
                self.close()

    def looks_lost(self) -> bool:
        """Whether the connection is gone or the server has hung up on it (no round
        trip: EOF or an error waiting on the socket; keepalives find a silent drop)."""
        return self._conn is None or looks_dead(self._conn)

    def close(self) -> None:
        """Drop the connection, and with it the session's locks and lock waits."""
        conn, self._conn = self._conn, None
        if conn is not None:
            close_now(conn)

    def _loop(self) -> Any:
        return self.loop if self.loop is not None else current_loop()


class SessionLock:
    """One advisory lock, named by ``key``, held by this session or waited for."""

    def __init__(self, config: DatabaseConfig, key: str, *, loop: Any = None) -> None:
        self.config = config
        self.key = key
        self.held = False
        self.grants = 0  # times the lock was granted to this session
        self._session = DedicatedSession(config, loop)

    async def acquire(self) -> None:
        """Wait until the lock is ours (no timeout: waiting is the point).

        ``DatabaseUnavailable`` when the connection fails; cancellation closes the
        connection (and so ends the wait in Postgres).
        """
        if self.held:
            return
        fresh = not self._session.connected
        await self._session.open()
        if fresh:  # no server-side timeout on its waits, once per connection: a
            # statement_timeout or lock_timeout of the role or the URL would cancel them
            await self._session.fetchall(q("session_wait_untimed"))
        await self._session.fetchall(q("session_lock"), {"key": self.key}, wait=True)
        self.held = True
        self.grants += 1

    async def release(self) -> None:
        """Let the next waiter have it (at once if one waits)."""
        if not self.held or not self._session.connected:
            self.held = False
            return
        self.held = False
        # On failure the session is closed: the lock is gone too.
        await self._session.fetchall(q("session_unlock"), {"key": self.key})

    def lost(self) -> bool:
        """Whether a held lock's connection is gone, and the lock with it. A holder
        issues no statement while it holds: without this check it would go on
        believing it holds a lock that died with its server (a failover), while
        another session takes it on the new primary, or nobody does."""
        return self.held and self._session.looks_lost()

    def close(self) -> None:
        """Drop the connection, and with it the lock or the wait."""
        self.held = False
        self._session.close()


async def _fetchall(
    conn: Connection, query: LiteralString, params: dict[str, Any] | None
) -> list[DictRow]:
    cur = await conn.execute(query, params)
    if cur.description is None:
        return []
    return await cur.fetchall()


async def outsider_holding(db: Database, key: str) -> str | None:
    """The role of a session holding the lock named ``key`` that is not the plane's
    (neither this session's role nor a member of ``dataplane_worker``), else ``None``.
    One statement on ``db``'s pool."""
    row = await db.fetchone(q("session_lock_outsider"), {"key": key})
    return None if row is None else str(row["outsider"])


async def workers_at(db: Database, keys: list[str], call_timeout: float | None = None) -> set[str]:
    """Of the locks named ``keys``, those a session of a member of ``dataplane_worker``
    holds or waits for (any session's, on a database without ``sql/roles.sql``). One
    statement on ``db``'s pool, reading ``pg_locks``."""
    rows = await db.fetchall(q("session_lock_workers"), {"keys": keys}, call_timeout=call_timeout)
    return {str(row["key"]) for row in rows}
