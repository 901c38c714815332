"""The queue sampler: the queue's shape as gauges, read where the fleet's leader leads.

The fleet's :class:`~dataplane.maintenance.leader.Leader` runs a :class:`QueueSampler`
where it leads: every ``interval`` seconds it reads rows by queue type and state
(``ready``, ``backing_off``, ``running``, ``lease_lapsed``, ``poison``) and the age of
each type's oldest claimable row since it became claimable, in one statement, and
publishes them as the ``dataplane.queue.depth`` and ``dataplane.queue.oldest_ready_age``
gauges, and the paused types (``maestro_paused``) as ``dataplane.queue.paused``. So
the fleet runs one sample per interval whatever its size, and one process exports the
gauges (no double counting, no stale copies). A type that was seen keeps
reporting zeros once empty, so its series never just vanish. A published sample
expires after a few intervals; when a sample fails (the database went away) it is
withdrawn at once, and a sampler that stops (its leader stepped down) withdraws it too,
so only the new leader's numbers are exported.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import trio

from dataplane.core.errors import DatabaseError
from dataplane.db import Database, q
from telemetry.metrics import (
    QUEUE_STATES,
    publish_queue_sample,
    withdraw_queue_sample,
)

log = logging.getLogger(__name__)

SAMPLE_SECONDS = 10.0  # cadence of samples
SAMPLE_VALID_INTERVALS = 3  # a sample not refreshed within 3 intervals is withdrawn
CLAIMABLE = ("ready", "lease_lapsed")


class QueueSampler:
    def __init__(
        self, db: Database, *, interval: float = SAMPLE_SECONDS, types: Iterable[str] = ()
    ) -> None:
        self.db = db
        self.interval = interval
        self.types = set(types)  # reported, at zero when empty, from the first sample on
        self.sampling = False  # running (where the leader leads)
        self.samples = 0  # samples taken by this process
        self._sampled = trio.Event()

    async def run(self) -> None:
        """Sample every ``interval`` until cancelled; a failed sample is withdrawn,
        logged and retried."""
        self.sampling = True
        log.info("queue sampler: sampling every %gs", self.interval)
        try:
            while True:
                try:
                    await self.sample_once()
                except DatabaseError as exc:
                    withdraw_queue_sample()
                    log.warning("queue sampler: %s; trying again in %gs", exc, self.interval)
                await trio.sleep(self.interval)
        finally:
            self.sampling = False
            withdraw_queue_sample()

    async def sample_once(self) -> None:
        rows = await self.db.fetchall(q("queue_depth_sample"))
        paused = {row["type"] for row in rows if row["state"] == "paused"}
        rows = [row for row in rows if row["state"] != "paused"]
        self.types.update(row["type"] for row in rows)
        self.types.update(paused)
        depth = {(t, state): 0 for t in self.types for state in QUEUE_STATES}
        oldest = dict.fromkeys(self.types, 0.0)
        for row in rows:
            depth[(row["type"], row["state"])] = int(row["n"])
            if row["state"] in CLAIMABLE:
                oldest[row["type"]] = max(oldest[row["type"]], float(row["oldest_seconds"]))
        valid_for = SAMPLE_VALID_INTERVALS * self.interval
        publish_queue_sample(depth, oldest, valid_for=valid_for, paused=paused)
        self.samples += 1
        self._sampled.set()
        self._sampled = trio.Event()

    async def wait_sampled(self) -> None:
        """Return after this process's next sample (a test signal)."""
        await self._sampled.wait()
