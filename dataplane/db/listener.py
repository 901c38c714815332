"""A dedicated LISTEN connection (never from the pool) whose notifications arrive
on a Trio receive channel.

It checks its own liveness when quiet, reconnects after a drop (every 1 s at first,
backing off to every 5 s: :data:`LISTEN_RECONNECT_DELAYS`), and
emits a :class:`Gap` after every reconnect (and after a buffer overflow) so
consumers re-read state they might have missed.

The channels it listens on may change while it runs (:meth:`Listener.listen`,
:meth:`Listener.unlisten`): the owning task interrupts its wait for notifications,
runs the ``LISTEN``/``UNLISTEN`` on its connection and waits again. A reconnect
listens on the channels wanted at that moment, not the ones it started with.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
import trio
from psycopg import sql as pgsql

from dataplane.core.errors import DatabaseUnavailable, InvalidArgument
from dataplane.db.bridge import current_loop, run_on_loop
from dataplane.db.connection import Connection, DatabaseConfig, close_now, connect, translate
from dataplane.db.sql import q
from telemetry.metrics import track_listener

log = logging.getLogger(__name__)

LISTEN_CHECK_INTERVAL = 5.0  # seconds of silence before the listener pings
LISTEN_PING_TIMEOUT = 2.0  # seconds the liveness ping may take
# Seconds before each retry after a drop: every 1 s for 5 s, every 2 s until ~25 s,
# then every 5 s. A Patroni switchover is a ~2.5 s write outage and a lost node ~20 s
# (TTL 20): the old ladder (2 s, then every 5 s) left a BFF unready up to 5 s past the
# new primary's arrival (measured: ready 10 s after a 2.6 s switchover; issue #33).
LISTEN_RECONNECT_DELAYS = (1.0,) * 5 + (2.0,) * 10 + (5.0,)
LISTEN_BUFFER = 10_000  # notifications held for a slow consumer
MAX_IDENTIFIER_BYTES = 63  # Postgres identifier (and so channel name) limit


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
    listening: tuple[str, ...] = ()  # channels listened on the live connection


@dataclass
class _ListenerCounters:
    received: int = 0
    dropped: int = 0
    reconnects: int = 0
    pings: int = 0


@dataclass
class Listener:
    """A dedicated LISTEN connection whose notifications arrive on a Trio channel.

    ``run`` is the owning task: it connects, LISTENs on every wanted channel (at first
    ``channels``; :meth:`listen` and :meth:`unlisten` change the set), then calls
    ``task_status.started()``. While quiet for ``check_interval`` it pings the
    connection (``ping_timeout``), so a silently dropped link is found within one
    interval. On failure it reconnects (:data:`LISTEN_RECONNECT_DELAYS`), and emits a
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
    _wanted: list[str] = field(default_factory=list, init=False)  # in LISTEN order
    _listening: set[str] = field(default_factory=set, init=False)  # on the live connection
    _applied: trio.Event = field(default_factory=trio.Event, init=False)
    _drain_scope: trio.CancelScope | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        for channel in self.channels:
            check_channel(channel)
        if not self.channels:
            raise InvalidArgument("a Listener needs at least one channel")
        if self.check_interval <= 0 or self.ping_timeout <= 0:
            raise InvalidArgument("check_interval and ping_timeout must be > 0")
        if not self.reconnect_delays or min(self.reconnect_delays) < 0:
            raise InvalidArgument("reconnect_delays must be non-empty and >= 0")
        self._wanted = list(dict.fromkeys(self.channels))
        self._send, self.events = trio.open_memory_channel[Event](self.buffer_size)
        track_listener(self, self.config.application_name)

    def statistics(self) -> ListenerStatistics:
        c = self._counters
        # What the live connection listens on, an UNLISTEN not run yet included (a
        # notify of that channel can still come): wanted first, in order, then those.
        listening = tuple(ch for ch in self._wanted if ch in self._listening)
        listening += tuple(sorted(ch for ch in self._listening if ch not in self._wanted))
        return ListenerStatistics(
            self.connected, c.received, c.dropped, c.reconnects, c.pings, listening
        )

    async def listen(self, channel: str) -> None:
        """Listen on ``channel`` too. Returns once its ``LISTEN`` has run on the live
        connection: a NOTIFY committed from then on arrives. While disconnected it returns
        at once; the reconnect listens on it, and the :class:`Gap` that follows tells the
        consumer to re-read what it may have missed."""
        check_channel(channel)
        if channel not in self._wanted:
            self._wanted.append(channel)
        await self._wait_applied()

    async def unlisten(self, channel: str) -> None:
        """Stop listening on ``channel``; returns once its ``UNLISTEN`` has run (or at once
        while disconnected). A notification already on its way may still arrive."""
        if channel in self._wanted:
            self._wanted.remove(channel)
        await self._wait_applied()

    async def _wait_applied(self) -> None:
        while self.connected and self._listening != set(self._wanted):
            if self._drain_scope is not None:
                self._drain_scope.cancel()  # the owning task runs the (UN)LISTEN next
            await self._applied.wait()

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
                log.info("listener: reconnected to %s", ", ".join(sorted(self._listening)))
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
                self._listening = set()
                self._announce_applied()  # no connection: listen() and unlisten() return
                close_now(conn)
            failures = 1  # the next failed attempt waits the second delay
            await trio.sleep(self.reconnect_delays[0])

    async def _connect_and_listen(self, loop: Any) -> Connection:
        conn = await connect(self.config, loop)
        try:
            with trio.fail_after(self.config.call_timeout):
                for channel in list(self._wanted):  # wanted now, not at first
                    await _run_on(loop, conn, "listen", channel)
                    self._listening.add(channel)
        except BaseException as exc:
            self._listening = set()
            close_now(conn)
            if isinstance(exc, trio.TooSlowError):
                raise DatabaseUnavailable("LISTEN timed out") from None
            if isinstance(exc, psycopg.Error | OSError):
                raise translate(exc) from exc
            raise
        return conn

    async def _pump(self, loop: Any, conn: Connection) -> None:
        while True:
            try:
                await self._apply(loop, conn)
                # listen() and unlisten() cancel this wait; psycopg's notifies() is then
                # idle at a socket wait (nothing half read), and what it had read is
                # delivered already: no notification is lost.
                received: int | None = None
                with trio.CancelScope() as scope:
                    self._drain_scope = scope
                    received = await run_on_loop(loop, self._drain(conn))
                self._drain_scope = None
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
            finally:
                self._drain_scope = None

    async def _apply(self, loop: Any, conn: Connection) -> None:
        """LISTEN and UNLISTEN until the connection listens on the wanted channels."""
        while True:
            add = [ch for ch in self._wanted if ch not in self._listening]
            drop = [ch for ch in self._listening if ch not in self._wanted]
            if not (add or drop):
                break
            try:
                with trio.fail_after(self.config.call_timeout):
                    for channel in add:
                        await _run_on(loop, conn, "listen", channel)
                        self._listening.add(channel)
                    for channel in drop:
                        await _run_on(loop, conn, "unlisten", channel)
                        self._listening.discard(channel)
            except trio.TooSlowError:
                raise DatabaseUnavailable("LISTEN/UNLISTEN timed out") from None
        self._announce_applied()

    def _announce_applied(self) -> None:
        self._applied.set()
        self._applied = trio.Event()

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


async def _run_on(loop: Any, conn: Connection, name: str, channel: str) -> None:
    """``LISTEN`` or ``UNLISTEN`` (the statement ``name``) one channel on ``conn``."""
    stmt = pgsql.SQL(q(name)).format(channel=pgsql.Identifier(channel))
    await run_on_loop(loop, conn.execute(stmt))
