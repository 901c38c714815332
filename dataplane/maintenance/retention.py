"""Retention and lapsed leases: one maintenance pass over the queue DB.

A pass moves live rows that can never be claimed again (dequeue budget spent,
lease lapsed) to ``poison`` with a done notify, so waiting browsers learn at
once, and returns them (:attr:`ReapResult.poisoned_jobs`, which the caller
traces, counts and logs: :func:`~dataplane.maintenance.poison.report_lapsed`); then
deletes ``done`` and ``cancelled`` rows older than 24 h, ``poison`` rows older
than 7 d and expired blobs (:mod:`dataplane.queue.blobs`), each in bounded batches
(every batch its own short transaction: no long locks on the hot table, however
large the backlog).
:func:`reap_once` runs a pass on one connection that first takes the ``maintenance``
election (:mod:`dataplane.maintenance.elections`) for the pass's longest duration and steps
down after it (a leader's pass gives back its term instead): across the fleet, one pass
at a time; a pass that finds the election held by another does nothing and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dataplane.core.errors import InvalidArgument
from dataplane.db import Connection, Database, q
from dataplane.maintenance.elections import MAINTENANCE, hold_on, new_holder, release_on, take_on
from dataplane.queue.blobs import delete_expired
from dataplane.queue.records import Poisoned

DONE_RETENTION_SECONDS = 24 * 3600.0
POISON_RETENTION_SECONDS = 7 * 24 * 3600.0
REAP_BATCH = 5000  # rows per statement
REAP_MAX_BATCHES = 200  # per table per pass: a pass is bounded in time too
PASS_TIMEOUT = 300.0  # seconds one pass may take


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    done_seconds: float = DONE_RETENTION_SECONDS
    poison_seconds: float = POISON_RETENTION_SECONDS
    batch: int = REAP_BATCH
    max_batches: int = REAP_MAX_BATCHES

    def __post_init__(self) -> None:
        if self.done_seconds < 0 or self.poison_seconds < 0:
            raise InvalidArgument("retention must be >= 0 seconds")
        if self.batch < 1 or self.max_batches < 1:
            raise InvalidArgument("batch and max_batches must be >= 1")


@dataclass(frozen=True, slots=True)
class ReapResult:
    done_deleted: int
    poison_deleted: int
    blobs_deleted: int
    poisoned: int
    elected: bool = True  # False: another session held the lock; nothing was done
    poisoned_jobs: tuple[Poisoned, ...] = field(default=(), repr=False)  # each row poisoned

    @property
    def changed(self) -> int:
        return self.done_deleted + self.poison_deleted + self.blobs_deleted + self.poisoned


async def reap_once(
    db: Database,
    config: RetentionConfig | None = None,
    *,
    holder: str | None = None,
    keep: float | None = None,
) -> ReapResult:
    """One maintenance pass, if ``holder`` (a contender of its own when ``None``) is
    elected for it (one bridge crossing). The holder steps down after it, or, given
    ``keep`` (a leader's term), keeps the election for that long."""
    result: ReapResult = await db.run(
        _elected_pass,
        config or RetentionConfig(),
        holder or new_holder(),
        keep,
        call_timeout=PASS_TIMEOUT,
    )
    return result


async def _elected_pass(
    conn: Connection, config: RetentionConfig, holder: str, keep: float | None
) -> ReapResult:
    # The term outlasts the pass's timeout: a holder that dies mid-pass hands over then.
    if not await take_on(conn, MAINTENANCE, holder, PASS_TIMEOUT + 30):
        return ReapResult(0, 0, 0, 0, elected=False)
    try:
        cur = await conn.execute(q("reap_lapsed_at_cutoff"), {"batch": config.batch})
        poisoned = tuple(Poisoned.from_row(row) for row in await cur.fetchall())
        done = await _delete(conn, "reap_done", {"retention_seconds": config.done_seconds}, config)
        poison = await _delete(
            conn, "reap_poison", {"retention_seconds": config.poison_seconds}, config
        )
        blobs = await delete_expired(conn, batch=config.batch, max_batches=config.max_batches)
        return ReapResult(done, poison, blobs, len(poisoned), True, poisoned)
    finally:
        if not conn.closed and not conn.broken:
            if keep is None:
                await release_on(conn, MAINTENANCE, holder)
            else:
                await hold_on(conn, MAINTENANCE, holder, keep)


async def _delete(
    conn: Connection, name: str, params: dict[str, float], config: RetentionConfig
) -> int:
    total = 0
    for _ in range(config.max_batches):
        cur = await conn.execute(q(name), {**params, "batch": config.batch})
        total += cur.rowcount
        if cur.rowcount < config.batch:
            break
    return total
