"""The claims a worker holds, from claim to the row's last write.

A :class:`Running` is one claim: its job, the cancel scope its execution runs in,
and where it stands. The claimer adds it; the executor marks it ``finishing``
when it hands the outcome to the completer (the lease keeper leaves it be from
then on) and ``finished`` once its row is written or the write was refused; the
lease keeper marks it ``lost`` and cancels it when a renewal finds the claim gone.

Claims are keyed by (job id, dequeue count), not by job: a job failed with no
backoff can be claimed again by this worker before its first run has finished
its bookkeeping.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import trio

from dataplane.queue import ClaimedJob


@dataclass(eq=False)
class Running:
    job: ClaimedJob
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    finishing: bool = False  # handed to the completer: the lease keeper leaves it be
    finished: bool = False  # its row was written (or the write was refused)
    lost: bool = False  # a renewal found the claim gone: its work is dropped

    @property
    def renewable(self) -> bool:
        return not (self.finishing or self.finished)


class HeldJobs:
    """The running claims, and a signal for when there are none."""

    def __init__(self) -> None:
        self._held: dict[tuple[uuid.UUID, int], Running] = {}
        self._idle = trio.Event()
        self._idle.set()

    def add(self, job: ClaimedJob) -> Running:
        running = Running(job)
        if not self._held:  # busy from now on (no one waits on the set event any more)
            self._idle = trio.Event()
        self._held[job.id, job.dequeue_count] = running
        return running

    def remove(self, running: Running) -> None:
        del self._held[running.job.id, running.job.dequeue_count]
        if not self._held:
            self._idle.set()

    def renewable(self) -> list[Running]:
        return [r for r in self._held.values() if r.renewable]

    def __len__(self) -> int:
        return len(self._held)

    async def wait_idle(self) -> None:
        """Return once no claim is held (at once if none is)."""
        while self._held:
            await self._idle.wait()
