"""Database access under Trio: psycopg 3's async API bridged with trio-asyncio.

This module is the only one that touches psycopg connections, and the one
boundary where driver errors become the project's (``dataplane.errors``).

* :func:`open_bridge` opens the one asyncio loop of a process (trio-asyncio); the
  process's root nursery enters it once, and from then on every Trio task can use
  a :class:`Database` or :class:`Listener` made from it — they keep a reference to
  the loop, so request handlers need no loop context of their own.
* :class:`Database` is a small bounded pool. :meth:`Database.run` acquires a
  connection (``PoolTimeout`` past the acquire timeout), runs one asyncio-side
  coroutine on it — one bridge crossing per logical operation — under a call
  timeout, and returns the connection only if it is known clean. A connection
  that failed, timed out or was cancelled mid-call is closed, never reused; a
  dropped connection also flushes the idle ones, which most likely died with it.
* :class:`Listener` is a dedicated LISTEN connection (never from the pool) that
  yields :class:`Notification` events as a Trio receive channel. It checks its
  own liveness when quiet, reconnects 2 s then 5 s after a drop, and emits a
  :class:`Gap` after every reconnect (and after a buffer overflow) so consumers
  re-read state they might have missed.
"""

from __future__ import annotations

import logging
import select
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
import trio
import trio_asyncio
from psycopg import sql as pgsql
from psycopg.rows import DictRow, dict_row

from dataplane.errors import DatabaseError, DatabaseUnavailable, InvalidArgument, PoolTimeout
from dataplane.sql import q

log = logging.getLogger(__name__)


def _bind_psycopg_to_bridge() -> None:
    """Make psycopg find trio-asyncio's loop.

    trio-asyncio replaces ``asyncio.get_running_loop`` with a version that knows
    its loop; ``psycopg.waiting`` binds the name at import, so when psycopg was
    imported before trio-asyncio it would hold the original and fail with "no
    running event loop". Rebinding it here makes import order irrelevant.
    """
    import asyncio

    import psycopg.waiting

    if getattr(psycopg.waiting, "get_running_loop", None) is not asyncio.get_running_loop:
        setattr(psycopg.waiting, "get_running_loop", asyncio.get_running_loop)  # noqa: B010


_bind_psycopg_to_bridge()

T = TypeVar("T")
Connection = psycopg.AsyncConnection[DictRow]

POOL_SIZE = 10  # connections
ACQUIRE_TIMEOUT = 5.0  # seconds to wait for a free pooled connection
CONNECT_TIMEOUT = 5.0  # seconds to open a connection
CALL_TIMEOUT = 30.0  # seconds for one database call
LISTEN_CHECK_INTERVAL = 5.0  # seconds of silence before the listener pings
LISTEN_PING_TIMEOUT = 2.0  # seconds the liveness ping may take
LISTEN_RECONNECT_DELAYS = (2.0, 5.0)  # first retry after 2 s, then every 5 s
LISTEN_BUFFER = 10_000  # notifications held for a slow consumer
MAX_IDENTIFIER_BYTES = 63  # Postgres identifier (and so channel name) limit


@asynccontextmanager
async def open_bridge() -> AsyncIterator[Any]:
    """Open the process's asyncio loop inside Trio; yields the loop."""
    async with trio_asyncio.open_loop() as loop:
        yield loop


def _enter_loop(loop: Any) -> None:
    """Make ``loop`` this Trio task's asyncio loop.

    trio-asyncio resolves ``asyncio.get_running_loop()`` through a context
    variable of the calling Trio task; tasks that did not open the loop (request
    handlers, fixtures' siblings) get it set here, once per task.
    """
    if trio_asyncio.current_loop.get() is not loop:
        trio_asyncio.current_loop.set(loop)


async def run_on_loop(loop: Any, coro: Awaitable[T]) -> T:
    """Run an asyncio coroutine on ``loop`` from any Trio task (one bridge crossing)."""
    _enter_loop(loop)
    result: T = await loop.run_aio_coroutine(coro)
    return result


def current_loop() -> Any:
    """The asyncio loop opened by :func:`open_bridge` in this task's context."""
    loop = trio_asyncio.current_loop.get()
    if loop is None:
        raise RuntimeError("no trio-asyncio loop: enter dataplane.db.open_bridge() first")
    return loop


@dataclass(frozen=True, slots=True)
class DatabaseConfig:
    """How to reach one database, and the limits every call is held to."""

    dsn: str
    pool_size: int = POOL_SIZE
    acquire_timeout: float = ACQUIRE_TIMEOUT
    connect_timeout: float = CONNECT_TIMEOUT
    call_timeout: float = CALL_TIMEOUT
    application_name: str = "dataplane"
    read_only: bool = False  # every transaction read-only (client DBs, belt and braces)
    trace_statements: bool = False  # a client span per statement (the client DB's queries)

    def __post_init__(self) -> None:
        if not self.dsn:
            raise InvalidArgument("database DSN is empty")
        if self.pool_size < 1:
            raise InvalidArgument(f"pool_size must be >= 1, got {self.pool_size}")
        for name in ("acquire_timeout", "connect_timeout", "call_timeout"):
            if getattr(self, name) <= 0:
                raise InvalidArgument(f"{name} must be > 0, got {getattr(self, name)}")


def translate(exc: BaseException) -> DatabaseError:
    """Map a driver error onto the project's types (the one place that does)."""
    if isinstance(exc, DatabaseError):
        return exc
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | OSError):
        return DatabaseUnavailable(f"database unavailable: {exc}".strip())
    if isinstance(exc, psycopg.Error):
        sqlstate = exc.sqlstate
        return DatabaseError(f"database error [{sqlstate}]: {exc}".strip(), sqlstate=sqlstate)
    return DatabaseError(f"database error: {exc!r}")


async def _connect(config: DatabaseConfig, loop: Any) -> Connection:
    async def connect() -> Connection:
        return await psycopg.AsyncConnection.connect(
            config.dsn,
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=max(1, round(config.connect_timeout)),
            application_name=config.application_name,
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=3,
            options="-c default_transaction_read_only=on" if config.read_only else "",
        )

    try:
        with trio.fail_after(config.connect_timeout + 1):
            conn: Connection = await run_on_loop(loop, connect())
            return conn
    except trio.TooSlowError:
        raise DatabaseUnavailable(f"could not connect within {config.connect_timeout:g}s") from None
    except (psycopg.Error, OSError) as exc:
        raise translate(exc) from exc


def _close_now(conn: Connection) -> None:
    """Close without awaiting: libpq's finish() is local and does not block."""
    try:
        if not conn.closed:
            conn.pgconn.finish()
    except Exception:  # closing a broken connection may complain; it is gone either way
        log.debug("error while closing a connection", exc_info=True)


def _looks_dead(conn: Connection) -> bool:
    """An idle connection with bytes to read has been told goodbye (or hit EOF)."""
    if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return True
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    size: int
    idle: int
    in_use: int
    connects: int
    discarded: int
    acquire_timeouts: int


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
            if isinstance(err, DatabaseUnavailable):
                self._flush_idle()
            else:
                clean = (
                    not conn.closed
                    and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                )
            raise err from exc
        finally:
            self._release(conn, reusable=clean)

    async def fetchall(
        self, query: pgsql.Composable | str, params: dict[str, Any] | None = None, **kw: Any
    ) -> list[DictRow]:
        """Execute one statement and return all its rows."""
        if self.config.trace_statements:
            with _statement_span(query):
                return await self.run(_fetchall, query, params, **kw)
        return await self.run(_fetchall, query, params, **kw)

    async def fetchone(
        self, query: pgsql.Composable | str, params: dict[str, Any] | None = None, **kw: Any
    ) -> DictRow | None:
        """Execute one statement and return its first row, if any."""
        rows = await self.fetchall(query, params, **kw)
        return rows[0] if rows else None

    async def execute(
        self, query: pgsql.Composable | str, params: dict[str, Any] | None = None, **kw: Any
    ) -> int:
        """Execute one statement; return its row count."""
        return await self.run(_execute, query, params, **kw)

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
        )

    def close(self) -> None:
        """Close every idle connection; connections in use close when returned."""
        self._closed = True
        self._flush_idle()

    async def _acquire(self) -> Connection:
        if self._closed:
            raise DatabaseUnavailable("database pool is closed")
        with trio.move_on_after(self.config.acquire_timeout) as scope:
            await self._slots.acquire()
        if scope.cancelled_caught:
            self._counters.acquire_timeouts += 1
            raise PoolTimeout(
                f"no database connection free within {self.config.acquire_timeout:g}s "
                f"(pool size {self.config.pool_size})"
            )
        try:
            while self._idle:
                conn = self._idle.pop()
                if not _looks_dead(conn):
                    return conn
                self._discard(conn)
            conn = await _connect(self.config, self._loop)
            self._counters.connects += 1
            return conn
        except BaseException:
            self._slots.release()
            raise

    def _release(self, conn: Connection, *, reusable: bool) -> None:
        if reusable and not self._closed and not conn.closed:
            self._idle.append(conn)
        else:
            self._discard(conn)
        self._slots.release()

    def _discard(self, conn: Connection) -> None:
        self._counters.discarded += 1
        _close_now(conn)

    def _flush_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            self._discard(conn)


def _statement_span(query: pgsql.Composable | str) -> Any:
    from opentelemetry.trace import SpanKind

    from telemetry.tracing import tracer

    text = query if isinstance(query, str) else repr(query)
    verb = text.lstrip().split(None, 1)[0].upper() if text.strip() else "SQL"
    return tracer().start_as_current_span(
        f"db {verb}",
        kind=SpanKind.CLIENT,
        attributes={"db.system.name": "postgresql", "db.query.text": text[:2000]},
    )


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


def check_channel(channel: str) -> str:
    """Validate a LISTEN/NOTIFY channel name (at most 63 bytes, not empty)."""
    if not channel or len(channel.encode()) > MAX_IDENTIFIER_BYTES:
        raise InvalidArgument(
            f"channel name must be 1..{MAX_IDENTIFIER_BYTES} bytes, got {channel!r}"
        )
    return channel


@dataclass(frozen=True, slots=True)
class Notification:
    """One NOTIFY received on a listened channel."""

    channel: str
    payload: str


@dataclass(frozen=True, slots=True)
class Gap:
    """Notifications may have been missed (reconnect, overflow): re-read state."""

    reason: str


Event = Notification | Gap


@dataclass(frozen=True, slots=True)
class ListenerStatistics:
    connected: bool
    received: int
    dropped: int
    reconnects: int
    pings: int


@dataclass
class _ListenerCounters:
    received: int = 0
    dropped: int = 0
    reconnects: int = 0
    pings: int = 0


@dataclass
class Listener:
    """A dedicated LISTEN connection whose notifications arrive on a Trio channel.

    ``run`` is the owning task: it connects, LISTENs on every channel, then calls
    ``task_status.started()``. While quiet for ``check_interval`` it pings the
    connection (``ping_timeout``), so a silently dropped link is found within one
    interval. On failure it reconnects after 2 s, then every 5 s, and emits a
    :class:`Gap` once listening again. Consumers read :attr:`events`.
    """

    config: DatabaseConfig
    channels: Sequence[str]
    check_interval: float = LISTEN_CHECK_INTERVAL
    ping_timeout: float = LISTEN_PING_TIMEOUT
    reconnect_delays: Sequence[float] = LISTEN_RECONNECT_DELAYS
    buffer_size: int = LISTEN_BUFFER
    loop: Any = None  # the bridge loop; default: the one of the task that runs it
    connected: bool = field(default=False, init=False)
    _counters: _ListenerCounters = field(default_factory=_ListenerCounters, init=False)
    _gap_owed: bool = field(default=False, init=False)
    _first_connect: trio.Event = field(default_factory=trio.Event, init=False)
    _conn: Connection | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        for channel in self.channels:
            check_channel(channel)
        if not self.channels:
            raise InvalidArgument("a Listener needs at least one channel")
        if self.check_interval <= 0 or self.ping_timeout <= 0:
            raise InvalidArgument("check_interval and ping_timeout must be > 0")
        if not self.reconnect_delays or min(self.reconnect_delays) < 0:
            raise InvalidArgument("reconnect_delays must be non-empty and >= 0")
        self._send, self.events = trio.open_memory_channel[Event](self.buffer_size)

    def statistics(self) -> ListenerStatistics:
        c = self._counters
        return ListenerStatistics(self.connected, c.received, c.dropped, c.reconnects, c.pings)

    async def wait_connected(self) -> None:
        """Return once the listener has listened at least once."""
        await self._first_connect.wait()

    def backend_pid(self) -> int | None:
        """The server process id of the LISTEN connection (tests kill it)."""
        return self._conn.info.backend_pid if self._conn is not None else None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        loop = self.loop if self.loop is not None else current_loop()
        started = False
        failures = 0
        while True:
            try:
                conn = await self._connect_and_listen(loop)
            except DatabaseUnavailable as exc:
                delay = self.reconnect_delays[min(failures, len(self.reconnect_delays) - 1)]
                failures += 1
                log.warning("listener: cannot listen (%s); retrying in %gs", exc, delay)
                await trio.sleep(delay)
                continue
            self._conn = conn
            self.connected = True
            self._first_connect.set()
            if started:
                self._counters.reconnects += 1
                log.info("listener: reconnected to %s", ", ".join(self.channels))
                self._deliver(Gap("reconnected"))
            else:
                started = True
                task_status.started()
            try:
                await self._pump(loop, conn)
            except DatabaseUnavailable as exc:
                log.warning("listener: connection lost (%s)", exc)
            finally:
                self.connected = False
                self._conn = None
                _close_now(conn)
            failures = 1  # the next failed attempt waits the second delay
            await trio.sleep(self.reconnect_delays[0])

    async def _connect_and_listen(self, loop: Any) -> Connection:
        conn = await _connect(self.config, loop)
        try:
            with trio.fail_after(self.config.call_timeout):
                for channel in self.channels:
                    stmt = pgsql.SQL(q("listen")).format(channel=pgsql.Identifier(channel))
                    await run_on_loop(loop, conn.execute(stmt))
        except BaseException as exc:
            _close_now(conn)
            if isinstance(exc, trio.TooSlowError):
                raise DatabaseUnavailable("LISTEN timed out") from None
            if isinstance(exc, psycopg.Error | OSError):
                raise translate(exc) from exc
            raise
        return conn

    async def _pump(self, loop: Any, conn: Connection) -> None:
        while True:
            try:
                received: int = await run_on_loop(loop, self._drain(conn))
                if received == 0:
                    self._counters.pings += 1
                    with trio.fail_after(self.ping_timeout):
                        await run_on_loop(loop, conn.execute(q("ping")))
            except trio.TooSlowError:
                raise DatabaseUnavailable(
                    f"no answer to a liveness ping within {self.ping_timeout:g}s"
                ) from None
            except (psycopg.Error, OSError) as exc:
                raise translate(exc) from exc

    async def _drain(self, conn: Connection) -> int:
        """asyncio side: hand over notifications for one check interval."""
        received = 0
        async for note in conn.notifies(timeout=self.check_interval):
            received += 1
            self._deliver(Notification(note.channel, note.payload))
        return received

    def _deliver(self, event: Event) -> None:
        if self._gap_owed:
            try:
                self._send.send_nowait(Gap("overflow"))
                self._gap_owed = False
            except trio.WouldBlock:
                pass
        try:
            self._send.send_nowait(event)
            if isinstance(event, Notification):
                self._counters.received += 1
        except trio.WouldBlock:
            self._counters.dropped += 1
            self._gap_owed = True
