"""The claims a worker holds, from claim to the row's last write.

A :class:`Running` is one claim: its job, the cancel scope its execution runs in,
and where it stands. The claimer adds it; the executor marks it ``finishing``
when it hands the outcome to the completer (a renewal that misses it then is
the completion landing, not a lost claim) and ``finished`` once its row is
written or the write was refused (the lease keeper stops renewing it); the lease
keeper marks it ``lost`` and cancels it when a renewal finds an unfinishing
claim gone.

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
    finishing: bool = False  # handed to the completer: a missed renewal is not a loss
    finished: bool = False  # its row was written (or the write was refused)
    lost: bool = False  # a renewal found the claim gone: its work is dropped

    @property
    def renewable(self) -> bool:
        """Held and unwritten: renewed, also while the completer retries its write."""
        return not self.finished


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
