"""An elected session: a dedicated connection that leads while it holds an advisory lock.

:func:`open_elected` connects (never from the pool) and runs ``lock_query`` (a
statement answering one row with a boolean ``elected``, e.g. ``pg_try_advisory_lock``)
every ``retry_seconds`` until it wins. A session advisory lock is held for as long as
its session lives: one process of the fleet leads until it stops or its connection
dies, then another wins at its next try — leadership is sticky, unlike a lock taken
per pass. Statements on the held connection run under the config's call timeout;
driver errors come out as the project's (:func:`~dataplane.db.connection.translate`),
and a failed statement ends the session (the caller opens a new one).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, LiteralString

import psycopg
import trio
from psycopg.rows import DictRow

from dataplane.db.bridge import run_on_loop
from dataplane.db.connection import Connection, DatabaseConfig, close_now, connect, translate
from dataplane.errors import DatabaseUnavailable


class ElectedSession:
    """The held connection of an elected process (see the module docstring)."""

    def __init__(self, config: DatabaseConfig, loop: Any, conn: Connection) -> None:
        self.config = config
        self._loop = loop
        self._conn = conn

    async def fetchall(
        self, query: LiteralString, params: dict[str, Any] | None = None
    ) -> list[DictRow]:
        """One statement on the held connection; its rows."""
        try:
            with trio.fail_after(self.config.call_timeout):
                return await run_on_loop(self._loop, _fetchall(self._conn, query, params))
        except trio.TooSlowError:
            raise DatabaseUnavailable(
                f"elected session: no answer within {self.config.call_timeout:g}s"
            ) from None
        except (psycopg.Error, OSError) as exc:
            raise translate(exc) from exc


@asynccontextmanager
async def open_elected(
    config: DatabaseConfig, loop: Any, lock_query: LiteralString, *, retry_seconds: float
) -> AsyncIterator[ElectedSession]:
    """Wait until this process is elected; the session is closed (the lock released) on
    exit. Raises ``DatabaseError`` when the database cannot be reached."""
    conn = await connect(config, loop)
    try:
        session = ElectedSession(config, loop, conn)
        while True:
            rows = await session.fetchall(lock_query)
            if rows and rows[0]["elected"]:
                break
            await trio.sleep(retry_seconds)
        yield session
    finally:
        close_now(conn)


async def _fetchall(
    conn: Connection, query: LiteralString, params: dict[str, Any] | None
) -> list[DictRow]:
    cur = await conn.execute(query, params)
    if cur.description is None:
        return []
    return await cur.fetchall()
