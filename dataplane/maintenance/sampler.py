"""The queue sampler: the queue's shape as gauges, read by one elected worker.

Every worker runs a :class:`QueueSampler`; the one that holds the ``queue_sampler``
election (a row only the plane's roles may write, :mod:`dataplane.maintenance.elections`,
renewed at every sample for a term of a few intervals) leads, and every
``interval`` seconds reads rows by queue type and state (``ready``, ``backing_off``,
``running``, ``lease_lapsed``, ``poison``) and the age of each type's oldest claimable
row since it became claimable, in one statement, and publishes them as the
``dataplane.queue.depth`` and ``dataplane.queue.oldest_ready_age`` gauges. The others
only try the election at the same cadence, so the fleet runs one sample per interval
whatever its size, and one process exports the gauges (no double counting, no stale
copies). A type that was seen keeps reporting zeros once empty, so its series never
just vanish. A published sample expires after a few intervals; when a sample fails (the
database went away) the leader withdraws it at once, and a leader that stops steps
down, so another worker leads at its next try (a crashed one's term lapses first).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import trio

from dataplane.core.errors import DatabaseError
from dataplane.db import Database, q
from dataplane.maintenance.elections import QUEUE_SAMPLER, new_holder, release, take
from telemetry.metrics import (
    QUEUE_STATES,
    publish_queue_sample,
    withdraw_queue_sample,
)

log = logging.getLogger(__name__)

SAMPLE_SECONDS = 10.0  # cadence of samples, and of the others' tries for the lock
SAMPLE_VALID_INTERVALS = 3  # a sample not refreshed within 3 intervals is withdrawn
CLAIMABLE = ("ready", "lease_lapsed")


class QueueSampler:
    def __init__(
        self, db: Database, *, interval: float = SAMPLE_SECONDS, types: Iterable[str] = ()
    ) -> None:
        self.db = db
        self.interval = interval
        self.types = set(types)  # reported, at zero when empty, from the first sample on
        self.leading = False
        self.samples = 0  # samples taken by this process
        self._sampled = trio.Event()
        self.holder = new_holder()

    async def run(self) -> None:
        """Lead while elected, else keep trying; a failed sample is logged and retried."""
        term = SAMPLE_VALID_INTERVALS * self.interval
        try:
            while True:
                try:
                    if await take(self.db, QUEUE_SAMPLER, self.holder, term):
                        if not self.leading:
                            self.leading = True
                            log.info("queue sampler: elected; sampling every %gs", self.interval)
                        await self.sample_once()
                    elif self.leading:
                        self._step_down("another sampler holds the election")
                except DatabaseError as exc:
                    if self.leading:
                        self._step_down(str(exc))
                    log.warning("queue sampler: %s; trying again in %gs", exc, self.interval)
                await trio.sleep(self.interval)
        finally:
            if self.leading:
                self._step_down("stopping")
                with trio.move_on_after(2) as cleanup:
                    cleanup.shield = True
                    try:
                        await release(self.db, QUEUE_SAMPLER, self.holder)
                    except DatabaseError:
                        pass  # the term lapses by itself

    def _step_down(self, why: str) -> None:
        self.leading = False
        withdraw_queue_sample()
        log.info("queue sampler: no longer leading (%s)", why)

    async def sample_once(self) -> None:
        rows = await self.db.fetchall(q("queue_depth_sample"))
        self.types.update(row["type"] for row in rows)
        depth = {(t, state): 0 for t in self.types for state in QUEUE_STATES}
        oldest = dict.fromkeys(self.types, 0.0)
        for row in rows:
            depth[(row["type"], row["state"])] = int(row["n"])
            if row["state"] in CLAIMABLE:
                oldest[row["type"]] = max(oldest[row["type"]], float(row["oldest_seconds"]))
        publish_queue_sample(depth, oldest, valid_for=SAMPLE_VALID_INTERVALS * self.interval)
        self.samples += 1
        self._sampled.set()
        self._sampled = trio.Event()

    async def wait_sampled(self) -> None:
        """Return after this process's next sample (a test signal)."""
        await self._sampled.wait()
