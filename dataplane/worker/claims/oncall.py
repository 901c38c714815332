"""On call: which worker of a queue type answers the enqueue notify (no thundering herd).

Were every worker of a type to hear ``<type>_enqueued`` and claim on it, one
enqueue would cost one claim per idle worker, all but one finding nothing. So the
workers of a type share one :class:`~dataplane.db.lock.SessionLock` (named after
the type): the worker holding it is *on call*, LISTENs on the wake channel and
claims when the notify comes; the others do not even listen on it (a notify that
woke every idle process only to be ignored still cost each a wake-up) and wait
for the lock inside Postgres, which hands it to exactly one of them.

The hand-over loses no wake: a worker taking the call first LISTENs, then claims
once. A job enqueued before that LISTEN took effect is committed before the claim
starts, so the claim finds it; one enqueued after it is notified. A worker
stepping down lets the lock go first and UNLISTENs after, so for a moment two
workers may hear a notify (the one stepping down ignores it), never none without
a take-over claim to follow.

States of one worker: ``waiting`` (free slots, queued for the lock) -> ``on call``
(holds it: answers notifies; claims once on taking over, work may be waiting)
-> ``full`` (no free slot for :data:`STEP_DOWN_AFTER`: lets go, so the next
worker takes over and claims what this one could not) -> ``waiting`` once a slot
is free again. A worker with
no free slot never waits for the lock.

Failure handling: a worker on call looks at its lock's connection every second (no
round trip): when the server hung up (a restart, a failover: session locks die with
the old primary) the lock is gone and the worker is degraded, as when a statement on
it fails. While the lock's connection is down the worker is
``degraded``: it LISTENs and answers every notify (a herd, not a stall); it
reconnects after 2 s, then every 5 s. A crashed holder's lock dies with its
connection, and the longest waiter takes the call (LISTEN, then claim). While the
LISTEN connection itself is down nobody hears a notify; its reconnect listens on
the channels wanted then and emits a Gap, on which the claimer claims.

Why no job is stranded whatever happens to the notifies: every worker's claimer
polls at its idle backoff (100 ms doubling to ``DATAPLANE_IDLE_MS``) whether or not
it is on call or listening, so the notify and the take-over claim only make a
claim prompt; a job nobody is told about is claimed by the next poll. Polling is
also the safety net for rows no notify announces (a backoff ending, a lapsed lease).
A stopping worker (:meth:`OnCall.stop`) gives the call up at once.

Outsiders: an advisory lock needs no privilege, so any role that may connect can take
the on-call lock, or wait in line for it and be handed it, and then no worker would be
on call (wake-ups left to the polls, up to the idle backoff at idle). A worker
waiting for the lock asks every :data:`OUTSIDER_CHECK_SECONDS` (``outsider``, a
statement on the pool) whether a session that is not the plane's holds it; while one
does, the worker is ``degraded`` (it LISTENs and answers every notify), logs a WARNING
naming the role, and counts ``dataplane.outsider.locks`` (alert
``DataplaneOutsiderLock``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import trio

from dataplane.core.errors import DatabaseError, DatabaseUnavailable
from dataplane.db import Listener
from dataplane.db.lock import SessionLock
from telemetry.metrics import instruments

log = logging.getLogger(__name__)

RECONNECT_DELAYS = (2.0, 5.0)  # seconds before retrying the lock after a failure
STEP_DOWN_AFTER = 0.05  # seconds a full worker stays on call before letting go
LOCK_CHECK_SECONDS = 1.0  # while on call: how often the lock's connection is looked at
OUTSIDER_CHECK_SECONDS = 2.0  # while waiting for the lock: how often its holder is checked


class OnCall:
    def __init__(
        self,
        lock: SessionLock,
        free_slots: Callable[[], int],
        wake: Callable[[], None],
        *,
        listener: Listener | None = None,
        channel: str = "",
        reconnect_delays: Sequence[float] = RECONNECT_DELAYS,
        outsider: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        """``listener`` listens on ``channel`` (the wake channel) exactly while this
        worker answers notifies; without one, every notify is heard and filtered.
        ``outsider`` names the role of a session not the plane's that holds the lock
        (``None`` when none does)."""
        self.lock = lock
        self.free_slots = free_slots
        self.wake = wake
        self.listener = listener
        self.channel = channel
        self.reconnect_delays = reconnect_delays
        self.outsider = outsider
        self.outsider_seen: str | None = None  # the outsider holding the lock, if any
        self.degraded = True  # until the lock's connection is up: answer every notify
        self.takeovers = 0  # times this worker went on call
        self._changed = trio.Event()
        self._stopping = False
        self._turn = trio.CancelScope()  # the current state's wait; stop() cancels it
        # whether the listener listens on the channel (the worker creates it listening)
        self._listening = True
        # in the state that stands until a slot change or the lock says otherwise
        self._settled = False
        self.turns = 0  # decisions taken (each one a pass of run's loop)

    @property
    def on_call(self) -> bool:
        return self.lock.held

    @property
    def settled(self) -> bool:
        """Asleep in a state that stands until a slot change or the lock says otherwise."""
        return self._settled

    def answers_notifies(self) -> bool:
        """Whether an enqueue notify should wake this worker's claimer."""
        return self.lock.held or self.degraded

    def slots_changed(self) -> None:
        """A claim was taken or a slot freed: maybe go on call, maybe step down.

        While the state stands (on call with a free slot, or off call and full) a
        change that keeps it so wakes nothing: at idle every job took and freed a slot,
        and each woke this task for nothing (2.5 turns per job)."""
        if self._settled and (self.free_slots() > 0) == self.lock.held:
            return
        self._changed.set()

    def stop(self) -> None:
        """The worker stops claiming: give up the call (the next worker takes it now,
        not when this process exits) and stop listening."""
        if not self._stopping:
            self._stopping = True
            self._turn.cancel()  # a wait for the lock, too

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        failures = 0
        try:
            while not self._stopping:
                self.turns += 1
                self._changed = trio.Event()
                with self._new_turn():
                    try:
                        if self.free_slots() > 0 and not self.lock.held:
                            await self._take_over()
                        elif self.free_slots() <= 0 and self.lock.held:
                            await self._step_down_if_still_full()
                        else:
                            self.degraded = False
                            await self._follow()
                            self._settled = True
                            try:
                                await self._wait_changed()
                            finally:
                                self._settled = False
                        failures = 0
                    except DatabaseError as exc:
                        self.degraded = True
                        await self._follow()  # listen: answer every notify meanwhile
                        delay = self.reconnect_delays[min(failures, len(self.reconnect_delays) - 1)]
                        failures += 1
                        log.warning(
                            "on-call lock: %s; answering every notify, retrying in %gs",
                            exc,
                            delay,
                        )
                        await trio.sleep(delay)
            # Stopping: closing the lock's connection drops the lock (or the wait for
            # it), so the next worker takes the call now rather than when we exit.
            self.lock.close()
            self.degraded = False
            await self._follow()
            await trio.sleep_forever()
        finally:
            self.lock.close()

    async def _wait_changed(self) -> None:
        """Wait for a change of slots; while on call, check every
        :data:`LOCK_CHECK_SECONDS` that the lock still lives (a failover takes it with
        the old primary, and a holder runs no statement to find out)."""
        while not self._changed.is_set():
            if not self.lock.held:
                await self._changed.wait()
                return
            with trio.move_on_after(LOCK_CHECK_SECONDS):
                await self._changed.wait()
            if self.lock.lost():
                self.lock.close()
                raise DatabaseUnavailable("the on-call lock's connection is gone")

    async def _step_down_if_still_full(self) -> None:
        """Let go once full for :data:`STEP_DOWN_AFTER` (a draining worker, whose slots
        come free within milliseconds, keeps the lock instead of trading it per batch)."""
        with trio.move_on_after(STEP_DOWN_AFTER) as waited:
            while self.free_slots() <= 0:
                self._changed = trio.Event()
                await self._changed.wait()
        if waited.cancelled_caught:
            await self.lock.release()  # the next worker takes over (LISTEN, claim) ...
            await self._follow()  # ... so the notifies are not ours to hear

    async def _take_over(self) -> None:
        self.degraded = False
        await self._follow()  # another worker is on call: its notifies, not ours
        failed: DatabaseError | None = None
        async with trio.open_nursery() as nursery:
            if self.outsider is not None:
                nursery.start_soon(self._watch_holder)
            try:
                await self.lock.acquire()  # waits while another worker is on call
            except DatabaseError as exc:
                # Raised out of the nursery it would reach run() as an ExceptionGroup,
                # which its ``except DatabaseError`` does not catch: the worker died.
                failed = exc
            nursery.cancel_scope.cancel()
        if failed is not None:
            raise failed
        if self.outsider_seen is not None:
            log.warning("on-call lock: taken back from %r", self.outsider_seen)
            self.outsider_seen = None
        self.degraded = False
        self.takeovers += 1
        log.debug("on call for %s", self.channel or "this queue type")
        # LISTEN first, then claim once: a job enqueued before the LISTEN took effect
        # is found by this claim, one enqueued after it is notified.
        await self._follow()
        self.wake()

    async def _watch_holder(self) -> None:
        """While waiting for the lock: is it held by a session that is not the plane's?
        Then answer every notify until it lets go (a wait in line, too, ends held)."""
        assert self.outsider is not None
        while True:
            await trio.sleep(OUTSIDER_CHECK_SECONDS)
            try:
                role = await self.outsider()
            except DatabaseError as exc:
                log.debug("on-call lock: holder check failed: %s", exc)
                continue
            if role is not None:
                instruments().outsider_locks.add(1, {"dataplane.lock": "oncall"})
            if role is not None and self.outsider_seen is None:
                log.warning(
                    "on-call lock for %s held by role %r, not the plane's: answering every"
                    " notify until it lets go (revoke its CONNECT)",
                    self.channel or "this queue type",
                    role,
                )
            elif role is None and self.outsider_seen is not None:
                log.warning("on-call lock: %r let go", self.outsider_seen)
            self.outsider_seen = role
            self.degraded = role is not None
            try:
                await self._follow()
            except DatabaseError as exc:  # the listener retries; so do we
                log.debug("on-call lock: cannot follow the holder check: %s", exc)

    def _new_turn(self) -> trio.CancelScope:
        self._turn = trio.CancelScope()
        return self._turn

    async def _follow(self) -> None:
        """LISTEN or UNLISTEN the wake channel so the listener hears it exactly while
        this worker answers notifies (returns once the statement ran)."""
        want = self.answers_notifies()
        if self.listener is None or want == self._listening:
            return
        self._listening = want  # first: a cancelled wait leaves the wanted set agreeing
        if want:
            await self.listener.listen(self.channel)
        else:
            await self.listener.unlisten(self.channel)
