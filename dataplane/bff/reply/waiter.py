"""One stream's interest in one job: its answer, and meanwhile what it hears of it.

The reply pump (:mod:`dataplane.bff.reply.pump`) hands a waiter the job's finished row
once (:meth:`Waiter.deliver`) and, while it is live, each newer *update*: a progress
(:meth:`Waiter.deliver_progress`) or a failed attempt it will retry
(:meth:`Waiter.deliver_retry`). Updates are ordered by ``(attempt, seq)``, a retry after
every progress of its attempt and before the next attempt's
(:attr:`~dataplane.queue.notices.retries.Retry.order`): only a later one replaces what the
waiter holds, so an old update heard late changes nothing. ``Prefer: wait`` waits for
the row alone (:meth:`Waiter.wait`); a stream for whichever comes first
(:meth:`Waiter.changed`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import trio

from dataplane.queue import JobRow
from dataplane.queue.notices.progress import Progress
from dataplane.queue.notices.retries import Retry

NO_PROGRESS = (-1, -1)  # the order before any update

Update = Progress | Retry  # what a stream hears of a live job before its answer


@dataclass(eq=False)
class Waiter:
    """One stream's interest in one job; :meth:`wait` returns the finished row, or
    None once the pump that held it has ended (:attr:`abandoned`: the caller ends its
    stream without an answer, and its client asks again)."""

    job_id: uuid.UUID
    _event: trio.Event = field(default_factory=trio.Event)
    row: JobRow | None = None
    discarded: bool = False
    abandoned: bool = False
    progress: Progress | None = None  # the latest heard while it runs
    retry: Retry | None = None  # the latest failed attempt heard while it waits
    _changed: trio.Event = field(default_factory=trio.Event)

    def deliver(self, row: JobRow) -> None:
        if self.row is None and not self.abandoned:
            self.row = row
            self._event.set()
            self._changed.set()

    def abandon(self) -> None:
        if self.row is None:
            self.abandoned = True
            self._event.set()
            self._changed.set()

    def deliver_progress(self, progress: Progress) -> bool:
        """Keep ``progress`` if it is newer than the update held (and the job has not
        finished here); whether it was kept."""
        if not self._newer(progress):
            return False
        self.progress = progress
        self._wake()
        return True

    def deliver_retry(self, retry: Retry) -> bool:
        """Keep ``retry`` if it is newer than the update held; whether it was kept."""
        if not self._newer(retry):
            return False
        self.retry = retry
        self._wake()
        return True

    def deliver_update(self, update: Update) -> bool:
        if isinstance(update, Retry):
            return self.deliver_retry(update)
        return self.deliver_progress(update)

    def latest(self) -> Update | None:
        """The newest update held: the one a stream sends."""
        if self.retry is not None and (
            self.progress is None or self.retry.order > self.progress.order
        ):
            return self.retry
        return self.progress

    def seen(self) -> tuple[int, int]:
        latest = self.latest()
        return latest.order if latest is not None else NO_PROGRESS

    def _newer(self, update: Update) -> bool:
        return self.row is None and not self.abandoned and update.order > self.seen()

    def _wake(self) -> None:
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    async def wait(self) -> JobRow | None:
        await self._event.wait()
        return self.row

    async def changed(self, seen: tuple[int, int]) -> None:
        """Until the job finished, the pump ended, or an update newer than ``seen``."""
        while self.row is None and not self.abandoned and self.seen() <= seen:
            await self._changed.wait()
