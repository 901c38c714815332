"""The claims a worker holds, from claim to the row's last write.

A :class:`Running` is one claim: its job, the cancel scope its execution runs in,
and where it stands. The claimer adds it; the executor hands it off
(:meth:`HeldJobs.hand_off`, ``finishing``) when it gives the outcome to the
completer (a renewal that misses it then is the completion landing, not a lost
claim) and marks it ``finished`` once its row is written or the write was refused
(the lease keeper stops renewing it); the lease keeper marks it ``lost`` and
cancels it when a renewal finds an unfinishing claim gone (and so, at once, does an
operator's cancel of its row, :mod:`dataplane.worker.claims.cancels`, marking it
``cancelled`` too), and the deadline keeper
(:mod:`dataplane.worker.pipeline.deadlines`) marks it ``timed_out`` and cancels it when its
execution runs past its ``deadline``.

Slots: a claim occupies an execution slot from claim to hand-off, not until its
row is written, so the next claim overlaps the completion commit (claim and
commit no longer run in lockstep). :meth:`HeldJobs.free_slots` bounds both: at
most ``concurrency`` executing, and at most ``PIPELINE_DEPTH * concurrency`` held
in all (handed-off rows waiting for their commit included), so a slow queue DB
holds back claiming instead of piling up unwritten rows.

Claims are kept by identity, not by job nor by (job id, dequeue count): the same
job can be held twice at once. A job failed with no backoff can be claimed again by
this worker before its first run has finished its bookkeeping; and after a Postgres
failover that lost a claim's commit (a commit the old primary acknowledged before
its standby had it), the new primary hands the same job out again with the same
dequeue count while the first claim is still held here, its completion to be fenced
out. Keyed by (job id, dequeue count), the second claim replaced the first, whose
removal then took the second's entry, and the second's removal raised KeyError and
ended the worker (found by tests/ha).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import trio

from dataplane.queue import ClaimedJob

PIPELINE_DEPTH = 2  # held claims per execution slot: one batch executing, one committing


@dataclass(eq=False)
class Running:
    job: ClaimedJob
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    finishing: bool = False  # handed to the completer: a missed renewal is not a loss
    finished: bool = False  # its row was written (or the write was refused)
    lost: bool = False  # a renewal found the claim gone: its work is dropped
    cancelled: bool = False  # its row was cancelled (lost too: its work is dropped)
    deadline: float = math.inf  # Trio time its execution must end by (while it executes)
    timed_out: bool = False  # cancelled at its deadline (see dataplane.worker.pipeline.deadlines)

    @property
    def renewable(self) -> bool:
        """Held and unwritten: renewed, also while the completer retries its write."""
        return not self.finished


class HeldJobs:
    """The running claims, and a signal for when there are none."""

    def __init__(
        self,
        on_hand_off: Callable[[], None] | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self._held: dict[Running, None] = {}  # by identity (Running has eq=False), in order
        self._executing = 0  # held and not yet handed off
        self._on_hand_off = on_hand_off  # a slot came free
        self._on_change = on_change  # a claim was added, handed off or removed
        self._idle = trio.Event()
        self._idle.set()

    def add(self, job: ClaimedJob) -> Running:
        running = Running(job)
        if not self._held:  # busy from now on (no one waits on the set event any more)
            self._idle = trio.Event()
        self._held[running] = None
        self._executing += 1
        if self._on_change is not None:
            self._on_change()
        return running

    def hand_off(self, running: Running) -> None:
        """Its outcome goes to the queue DB now: its execution slot is free."""
        if running.finishing:
            return
        running.finishing = True
        self._executing -= 1
        if self._on_hand_off is not None:
            self._on_hand_off()
        if self._on_change is not None:
            self._on_change()

    def remove(self, running: Running) -> None:
        del self._held[running]
        if not running.finishing:
            self._executing -= 1
        if not self._held:
            self._idle.set()
        if self._on_change is not None:
            self._on_change()

    def free_slots(self, concurrency: int) -> int:
        """How many more claims may be taken now (see the module docstring)."""
        return min(concurrency - self._executing, PIPELINE_DEPTH * concurrency - len(self._held))

    @property
    def executing(self) -> int:
        return self._executing

    def running(self) -> Iterable[Running]:
        """Every held claim (a view: do not add or remove while iterating)."""
        return self._held.keys()

    def renewable(self) -> list[Running]:
        return [r for r in self._held if r.renewable]

    def __len__(self) -> int:
        return len(self._held)

    async def wait_idle(self) -> None:
        """Return once no claim is held (at once if none is)."""
        while self._held:
            await self._idle.wait()
