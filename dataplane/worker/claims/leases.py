"""The lease keeper: renews every held lease each ``renew_seconds``.

A renewal is one fenced statement for all claims whose row is not yet written,
including those whose completion the completer is still retrying through an
outage. A running claim the renewal did not find held any more was lost (its
lease lapsed and another worker took the row, or it was released): its execution
is cancelled and its result will be dropped. A failed renewal (queue DB down) is
logged and tried again at the next beat; the lease is twice the cadence, so one
missed beat loses nothing.
"""

from __future__ import annotations

import logging

import trio

from dataplane.core.errors import DatabaseError
from dataplane.queue import QueueClient
from dataplane.worker.claims.held import HeldJobs
from dataplane.worker.config import WorkerConfig
from telemetry.metrics import QUEUE_TYPE, instruments

log = logging.getLogger(__name__)


class LeaseKeeper:
    def __init__(self, config: WorkerConfig, queue: QueueClient, held: HeldJobs) -> None:
        self.config = config
        self.queue = queue
        self.held = held
        self.renewals = 0
        self.last_tick = 0.0  # trio time the loop last woke (the liveness probe)

    async def run(self) -> None:
        while True:
            self.last_tick = trio.current_time()
            await trio.sleep(self.config.renew_seconds)
            await self.renew_once()

    async def renew_once(self) -> None:
        held = self.held.renewable()
        if not held:
            return
        try:
            kept = await self.queue.renew(
                [r.job for r in held], lease_seconds=self.config.queue.lease_seconds
            )
        except DatabaseError as exc:
            log.warning("lease renewal failed (%s); will retry", exc)
            return
        self.renewals += 1
        for running in held:
            gone = running.finishing or running.finished or running.lost  # or cancelled
            if running.job.id not in kept and not gone:
                job = running.job
                log.warning(
                    "job %s (%s, attempt %d): lease lost; cancelling its execution",
                    job.id,
                    job.type,
                    job.dequeue_count,
                )
                instruments().lease_lost.add(1, {QUEUE_TYPE: job.type})
                running.lost = True
                running.scope.cancel()
