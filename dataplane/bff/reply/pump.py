"""The reply pump: hears done notifies and wakes the streams waiting on them.

One per BFF process, owning a dedicated LISTEN connection (never from the pool)
on every served surface's done channel, and a waiter map job id -> waiters.

* On a notify for a job with waiters, every waiter of that job gets its finished
  row: carried in the notify itself for a small answer, sealed by the worker
  (:mod:`dataplane.queue.notices.seal`), else read **once** (notifies that arrive together
  are read with one statement). A notify for a job nobody here waits on costs its
  id's parse: a carried answer is kept sealed, not opened.
* Nothing in a notify is trusted unverified: anyone who may connect to the queue
  database may ``NOTIFY``. A carried answer that does not open with the notify
  secret, or whose note does not parse, is not delivered: the row is read instead,
  and the pump counts it (``rejected``, metric ``dataplane.notify.rejected``). A
  payload that names no job is counted and dropped. No notify can end the pump.
* A progress notify (``<type>_progress``) or a retry notify (``<type>_retry``: an
  attempt failed and the job waits out its backoff) for a job with waiters hands them
  that *update* (:mod:`dataplane.bff.reply.updates`): carried and sealed like an answer,
  else read from the row, which must confirm it. Neither is a done notify: they count
  in none of the bookkeeping below.
* Every ``sweep_seconds`` the rows of all waited-on jobs are re-read, which
  covers missed notifies; after a LISTEN reconnect (a :class:`Gap`) the sweep
  runs at once. The listener pings its connection when quiet, so a silently
  dropped link is found within one sweep.
* A waiter is added (:meth:`ReplyPump.add`) *before* the caller's immediate row
  check, so a job that finishes in between is never missed (the
  done-before-LISTEN race), and discarded (:meth:`ReplyPump.discard`) when its
  stream ends. Discarding a waiter (a browser went away) touches nothing else.
* The pump remembers its last ``recent_notifies`` notifies and the answers they
  carried (:class:`~dataplane.bff.reply.answers.RecentNotifies`), so a caller that read
  :meth:`ReplyPump.heard` before its job could finish can ask
  :meth:`ReplyPump.may_have_missed` whether that job's notify went by before its
  waiter was added (only then is the row check needed: under load, other jobs'
  notifies no longer cost every ``Prefer: wait`` POST a row read), and a stream or a
  poll that comes after its job's answer went by is answered from it
  (:meth:`ReplyPump.answered`, within bounds of age and deletions), without a read.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import trio
from opentelemetry.trace import SpanKind

from dataplane.bff.config import SWEEP_SECONDS
from dataplane.bff.reply.answers import RECENT_NOTIFIES, RecentNotifies
from dataplane.bff.reply.updates import READ_BATCH, UpdateFeed, UpdateKind
from dataplane.bff.reply.waiter import Waiter
from dataplane.core.errors import DatabaseError
from dataplane.db import Gap, Listener, Notification
from dataplane.db.listener import LISTEN_PING_TIMEOUT, LISTEN_RECONNECT_DELAYS
from dataplane.queue import (
    ROWS_DELETED_CHANNEL,
    JobRow,
    QueueClient,
    done_channel,
    split_done_notify,
)
from telemetry.metrics import instruments, track_waiters
from telemetry.tracing import context_from, messaging, tracer

log = logging.getLogger(__name__)

REJECTED_LOG_SECONDS = 60.0  # rejected notifies are logged at most once per this


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
    rejected: int = 0  # carried answers that did not open or parse, and jobless notifies
    progress: int = 0  # progress handed to waiters
    retries: int = 0  # retries (failed attempts tried again) handed to waiters


@dataclass
class _Counters:
    gaps: int = 0
    notifies: int = 0
    reads: int = 0
    carried: int = 0  # answers delivered from the notify itself (no read)
    sweeps: int = 0
    delivered: int = 0
    rejected: int = 0


class ReplyPump:
    def __init__(
        self,
        queue: QueueClient,
        channels: Sequence[str],
        *,
        sweep_seconds: float = SWEEP_SECONDS,
        reconnect_delays: Sequence[float] = LISTEN_RECONNECT_DELAYS,
        recent_notifies: int = RECENT_NOTIFIES,
        progress_channels: Sequence[str] = (),
        retry_channels: Sequence[str] = (),
    ) -> None:
        self.queue = queue
        self._waiters: dict[uuid.UUID, set[Waiter]] = {}
        self.updates = UpdateFeed(
            queue,
            lambda job_id: self._waiters.get(job_id, ()),
            self._reject,
            progress_channels=progress_channels,
            retry_channels=retry_channels,
        )
        self.sweep_seconds = sweep_seconds
        self.listener: Listener = queue.db.listener(
            # With no surface installed there is nothing to hear but deletions; the
            # listener still holds its session (and /readyz its meaning).
            [*channels, *self.updates.channels, ROWS_DELETED_CHANNEL],
            check_interval=max(0.05, sweep_seconds - LISTEN_PING_TIMEOUT),
            ping_timeout=min(LISTEN_PING_TIMEOUT, max(0.05, sweep_seconds / 2)),
            reconnect_delays=reconnect_delays,
        )
        self.waiting = 0  # waiters added and not yet discarded (dataplane.waiters)
        track_waiters(self)
        self._sweep_now = trio.Event()
        self._counters = _Counters()
        self.recent = RecentNotifies(recent_notifies)
        self._ended = False  # run() has ended: new waiters are abandoned at once
        self._rejected_logged = -REJECTED_LOG_SECONDS

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, dispatch and sweep; ``started`` once LISTEN has executed. However it
        ends, its waiters are abandoned (their streams end, their clients ask again)."""
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.listener.run)
                nursery.start_soon(self._dispatch)
                nursery.start_soon(self._sweeper)
                task_status.started()
        finally:
            self._abandon_all()

    def _abandon_all(self) -> None:
        self._ended = True
        waiters, self._waiters = self._waiters, {}
        for job_waiters in waiters.values():
            for waiter in job_waiters:
                waiter.abandon()

    @property
    def listening(self) -> bool:
        return self.listener.connected

    def add(self, job_id: uuid.UUID) -> Waiter:
        """A new waiter on ``job_id``; :meth:`discard` it when it is no longer wanted."""
        waiter = Waiter(job_id)
        self.waiting += 1
        if self._ended:
            waiter.abandon()
            return waiter
        self._waiters.setdefault(job_id, set()).add(waiter)
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
        return self.recent.missed_since(job_id, since.notifies)

    def answered(self, job_id: uuid.UUID) -> JobRow | None:
        """The finished row of ``job_id`` when one of the notifies still remembered
        carried its answer (:meth:`RecentNotifies.answered`); else None: then read the
        row. The row's owner is not in it (:meth:`JobRow.from_done_note`): the caller
        knows the caller may see the job by other means (a URL token minted for it)."""
        return self.recent.answered(job_id, self._open)

    def _open(self, job_id: uuid.UUID, sealed: str) -> JobRow | None:
        """The row a carried answer holds, if it opens with the notify secret and its
        note parses; else None, counted and logged (at most once a minute)."""
        seal = self.queue.seal
        note = seal.open(str(job_id), sealed) if seal is not None else None
        row = JobRow.from_done_note(job_id, note) if note is not None else None
        if row is None:
            self._reject(
                "a carried answer that does not open"
                if note is None
                else "a carried answer whose note does not parse"
            )
        return row

    def _reject(self, what: str) -> None:
        self._counters.rejected += 1
        instruments().notify_rejected.add(1)
        now = time.monotonic()
        if now - self._rejected_logged >= REJECTED_LOG_SECONDS:
            self._rejected_logged = now
            log.warning(
                "pump: %s (%d rejected so far): its row is read instead. A notify from "
                "outside the plane (any role that may connect can NOTIFY), or a worker "
                "with another DATAPLANE_NOTIFY_SECRET",
                what,
                self._counters.rejected,
            )

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
            rejected=c.rejected,
            progress=self.updates.progress,
            retries=self.updates.retries,
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
            updates_wanted: dict[UpdateKind, set[uuid.UUID]] = {}
            for event in batch:
                if isinstance(event, Gap):
                    self._counters.gaps += 1
                    self._sweep_now.set()
                elif event.channel == ROWS_DELETED_CHANNEL:
                    self.recent.rows_deleted(self._counters.notifies)  # not served now
                elif (kind := self.updates.kind_of(event.channel)) is not None:
                    self.updates.take(event, kind, updates_wanted.setdefault(kind, set()))
                else:
                    try:
                        self._take(event, wanted)
                    except Exception:  # a bug, not an input: the sweep reads the waiters' rows
                        log.exception("pump: could not take a notify in; the sweep will read")
                        self._sweep_now.set()
            if wanted:
                await self._read_and_deliver(list(wanted), notified=True)
            for kind, ids in updates_wanted.items():
                if ids - wanted:
                    await self.updates.read(kind, list(ids - wanted))

    def _take(self, event: Notification, wanted: set[uuid.UUID]) -> None:
        """One done notify: remembered; delivered when it carries an answer that opens,
        else its job is ``wanted`` (read) when someone here waits on it."""
        self._counters.notifies += 1
        try:
            job_id, sealed = split_done_notify(event.payload)
        except ValueError:
            self._reject(f"a notify on {event.channel} that names no job")
            return
        self.recent.remember(self._counters.notifies, job_id, sealed)
        if job_id not in self._waiters:
            return
        wanted.add(job_id)  # unless its answer opens
        if sealed is not None:
            row = self._open(job_id, sealed)
            if row is not None:
                wanted.discard(job_id)
                self._counters.carried += 1
                _notify_span(row, time.time_ns())
                self.deliver(row)

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
