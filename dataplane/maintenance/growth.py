"""Plans made on a small queue, made again when it grows.

Postgres keeps a session's generic plan of a prepared statement until the table's
statistics change (a VACUUM or an ANALYZE invalidates it). The plane's sessions
start at idle, so those plans are usually made while the queue's tables are nearly
empty, where reading a whole table, or the whole of one of its indexes, looks
cheapest. Kept through a burst, such a plan reads the table at every enqueue,
completion and reply read until autovacuum next analyzes it, about a minute later by
default (``docs/perf/plan-growth.md``).

:class:`GrowthWatch` compares, every second, each table's size with the size the
planner last measured (``pg_class.relpages``). A table that has grown past
``GROWTH_FACTOR`` times that, and past ``GROWTH_FLOOR_PAGES``, is analyzed at once:
every session's plans of it are then made again, once, for the table as it is. A
plan can only be as old as the table's last statistics, so no plan in any session
was made on a table more than ``GROWTH_FACTOR`` times smaller than it is.

An ANALYZE waits at most 500 ms for its lock (a VACUUM, autovacuum's included, holds
it; autovacuum updates the statistics itself when it ends) and is tried again
``RETRY_SECONDS`` later. A role that may not analyze the table (neither its owner nor
granted ``MAINTAIN``) gets a warning from Postgres, not an error: the watch sees the
statistics unchanged, logs once, and stops trying. Autovacuum's own ANALYZE still
comes.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import LiteralString

import trio

from dataplane.core.errors import DatabaseError
from dataplane.db import Connection, Database, q

log = logging.getLogger(__name__)

WATCH_SECONDS = 1.0  # how often the tables' sizes are compared
GROWTH_FACTOR = 4  # a table this many times its planned size is analyzed
GROWTH_FLOOR_PAGES = 128  # 1 MiB: below it a whole-table read costs well under 1 ms
ANALYZE_EVERY = 30.0  # seconds between two analyses of one table by one process
ANALYZE_TIMEOUT = 60.0  # seconds one ANALYZE may take (it samples 30,000 rows)
RETRY_SECONDS = 2.0  # after an ANALYZE that failed (its lock was taken, the DB was down)

_ANALYZE = {"maestro_queues": "queue_analyze", "surface_result_blobs": "blobs_analyze"}


@dataclass(frozen=True, slots=True)
class TableSize:
    name: str
    planned_pages: int  # pg_class.relpages: the size the last VACUUM or ANALYZE saw
    pages: int  # its size now

    def outgrown(self, factor: int, floor: int) -> bool:
        return self.pages >= floor and self.pages > factor * max(self.planned_pages, 1)


class GrowthWatch:
    def __init__(
        self,
        db: Database,
        *,
        interval: float = WATCH_SECONDS,
        factor: int = GROWTH_FACTOR,
        floor_pages: int = GROWTH_FLOOR_PAGES,
        every: float = ANALYZE_EVERY,
    ) -> None:
        self.db = db
        self.interval = interval
        self.factor = factor
        self.floor_pages = floor_pages
        self.every = every
        self._next: dict[str, float] = {}  # table -> earliest time of its next analysis
        self._refused: set[str] = set()  # tables this role may not analyze

    async def run(self) -> None:
        while True:
            await self.check()
            await trio.sleep(self.interval)

    async def check(self) -> list[str]:
        """Analyze the tables that outgrew their planned size; returns their names."""
        try:
            sizes = await self.sizes()
        except DatabaseError as exc:
            log.warning("plan freshness: cannot read the queue tables' sizes (%s)", exc)
            return []
        now = trio.current_time()
        done = []
        for table in sizes:
            if (
                table.name in self._refused
                or now < self._next.get(table.name, -math.inf)
                or not table.outgrown(self.factor, self.floor_pages)
            ):
                continue
            self._next[table.name] = now + self.every
            if await self._analyze(table):
                done.append(table.name)
        return done

    async def sizes(self) -> list[TableSize]:
        rows = await self.db.fetchall(q("table_growth"))
        return [TableSize(r["name"], int(r["planned_pages"]), int(r["pages"])) for r in rows]

    async def _analyze(self, table: TableSize) -> bool:
        try:
            await self.db.run(_analyze, q(_ANALYZE[table.name]), call_timeout=ANALYZE_TIMEOUT)
            after = {t.name: t for t in await self.sizes()}
        except DatabaseError as exc:
            self._next[table.name] = trio.current_time() + RETRY_SECONDS
            log.warning(
                "plan freshness: ANALYZE %s failed (%s); trying again in %gs",
                table.name,
                exc,
                RETRY_SECONDS,
            )
            return False
        planned = after[table.name].planned_pages if table.name in after else 0
        if planned <= table.planned_pages:  # statistics unchanged: the ANALYZE was skipped
            self._refused.add(table.name)
            log.warning(
                "plan freshness: this role may not ANALYZE %s (make it the owner or grant"
                " it MAINTAIN); plans made on the smaller table last until autovacuum's",
                table.name,
            )
            return False
        log.info(
            "plan freshness: %s grew from %d to %d pages since its statistics; analyzed,"
            " so plans made on the smaller table are made again",
            table.name,
            table.planned_pages,
            table.pages,
        )
        return True


async def _analyze(conn: Connection, statement: LiteralString) -> None:
    """The ANALYZE in its own transaction, under the watch's lock timeout."""
    async with conn.transaction():
        await conn.execute(q("analyze_lock_timeout"))
        await conn.execute(statement)
