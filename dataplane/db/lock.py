"""A session-level advisory lock on a dedicated connection (never from the pool).

:meth:`SessionLock.acquire` waits, inside Postgres, until the lock is granted:
a waiting session costs nothing, and when the holder lets go (or its connection
dies) Postgres grants the lock to exactly one waiter, the longest waiting. That
makes it a hand-over between processes that wakes one of them, not all.

States: ``closed`` (no connection) -> ``waiting`` -> ``held`` -> ``released`` ->
``waiting`` ... A failure (the database unreachable, the call cancelled) closes
the connection, which also drops the lock or the wait: the next
:meth:`acquire` connects again. Held locks die with their connection, so a
crashed holder hands over by itself.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import trio

from dataplane.db.bridge import current_loop, run_on_loop
from dataplane.db.connection import Connection, DatabaseConfig, close_now, connect, translate
from dataplane.db.sql import q
from dataplane.errors import DatabaseUnavailable

log = logging.getLogger(__name__)


class SessionLock:
    """One advisory lock, named by ``key``, held by this session or waited for."""

    def __init__(self, config: DatabaseConfig, key: str, *, loop: Any = None) -> None:
        self.config = config
        self.key = key
        self.loop = loop
        self.held = False
        self.grants = 0  # times the lock was granted to this session
        self._conn: Connection | None = None

    async def acquire(self) -> None:
        """Wait until the lock is ours (no timeout: waiting is the point).

        ``DatabaseUnavailable`` when the connection fails; cancellation closes the
        connection (and so ends the wait in Postgres).
        """
        if self.held:
            return
        conn = await self._connection()
        await self._call(conn, "session_lock")
        self.held = True
        self.grants += 1

    async def release(self) -> None:
        """Let the next waiter have it (at once if one waits)."""
        if not self.held or self._conn is None:
            self.held = False
            return
        self.held = False
        try:
            with trio.fail_after(self.config.call_timeout):
                await self._call(self._conn, "session_unlock")
        except trio.TooSlowError:  # _call closed the connection: the lock is gone too
            raise DatabaseUnavailable("session_unlock timed out") from None

    def close(self) -> None:
        """Drop the connection, and with it the lock or the wait."""
        self.held = False
        conn, self._conn = self._conn, None
        if conn is not None:
            close_now(conn)

    async def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed:
            loop = self.loop if self.loop is not None else current_loop()
            self._conn = await connect(self.config, loop)
        return self._conn

    async def _call(self, conn: Connection, name: str) -> None:
        """One statement; any failure or cancellation closes the connection."""
        loop = self.loop if self.loop is not None else current_loop()
        ok = False
        try:
            await run_on_loop(loop, conn.execute(q(name), {"key": self.key}))
            ok = True
        except (psycopg.Error, OSError) as exc:
            raise translate(exc) from exc
        finally:
            if not ok:
                self.close()
