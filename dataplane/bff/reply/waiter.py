"""One stream's interest in one job: its answer, and meanwhile its progress.

The reply pump (:mod:`dataplane.bff.reply.pump`) hands a waiter the job's finished row
once (:meth:`Waiter.deliver`) and, while it runs, each newer progress
(:meth:`Waiter.deliver_progress`: only a later ``(attempt, seq)`` replaces the one it
holds, so an old progress heard late changes nothing). ``Prefer: wait`` waits for the
row alone (:meth:`Waiter.wait`); a stream for whichever comes first
(:meth:`Waiter.changed`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import trio

from dataplane.queue import JobRow
from dataplane.queue.progress import Progress

NO_PROGRESS = (-1, -1)  # the order before any progress


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
        """Keep ``progress`` if it is newer than the one held (and the job has not
        finished here); whether it was kept."""
        if self.row is not None or self.abandoned or progress.order <= self.seen():
            return False
        self.progress = progress
        changed, self._changed = self._changed, trio.Event()
        changed.set()
        return True

    def seen(self) -> tuple[int, int]:
        return self.progress.order if self.progress is not None else NO_PROGRESS

    async def wait(self) -> JobRow | None:
        await self._event.wait()
        return self.row

    async def changed(self, seen: tuple[int, int]) -> None:
        """Until the job finished, the pump ended, or a progress newer than ``seen``."""
        while self.row is None and not self.abandoned and self.seen() <= seen:
            await self._changed.wait()
