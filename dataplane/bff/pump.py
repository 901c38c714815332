"""The reply pump: hears done notifies and wakes the streams waiting on them.

One per BFF process, owning a dedicated LISTEN connection (never from the pool)
on every served surface's done channel, and a waiter map job id -> waiters.

* On a notify for a job with waiters, every waiter of that job gets its finished
  row: carried in the notify itself for a small answer
  (:func:`~dataplane.queue.split_done_notify`), else read **once** (notifies that
  arrive together are read with one statement). A notify for a job nobody here
  waits on costs its id's parse: a carried answer is kept as text, not parsed.
* Every ``sweep_seconds`` the rows of all waited-on jobs are re-read, which
  covers missed notifies; after a LISTEN reconnect (a :class:`Gap`) the sweep
  runs at once. The listener pings its connection when quiet, so a silently
  dropped link is found within one sweep.
* A waiter is added (:meth:`ReplyPump.add`) *before* the caller's immediate row
  check, so a job that finishes in between is never missed (the
  done-before-LISTEN race), and discarded (:meth:`ReplyPump.discard`) when its
  stream ends. Discarding a waiter (a browser went away) touches nothing else.
* The pump remembers the job ids of its last ``recent_notifies`` notifies, so a
  caller that read :meth:`ReplyPump.heard` before its job could finish can ask
  :meth:`ReplyPump.may_have_missed` whether that job's notify went by before its
  waiter was added: only then is the row check needed. Under load, other jobs'
  notifies no longer cost every ``Prefer: wait`` POST a row read.
* With them it keeps the answers those notifies carried (:meth:`ReplyPump.answered`):
  a stream or a poll that comes for a job after its answer went by is answered from
  it, without reading the row (a finished row never changes). Under load, most
  streams open after their job has finished.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio
from opentelemetry.trace import SpanKind

from dataplane.bff.config import SWEEP_SECONDS
from dataplane.db import Gap, Listener, Notification
from dataplane.db.listener import LISTEN_PING_TIMEOUT, LISTEN_RECONNECT_DELAYS
from dataplane.errors import DatabaseError
from dataplane.observability.metrics import track_waiters
from dataplane.observability.tracing import context_from, messaging, tracer
from dataplane.queue import JobRow, QueueClient, done_channel, split_done_notify

log = logging.getLogger(__name__)

READ_BATCH = 1000  # job ids per statement
# The last notifies remembered (may_have_missed), with the answers they carried
# (answered): an answer rides only up to DONE_NOTIFY_INLINE_MAX bytes, so a few MB.
RECENT_NOTIFIES = 4096
QUIET_CHANNEL = "dataplane_no_surfaces"  # nobody notifies it


@dataclass(eq=False)
class Waiter:
    """One stream's interest in one job; :meth:`wait` returns the finished row."""

    job_id: uuid.UUID
    _event: trio.Event = field(default_factory=trio.Event)
    row: JobRow | None = None
    discarded: bool = False

    def deliver(self, row: JobRow) -> None:
        if self.row is None:
            self.row = row
            self._event.set()

    async def wait(self) -> JobRow:
        await self._event.wait()
        assert self.row is not None
        return self.row


@dataclass(frozen=True, slots=True)
class Heard:
    """How much a pump had heard at a moment: notifies and LISTEN gaps taken in."""

    notifies: int
    gaps: int


@dataclass(frozen=True, slots=True)
class PumpStatistics:
    waiters: int
    jobs_waited: int
    notifies: int
    reads: int
    carried: int
    sweeps: int
    delivered: int
    listening: bool


@dataclass
class _Counters:
    gaps: int = 0
    notifies: int = 0
    reads: int = 0
    carried: int = 0  # answers delivered from the notify itself (no read)
    sweeps: int = 0
    delivered: int = 0


class ReplyPump:
    def __init__(
        self,
        queue: QueueClient,
        channels: Sequence[str],
        *,
        sweep_seconds: float = SWEEP_SECONDS,
        reconnect_delays: Sequence[float] = LISTEN_RECONNECT_DELAYS,
        recent_notifies: int = RECENT_NOTIFIES,
    ) -> None:
        self.queue = queue
        self.sweep_seconds = sweep_seconds
        self.listener: Listener = queue.db.listener(
            # With no surface installed there is nothing to hear, but the listener still
            # holds its session (and /readyz its meaning): it listens on a quiet channel.
            list(channels) or [QUIET_CHANNEL],
            check_interval=max(0.05, sweep_seconds - LISTEN_PING_TIMEOUT),
            ping_timeout=min(LISTEN_PING_TIMEOUT, max(0.05, sweep_seconds / 2)),
            reconnect_delays=reconnect_delays,
        )
        self._waiters: dict[uuid.UUID, set[Waiter]] = {}
        self.waiting = 0  # waiters added and not yet discarded (dataplane.waiters)
        track_waiters(self)
        self._sweep_now = trio.Event()
        self._counters = _Counters()
        # job id -> the number of its latest notify (1-based) and the answer it carried
        # (JSON text, not parsed) or None; oldest first, bounded
        self._recent: OrderedDict[uuid.UUID, tuple[int, str | None]] = OrderedDict()
        self._recent_max = max(1, recent_notifies)
        self._forgotten = 0  # the number of the newest notify dropped from _recent

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, dispatch and sweep; ``started`` once LISTEN has executed."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.listener.run)
            nursery.start_soon(self._dispatch)
            nursery.start_soon(self._sweeper)
            task_status.started()

    @property
    def listening(self) -> bool:
        return self.listener.connected

    def add(self, job_id: uuid.UUID) -> Waiter:
        """A new waiter on ``job_id``; :meth:`discard` it when it is no longer wanted."""
        waiter = Waiter(job_id)
        self._waiters.setdefault(job_id, set()).add(waiter)
        self.waiting += 1
        return waiter

    def discard(self, waiter: Waiter) -> None:
        """Forget ``waiter`` (delivered or not); a second call does nothing."""
        if waiter.discarded:
            return
        waiter.discarded = True
        self.waiting -= 1
        waiters = self._waiters.get(waiter.job_id)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._waiters[waiter.job_id]

    def heard(self) -> Heard:
        """Notifies and LISTEN gaps taken in so far; read it before a job can finish,
        and ask :meth:`may_have_missed` once a waiter on the job is added."""
        return Heard(self._counters.notifies, self._counters.gaps)

    def may_have_missed(self, job_id: uuid.UUID, since: Heard) -> bool:
        """Whether the done notify of ``job_id`` may have been taken in after ``since``
        (:meth:`heard`) and before a waiter on it was added, so that the waiter alone
        would not hear the finish (the caller reads the row once). False only when it
        is sure: the pump listens, no LISTEN gap came since, and none of the notifies
        since (all still remembered) was the job's."""
        c = self._counters
        if not self.listening or c.gaps != since.gaps:
            return True
        if c.notifies == since.notifies:
            return False
        if self._forgotten > since.notifies:  # some of those notifies are forgotten
            return True
        return job_id in self._recent

    def answered(self, job_id: uuid.UUID) -> JobRow | None:
        """The finished row of ``job_id`` when one of the notifies still remembered
        carried its answer (made now from the kept text), else None: then read the row.
        The row's owner is not in it (:meth:`JobRow.from_done_notify`): the caller
        knows the caller may see the job by other means (a URL token minted for it)."""
        entry = self._recent.get(job_id)
        if entry is None or entry[1] is None:
            return None
        return JobRow.from_done_notify(job_id, entry[1])

    def _remember(self, job_id: uuid.UUID, carried: str | None) -> None:
        recent = self._recent
        recent[job_id] = (self._counters.notifies, carried)
        recent.move_to_end(job_id)
        while len(recent) > self._recent_max:
            self._forgotten = recent.popitem(last=False)[1][0]

    def statistics(self) -> PumpStatistics:
        c = self._counters
        return PumpStatistics(
            waiters=sum(len(w) for w in self._waiters.values()),
            jobs_waited=len(self._waiters),
            notifies=c.notifies,
            reads=c.reads,
            carried=c.carried,
            sweeps=c.sweeps,
            delivered=c.delivered,
            listening=self.listening,
        )

    def deliver(self, row: JobRow) -> None:
        """Hand a finished row to every waiter of its job."""
        if not row.finished:
            return
        for waiter in self._waiters.pop(row.id, ()):
            waiter.deliver(row)
            self._counters.delivered += 1

    async def _dispatch(self) -> None:
        events = self.listener.events
        while True:
            batch = [await events.receive()]
            while True:
                try:
                    batch.append(events.receive_nowait())
                except trio.WouldBlock:
                    break
            wanted: set[uuid.UUID] = set()
            for event in batch:
                if isinstance(event, Gap):
                    self._counters.gaps += 1
                    self._sweep_now.set()
                elif isinstance(event, Notification):
                    self._counters.notifies += 1
                    try:
                        job_id, carried = split_done_notify(event.payload)
                    except ValueError:
                        log.warning("pump: notify with a bad job id %r", event.payload[:100])
                        continue
                    self._remember(job_id, carried)
                    if job_id not in self._waiters:
                        continue
                    row = None if carried is None else JobRow.from_done_notify(job_id, carried)
                    if row is None:  # the notify names the job: read its row
                        wanted.add(job_id)
                    else:  # it carries the answer
                        self._counters.carried += 1
                        _notify_span(row, time.time_ns())
                        self.deliver(row)
            if wanted:
                await self._read_and_deliver(list(wanted), notified=True)

    async def _sweeper(self) -> None:
        while True:
            with trio.move_on_after(self.sweep_seconds):
                await self._sweep_now.wait()
            self._sweep_now = trio.Event()
            await self.sweep()

    async def sweep(self) -> None:
        """Re-read every waited-on job (covers missed notifies and LISTEN gaps)."""
        self._counters.sweeps += 1
        ids = list(self._waiters)
        for start in range(0, len(ids), READ_BATCH):
            await self._read_and_deliver(ids[start : start + READ_BATCH])

    async def _read_and_deliver(self, ids: list[uuid.UUID], *, notified: bool = False) -> None:
        started = time.time_ns()
        try:
            rows = await self.queue.get_finished_many(ids)
        except DatabaseError as exc:
            log.warning("pump: could not read %d job(s) (%s); the sweep will retry", len(ids), exc)
            return
        self._counters.reads += 1
        for row in rows:
            if notified and row.finished:
                _notify_span(row, started)
            self.deliver(row)


def _notify_span(row: JobRow, started_ns: int) -> None:
    """The done notify as heard by this BFF, in the request's trace: from reading the
    notified rows to having them (from hearing it, for an answer the notify carried:
    nothing to read), a CLIENT span of operation type ``receive`` (the
    messaging conventions' pull: the pump asks the queue DB for the finished row; it
    settles nothing — the worker's ``complete`` did — so not ``settle``)."""
    traceparent = row.payload.get("traceparent") if isinstance(row.payload, dict) else None
    parent = context_from(traceparent)
    if parent is None:
        return
    span = tracer().start_span(
        f"notify {row.type}",
        context=parent,
        kind=SpanKind.CLIENT,
        start_time=started_ns,
        attributes={
            **messaging("receive", row.type, str(row.id)),
            "messaging.operation.name": "notify",
            "messaging.destination.name": done_channel(row.type),
        },
    )
    span.end()
