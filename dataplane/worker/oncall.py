"""On call: which worker of a queue type answers the enqueue notify (no thundering herd).

Every worker of a type hears ``<type>_enqueued``. Were each to claim on it, one
enqueue would cost one claim per idle worker, all but one finding nothing. So the
workers of a type share one :class:`~dataplane.db.lock.SessionLock` (named after
the type): the worker holding it is *on call* and claims when the notify comes;
the others ignore the notify and wait for the lock inside Postgres, which hands
it to exactly one of them.

States of one worker: ``waiting`` (free slots, queued for the lock) -> ``on call``
(holds it: answers notifies; claims once on taking over, work may be waiting)
-> ``full`` (no free slot for :data:`STEP_DOWN_AFTER`: lets go, so the next
worker takes over and claims what this one could not) -> ``waiting`` once a slot
is free again. A worker with
no free slot never waits for the lock.

Failure handling: while the lock's connection is down the worker is
``degraded`` and answers every notify (a herd, not a stall); it reconnects after
2 s, then every 5 s. A crashed holder's lock dies with its connection. Polling
(the claimer's idle backoff) stays the safety net for rows no notify announces
(a backoff ending, a lapsed lease).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import trio

from dataplane.db.lock import SessionLock
from dataplane.errors import DatabaseError

log = logging.getLogger(__name__)

RECONNECT_DELAYS = (2.0, 5.0)  # seconds before retrying the lock after a failure
STEP_DOWN_AFTER = 0.05  # seconds a full worker stays on call before letting go


class OnCall:
    def __init__(
        self,
        lock: SessionLock,
        free_slots: Callable[[], int],
        wake: Callable[[], None],
        *,
        reconnect_delays: Sequence[float] = RECONNECT_DELAYS,
    ) -> None:
        self.lock = lock
        self.free_slots = free_slots
        self.wake = wake
        self.reconnect_delays = reconnect_delays
        self.degraded = True  # until the lock's connection is up: answer every notify
        self.takeovers = 0  # times this worker went on call
        self._changed = trio.Event()

    @property
    def on_call(self) -> bool:
        return self.lock.held

    def answers_notifies(self) -> bool:
        """Whether an enqueue notify should wake this worker's claimer."""
        return self.lock.held or self.degraded

    def slots_changed(self) -> None:
        """A claim was taken or a slot freed: maybe go on call, maybe step down."""
        self._changed.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        failures = 0
        try:
            while True:
                self._changed = trio.Event()
                try:
                    if self.free_slots() > 0 and not self.lock.held:
                        await self._take_over()
                    elif self.free_slots() <= 0 and self.lock.held:
                        await self._step_down_if_still_full()
                    else:
                        self.degraded = False
                        await self._changed.wait()
                    failures = 0
                except DatabaseError as exc:
                    self.degraded = True
                    delay = self.reconnect_delays[min(failures, len(self.reconnect_delays) - 1)]
                    failures += 1
                    log.warning(
                        "on-call lock: %s; answering every notify, retrying in %gs", exc, delay
                    )
                    await trio.sleep(delay)
        finally:
            self.lock.close()

    async def _step_down_if_still_full(self) -> None:
        """Let go once full for :data:`STEP_DOWN_AFTER` (a draining worker, whose slots
        come free within milliseconds, keeps the lock instead of trading it per batch)."""
        with trio.move_on_after(STEP_DOWN_AFTER) as waited:
            while self.free_slots() <= 0:
                self._changed = trio.Event()
                await self._changed.wait()
        if waited.cancelled_caught:
            await self.lock.release()  # the next worker takes over

    async def _take_over(self) -> None:
        self.degraded = False
        await self.lock.acquire()  # waits while another worker is on call
        self.takeovers += 1
        self.wake()  # work may have come while no one was on call
