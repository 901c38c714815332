"""The claimer: takes jobs of one queue type, never more than the worker has free slots.

It claims at most the free slots (:meth:`HeldJobs.free_slots`) in one statement
and starts each claim's execution in the jobs nursery it is given. A claim that
filled every free slot may have left work behind: the next claim follows as soon
as a slot is free. A claim that took fewer rows than it asked for (or none) found
the queue empty: the claimer then waits, 100 ms doubling to ``idle_ms``, cut
short by :meth:`Claimer.wake` (an enqueue notify, a LISTEN gap, going on call);
a freed slot (:meth:`Claimer.slot_freed`) ends the wait only while work may be
waiting. Work found restarts the backoff at 100 ms only while this worker does
not hear the enqueue notify (not on call, or its LISTEN connection down): a worker
that hears it is told of the next job, and the poll right after work would find
nothing. A retry its own worker scheduled (:meth:`Claimer.retry_due`, a failed
job's backoff) ends the wait when it falls due; a retry nobody scheduled (another
worker's, a lapsed lease) is the poll's. So at idle one enqueue costs one claim.
A failed claim (queue DB down) is logged and retried after at least
:data:`DB_ERROR_BACKOFF`. :meth:`Claimer.stop`
ends the loop; the jobs already started are the worker's to finish.

A claim also parks as poison the claimable rows whose dequeue budget is spent (their
last attempt's worker died): the claimer traces, counts and logs each
(:func:`~dataplane.maintenance.poison.report_lapsed`), and counts it among the rows the
claim took, so a batch filled partly by such rows is followed at once too.

Flow control: every claim carries the flow bounds of the surface's operations
(:func:`flow_bounds`; ``maestro_claim`` enforces them fleet-wide, migration 0015). An
operation whose rows a claim left pending for its bound is counted
(``dataplane.flow.deferred``); such rows are waiting work that no notify announces
when a slot frees on another worker, so after a deferral the poll stays at its first
step (100 ms) and a slot freed here claims again at once.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Awaitable, Callable

import trio

from dataplane.core.errors import DatabaseError
from dataplane.maintenance.poison import report_lapsed
from dataplane.queue import ClaimBatch, FlowBound, FlowBounds, QueueClient
from dataplane.surfaces.manifest import Surface
from dataplane.worker.claims.held import HeldJobs, Running
from dataplane.worker.config import WorkerConfig
from telemetry.metrics import OPERATION, QUEUE_TYPE, instruments

log = logging.getLogger(__name__)

DB_ERROR_BACKOFF = 1.0  # seconds after a failed claim before trying again
MAX_DUE = 1024  # retries remembered (more fall to the poll)


def flow_bounds(surface: Surface) -> dict[str, FlowBound]:
    """The flow bounds of the surface's bounded operations (their latest versions)."""
    return {
        op.name: FlowBound(op.max_concurrency, op.max_concurrency_per_client)
        for op in surface.operations.values()
        if op.max_concurrency is not None or op.max_concurrency_per_client is not None
    }


class Claimer:
    def __init__(
        self,
        config: WorkerConfig,
        queue: QueueClient,
        held: HeldJobs,
        execute: Callable[[Running], Awaitable[None]],
        *,
        hears_enqueues: Callable[[], bool] = lambda: False,
        bounds: FlowBounds | None = None,
    ) -> None:
        """``hears_enqueues``: whether the enqueue notify reaches this worker now (on
        call and listening); while it does, work found does not restart the poll.
        ``bounds``: the flow bounds every claim carries (:func:`flow_bounds`)."""
        self.config = config
        self.queue = queue
        self.held = held
        self.execute = execute
        self.hears_enqueues = hears_enqueues
        self.bounds = dict(bounds or {})
        self.deferrals = 0  # (claim, operation) pairs left pending for a flow bound
        self.claims = 0  # claim statements run
        self.idle_claims = 0  # of which found nothing
        self.claimed = 0  # rows claimed
        self.poisoned = 0  # rows its claims parked as poison (their last lease lapsed)
        self.last_tick = 0.0  # trio time of the last claim statement run (the liveness probe)
        self._wake = trio.Event()
        self._more = True  # work may be waiting: the last claim was full, or a wake came
        self._stopping = False
        self._idle_claim: trio.Event | None = None  # set by an idle claim while someone waits
        self._due: list[float] = []  # trio times at which a scheduled retry is claimable
        self._waiting: trio.CancelScope | None = None  # the current wait, while it lasts

    def wake(self) -> None:
        """Claim again now: work may be waiting."""
        self._more = True
        self._wake.set()

    def slot_freed(self) -> None:
        """A slot came free: claim again if work may be waiting."""
        if self._more:
            self._wake.set()

    def retry_due(self, delay: float) -> None:
        """A job this worker failed is claimable again in ``delay`` seconds: claim then
        (its row's ``available_at`` was set by a statement that ran before this call)."""
        if len(self._due) >= MAX_DUE:
            return  # the poll finds it
        due = trio.current_time() + delay
        heapq.heappush(self._due, due)
        if self._waiting is not None and due < self._waiting.deadline:
            self._waiting.deadline = due

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    async def wait_idle_claims(self, count: int = 1) -> None:
        """Return once ``count`` claim statements in all have found nothing (a test signal)."""
        while self.idle_claims < count:
            if self._idle_claim is None:
                self._idle_claim = trio.Event()
            await self._idle_claim.wait()

    async def run(self, jobs: trio.Nursery) -> None:
        """Claim until :meth:`stop`, starting each claim's execution in ``jobs``."""
        config = self.config
        backoff_ms = config.poll_start_ms
        self.last_tick = trio.current_time()
        while not self._stopping:
            free = self.held.free_slots(config.concurrency)
            self._wake = trio.Event()  # before the claim: no wake-up can be lost
            if free <= 0:
                await self._wake.wait()
                continue
            try:
                batch = await self.queue.claim_batch(
                    config.queue_type,
                    config.worker_id,
                    limit=free,
                    lease_seconds=config.queue.lease_seconds,
                    bounds=self.bounds,
                )
            except DatabaseError as exc:
                log.warning("claim failed (%s); retrying", exc)
                batch = ClaimBatch([], [])
                backoff_ms = max(backoff_ms, int(DB_ERROR_BACKOFF * 1000))
            self.claims += 1
            self.last_tick = trio.current_time()
            if batch.poisoned:
                self.poisoned += len(batch.poisoned)
                report_lapsed(batch.poisoned, log, found_by=f"a claim of {config.worker_id}")
            if batch.deferred:
                self._deferred(batch.deferred)
                backoff_ms = config.poll_start_ms
            if batch.taken:
                if not self.hears_enqueues():  # polling is how it hears of work
                    backoff_ms = config.poll_start_ms
                self.claimed += len(batch.jobs)
                for job in batch.jobs:
                    jobs.start_soon(self.execute, self.held.add(job))
                if batch.taken == free:
                    self._more = True
                    continue
                self._more = bool(batch.deferred)  # deferred: a freed slot claims again
                await self._wait(backoff_ms)
                continue
            self._more = bool(batch.deferred)
            self.idle_claims += 1
            if self._idle_claim is not None:  # someone is in wait_idle_claims
                self._idle_claim.set()
                self._idle_claim = None
            await self._wait(backoff_ms)
            backoff_ms = min(backoff_ms * 2, config.idle_ms)

    def _deferred(self, operations: list[str]) -> None:
        self.deferrals += len(operations)
        counter = instruments().flow_deferred
        for operation in operations:
            counter.add(1, {QUEUE_TYPE: self.config.queue_type, OPERATION: operation})

    async def _wait(self, backoff_ms: int) -> None:
        """Until a wake, the poll backoff, or the next scheduled retry, if sooner."""
        deadline = trio.current_time() + backoff_ms / 1000
        if self._due:
            deadline = min(deadline, self._due[0])
        with trio.move_on_at(deadline) as self._waiting:
            await self._wake.wait()
        self._waiting = None
        now = trio.current_time()
        while self._due and self._due[0] <= now:  # the claim that follows finds them
            heapq.heappop(self._due)
