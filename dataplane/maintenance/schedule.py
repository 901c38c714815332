"""Maintenance as its own schedule: a pass every ``interval`` seconds, busy or not.

The fleet's :class:`~dataplane.maintenance.leader.Leader` runs this service where it
leads, so the fleet runs one pass at a time whatever its size, and a fleet that is
never idle is still maintained. Each pass takes the ``maintenance`` election again on
its own connection (:func:`~dataplane.maintenance.retention.reap_once`): a leader that
lost its term meanwhile does nothing. Without a leader (``dataplane maintenance
--once``) a pass is a contender of its own that steps down after it. A failed pass is
logged and tried again at the next turn. Each row a pass parks as poison (its last
attempt's lease lapsed) gets its span in the request's trace, its count and its
WARNING line (:func:`~dataplane.maintenance.poison.report_lapsed`).
"""

from __future__ import annotations

import logging

import trio

from dataplane.core.errors import DatabaseError
from dataplane.db import Database
from dataplane.maintenance.elections import new_holder
from dataplane.maintenance.poison import report_lapsed
from dataplane.maintenance.retention import ReapResult, RetentionConfig, reap_once

log = logging.getLogger(__name__)

MAINTENANCE_SECONDS = 60.0  # cadence of maintenance passes; well under one lease


class Maintenance:
    def __init__(
        self,
        db: Database,
        *,
        interval: float = MAINTENANCE_SECONDS,
        retention: RetentionConfig | None = None,
        holder: str | None = None,
        keep: float | None = None,
    ) -> None:
        """``holder`` and ``keep``: the leader's name and term, which its passes keep."""
        self.db = db
        self.interval = interval
        self.retention = retention or RetentionConfig()
        self.passes = 0  # passes run by this process
        self.skipped = 0  # turns another process held the election
        self.holder = holder or new_holder()
        self.keep = keep

    async def run(self) -> None:
        while True:
            await trio.sleep(self.interval)
            await self.run_once()

    async def run_once(self) -> ReapResult | None:
        """One turn: a pass if elected; ``None`` if the pass failed."""
        try:
            result = await reap_once(self.db, self.retention, holder=self.holder, keep=self.keep)
        except DatabaseError as exc:
            log.warning("maintenance pass failed (%s); next turn in %gs", exc, self.interval)
            return None
        if not result.elected:
            self.skipped += 1
            return result
        self.passes += 1
        report_lapsed(result.poisoned_jobs, log, found_by="maintenance")
        if result.changed:
            log.info("maintenance: %s", result)
        return result
