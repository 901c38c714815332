"""Backpressure: how many live jobs each queue type and each client has.

:class:`LiveLoad` keeps the live-row counts by (type, client) as of its last
refresh (one grouped read of the queue DB each second, by the BFF's own task)
plus the jobs this BFF has added since. :meth:`LiveLoad.check` refuses a new job
(:class:`~dataplane.core.errors.QueueFull`) once the type holds ``max_live`` live rows
(``scope="type"``, answered 503) or the client ``max_live_per_client`` of them
(``scope="client"``, answered 429). Attaching to an identical live job adds no
row and is never refused. The counts are a second old at most, so several BFFs
together may overshoot a limit by what they accept within that second; that is
the price of an enqueue that stays one cheap statement. A failed refresh keeps
the last counts and is logged.
"""

from __future__ import annotations

import logging
from collections import Counter

import trio

from dataplane.core.errors import DatabaseError, QueueFull
from dataplane.queue import QueueClient, QueueConfig

log = logging.getLogger(__name__)

REFRESH_SECONDS = 1.0  # how old the live counts may be


class LiveLoad:
    def __init__(
        self, queue: QueueClient, config: QueueConfig, *, refresh: float = REFRESH_SECONDS
    ) -> None:
        self.queue = queue
        self.config = config
        self.refresh_seconds = refresh
        self._by_client: Counter[tuple[str, str]] = Counter()
        self._by_type: Counter[str] = Counter()
        self.refreshes = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self.refresh()
            await trio.sleep(self.refresh_seconds)

    async def refresh(self) -> None:
        try:
            counts = await self.queue.live_counts()
        except DatabaseError as exc:
            log.warning("backpressure: cannot read live counts (%s); keeping the last", exc)
            return
        self._by_client = Counter(counts)
        self._by_type = Counter()
        for (queue_type, _client), n in counts.items():
            self._by_type[queue_type] += n
        self.refreshes += 1

    def check(self, queue_type: str, client: str) -> None:
        """Raise :class:`QueueFull` if a new job of ``client`` on ``queue_type`` is over."""
        if self._by_client[queue_type, client] >= self.config.max_live_per_client:
            raise QueueFull(queue_type, "client")
        if self._by_type[queue_type] >= self.config.max_live:
            raise QueueFull(queue_type, "type")

    def added(self, queue_type: str, client: str) -> None:
        """This BFF added a live job (counted until the next refresh sees it)."""
        self._by_client[queue_type, client] += 1
        self._by_type[queue_type] += 1
