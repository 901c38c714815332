"""A small bounded pool of connections to one database, usable from any Trio task.

:meth:`Database.run` acquires a connection (``PoolTimeout`` past the acquire
timeout), runs one asyncio-side coroutine on it, one bridge crossing per logical
operation, under a call timeout, and returns the connection only if it is known
clean. A connection that failed, timed out or was cancelled mid-call is closed,
never reused; a dropped connection also flushes the idle ones, which most likely
died with it. An error the server answered with (a statement or lock timeout
included, though it comes out as ``DatabaseUnavailable``) leaves the connection in
use, and the idle ones, as they are.

Tracing (:mod:`telemetry.tracing`): a statement is a client span
only inside a trace — live under the current recording span, or recorded after the
fact in the traces a ``parents`` callback names from its rows — so with the no-op
tracer, or outside any trace, it costs one context lookup.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import trio
from opentelemetry.context import Context
from psycopg import sql as pgsql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow

from dataplane.core.errors import DatabaseError, DatabaseUnavailable, PoolTimeout
from dataplane.db.bridge import current_loop, run_on_loop
from dataplane.db.connection import (
    Connection,
    DatabaseConfig,
    close_now,
    connect,
    connection_lost,
    dsn_endpoints,
    looks_dead,
    translate,
)
from dataplane.db.listener import Listener
from dataplane.db.sql import q, statement_name
from telemetry.metrics import track_pool
from telemetry.tracing import (
    Statement,
    db_attributes,
    db_target,
    describe,
    failed,
    in_trace,
    record_statement,
    statement_span,
    tracing_on,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

# Which traces a statement served, from its rows (None when it failed): for a
# statement run outside any span (a claim, a batch of completions), one span is
# recorded in each of them after the fact.
Parents = Callable[[Any], Iterable[Context | None]]
MAX_DESCRIBED = 256  # statement texts whose span attributes are kept


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    size: int
    idle: int
    in_use: int
    connects: int
    discarded: int
    acquire_timeouts: int
    waiting: int = 0  # tasks waiting for a free connection


@dataclass
class _PoolCounters:
    connects: int = 0
    discarded: int = 0
    acquire_timeouts: int = 0


class Database:
    """A bounded pool of connections to one database, usable from any Trio task."""

    @property
    def loop(self) -> Any:
        return self._loop

    def listener(self, channels: Sequence[str], **kwargs: Any) -> Listener:
        """A dedicated :class:`Listener` to the same database (not from the pool)."""
        return Listener(self.config, channels, loop=self._loop, **kwargs)

    def __init__(self, config: DatabaseConfig, loop: Any) -> None:
        self.config = config
        self._loop = loop
        self._idle: list[Connection] = []
        self._slots = trio.Semaphore(config.pool_size)
        self._counters = _PoolCounters()
        self._closed = False
        self._target: dict[str, Any] | None = None  # db.namespace, server.address, ...
        self._described: dict[str, tuple[Statement, dict[str, Any]]] = {}
        track_pool(self, config.application_name)

    async def run(
        self,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        call_timeout: float | None = None,
    ) -> T:
        """Run ``await fn(conn, *args)`` (an asyncio-side coroutine) on a pooled connection.

        Blocks for a free connection up to the acquire timeout (``PoolTimeout``),
        then for the call up to ``call_timeout`` (default: the config's call timeout;
        ``DatabaseUnavailable`` past it). Driver errors come out as
        ``DatabaseError``/``DatabaseUnavailable``.
        """
        conn = await self._acquire()
        clean = False
        try:
            limit = call_timeout if call_timeout is not None else self.config.call_timeout
            with trio.fail_after(limit):
                result: T = await run_on_loop(self._loop, fn(conn, *args))
            clean = True
            return result
        except trio.TooSlowError:
            raise DatabaseUnavailable(f"database call timed out after {limit:g}s") from None
        except (psycopg.Error, OSError) as exc:
            err = translate(exc)
            if isinstance(err, DatabaseUnavailable) and connection_lost(conn, exc):
                self._flush_idle()  # the others most likely died with it
            else:  # the server answered (a statement or lock timeout, a refused statement)
                clean = (
                    not conn.closed
                    and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                )
            raise err from exc
        finally:
            self._release(conn, reusable=clean)

    async def fetchall(
        self,
        query: pgsql.Composable | str,
        params: dict[str, Any] | None = None,
        *,
        parents: Parents | None = None,
        **kw: Any,
    ) -> list[DictRow]:
        """Execute one statement and return all its rows.

        Traced (a client span) inside a recording span, or in the traces ``parents``
        names from the rows (see :data:`Parents`); untraced otherwise.
        """
        if parents is None and not in_trace():
            return await self.run(_fetchall, query, params, **kw)
        return await self._traced(_fetchall, query, params, parents, kw)

    async def fetchone(
        self,
        query: pgsql.Composable | str,
        params: dict[str, Any] | None = None,
        *,
        parents: Parents | None = None,
        **kw: Any,
    ) -> DictRow | None:
        """Execute one statement and return its first row, if any."""
        rows = await self.fetchall(query, params, parents=parents, **kw)
        return rows[0] if rows else None

    async def execute(
        self, query: pgsql.Composable | str, params: dict[str, Any] | None = None, **kw: Any
    ) -> int:
        """Execute one statement; return its row count (traced as :meth:`fetchall`)."""
        if not in_trace():
            return await self.run(_execute, query, params, **kw)
        return await self._traced(_execute, query, params, None, kw)

    async def ping(self, **kw: Any) -> None:
        """A round trip on a pooled connection (raises :class:`DatabaseError` when the
        database cannot be reached in time)."""
        await self.fetchone(q("ping"), **kw)

    async def notify(self, channel: str, payload: str) -> None:
        """``pg_notify(channel, payload)`` (delivered when its statement commits)."""
        await self.execute(q("notify_send"), {"channel": channel, "payload": payload})

    async def _traced(
        self,
        fn: Callable[..., Awaitable[T]],
        query: pgsql.Composable | str,
        params: dict[str, Any] | None,
        parents: Parents | None,
        kw: dict[str, Any],
    ) -> T:
        """Run one statement in its client span (live, or recorded in ``parents``)."""
        if parents is not None and not tracing_on():
            return await self.run(fn, query, params, **kw)
        statement, attrs = self._describe(query)
        if parents is None:
            with statement_span(statement, attrs) as span:
                try:
                    return await self.run(fn, query, params, **kw)
                except DatabaseError as exc:
                    failed(span, type(exc).__name__, str(exc))
                    if exc.sqlstate:
                        span.set_attribute("db.response.status_code", exc.sqlstate)
                    raise
        start = time.time_ns()
        try:
            result = await self.run(fn, query, params, **kw)
        except DatabaseError as exc:
            record_statement(statement, attrs, parents(None), start, time.time_ns(), exc)
            raise
        record_statement(statement, attrs, parents(result), start, time.time_ns())
        return result

    def _describe(self, query: pgsql.Composable | str) -> tuple[Statement, dict[str, Any]]:
        """A statement's span name and attributes (worked out once per text)."""
        text = query if isinstance(query, str) else None
        if text is not None and (found := self._described.get(text)) is not None:
            return found
        if text is None:
            statement = Statement("SQL", "SQL")
        else:
            statement = describe(text, statement_name(text))
        target = self._target if self._target is not None else self._db_target()
        shown = text if self.config.trace_query_text else None
        described = statement, db_attributes(statement, target, shown)
        if text is not None:
            if len(self._described) >= MAX_DESCRIBED:
                self._described.clear()
            self._described[text] = described
        return described

    def _db_target(self) -> dict[str, Any]:
        try:
            info = conninfo_to_dict(self.config.dsn)
        except psycopg.Error:
            info = {}
        # One server: its address and port. A multi-host DSN names several and which
        # one a statement ran on is the connection's, not the text's: none is named.
        endpoints = dsn_endpoints(self.config.dsn)
        host, _, port = endpoints[0].rpartition(":") if len(endpoints) == 1 else ("", "", "")
        self._target = db_target(
            str(info.get("dbname") or info.get("user") or "") or None,
            host or None,
            int(port) if port.isdigit() else None,
        )
        return self._target

    def statistics(self) -> PoolStatistics:
        size = self.config.pool_size
        in_use = size - self._slots.value
        return PoolStatistics(
            size=size,
            idle=len(self._idle),
            in_use=in_use,
            connects=self._counters.connects,
            discarded=self._counters.discarded,
            acquire_timeouts=self._counters.acquire_timeouts,
            waiting=self._slots.statistics().tasks_waiting,
        )

    def close(self) -> None:
        """Close every idle connection; connections in use close when returned."""
        self._closed = True
        self._flush_idle()

    async def _acquire(self) -> Connection:
        if self._closed:
            raise DatabaseUnavailable("database pool is closed")
        try:  # a free slot is taken without a checkpoint or a timer: the call that
            self._slots.acquire_nowait()  # follows is the checkpoint
        except trio.WouldBlock:
            await self._wait_for_slot()
        try:
            while self._idle:
                conn = self._idle.pop()
                if not looks_dead(conn):
                    return conn
                self._discard(conn)
            conn = await connect(self.config, self._loop)
            self._counters.connects += 1
            return conn
        except BaseException:
            self._slots.release()
            raise

    async def _wait_for_slot(self) -> None:
        with trio.move_on_after(self.config.acquire_timeout) as scope:
            await self._slots.acquire()
        if scope.cancelled_caught:
            self._counters.acquire_timeouts += 1
            raise PoolTimeout(
                f"no database connection free within {self.config.acquire_timeout:g}s "
                f"(pool size {self.config.pool_size})"
            )

    def _release(self, conn: Connection, *, reusable: bool) -> None:
        if reusable and not self._closed and not conn.closed:
            self._idle.append(conn)
        else:
            self._discard(conn)
        self._slots.release()

    def _discard(self, conn: Connection) -> None:
        self._counters.discarded += 1
        close_now(conn)

    def _flush_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            self._discard(conn)


async def _fetchall(
    conn: Connection, query: pgsql.Composable | str, params: dict[str, Any] | None
) -> list[DictRow]:
    cur = await conn.execute(query, params)  # type: ignore[arg-type]
    if cur.description is None:
        return []
    return await cur.fetchall()


async def _execute(
    conn: Connection, query: pgsql.Composable | str, params: dict[str, Any] | None
) -> int:
    cur = await conn.execute(query, params)  # type: ignore[arg-type]
    return cur.rowcount


@asynccontextmanager
async def open_database(config: DatabaseConfig, *, loop: Any = None) -> AsyncIterator[Database]:
    """A :class:`Database` on ``loop`` (default: this task's bridge loop), closed on exit."""
    db = Database(config, loop if loop is not None else current_loop())
    try:
        yield db
    finally:
        db.close()
