"""The worker's maintenance schedule: a retention pass hourly, only while idle.

The pass itself is :func:`dataplane.queue.reaper.reap_once`. A failed pass is
logged and retried at the next turn.
"""

from __future__ import annotations

import logging

import trio

from dataplane.db import Database
from dataplane.errors import DatabaseError
from dataplane.queue.reaper import RetentionConfig, reap_once
from dataplane.worker.held import HeldJobs

log = logging.getLogger(__name__)


class Maintenance:
    def __init__(
        self, db: Database, held: HeldJobs, *, interval: float, retention: RetentionConfig
    ) -> None:
        self.db = db
        self.held = held
        self.interval = interval
        self.retention = retention
        self.passes = 0

    async def run(self) -> None:
        while True:
            await trio.sleep(self.interval)
            await self.held.wait_idle()
            try:
                result = await reap_once(self.db, self.retention)
            except DatabaseError as exc:
                log.warning("reaper pass failed (%s); next pass in %gs", exc, self.interval)
                continue
            self.passes += 1
            log.info("reaper: %s", result)
