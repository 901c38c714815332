"""The queue sampler: the queue's shape as gauges, read by one elected worker.

Every worker runs a :class:`QueueSampler`; the one whose dedicated session holds the
sampler's advisory lock (:func:`~dataplane.db.lock.open_elected`) leads, and every
``interval`` seconds reads rows by queue type and state (``ready``, ``backing_off``,
``running``, ``lease_lapsed``, ``poison``) and the age of each type's oldest claimable
row since it became claimable, in one statement, and publishes them as the
``dataplane.queue.depth`` and ``dataplane.queue.oldest_ready_age`` gauges. The others
only retry the lock at the same cadence, so the fleet runs one sample per interval
whatever its size, and one process exports the gauges (no double counting, no stale
copies). A type that was seen keeps reporting zeros once empty, so its series never
just vanish. A published sample expires after a few intervals; on losing its session
(the database went away) the leader withdraws it at once, and any worker may lead next.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import trio

from dataplane.core.errors import DatabaseError
from dataplane.db import Database, q
from dataplane.db.lock import ElectedSession, open_elected
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

    async def run(self) -> None:
        """Lead when elected, else keep trying; a lost session is logged and retried."""
        while True:
            try:
                async with open_elected(
                    self.db.config, self.db.loop, q("sampler_lock"), retry_seconds=self.interval
                ) as session:
                    self.leading = True
                    log.info("queue sampler: elected; sampling every %gs", self.interval)
                    while True:
                        await self.sample_once(session)
                        await trio.sleep(self.interval)
            except DatabaseError as exc:
                log.warning("queue sampler: %s; trying again in %gs", exc, self.interval)
            finally:
                if self.leading:
                    self.leading = False
                    withdraw_queue_sample()
            await trio.sleep(self.interval)

    async def sample_once(self, session: ElectedSession) -> None:
        rows = await session.fetchall(q("queue_depth_sample"))
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
