"""Retention: the reaper keeps the hot queue table small.

One pass deletes ``done`` rows older than 24 h, ``poison`` rows older than 7 d and
expired blobs, each in bounded batches, and moves live rows that can never be
claimed again (dequeue budget spent, lease lapsed) to ``poison`` with a done
notify so waiting browsers learn at once. The worker runs a pass hourly, and
only while idle; a failed pass is logged and retried at the next turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.db import Database, q
from dataplane.errors import InvalidArgument

DONE_RETENTION_SECONDS = 24 * 3600.0
POISON_RETENTION_SECONDS = 7 * 24 * 3600.0
REAP_INTERVAL_SECONDS = 3600.0
REAP_BATCH = 5000  # rows per statement
REAP_MAX_BATCHES = 200  # per table per pass: a pass is bounded in time too


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


async def reap_once(db: Database, config: RetentionConfig | None = None) -> ReapResult:
    """One retention pass over the queue DB."""
    config = config or RetentionConfig()
    poisoned = await db.fetchall(q("reap_lapsed_at_cutoff"), {"batch": config.batch})
    done = await _delete_batches(
        db, "reap_done", {"retention_seconds": config.done_seconds}, config
    )
    poison = await _delete_batches(
        db, "reap_poison", {"retention_seconds": config.poison_seconds}, config
    )
    blobs = await _delete_batches(db, "reap_blobs", {}, config)
    return ReapResult(done, poison, blobs, len(poisoned))


async def _delete_batches(
    db: Database, name: str, params: dict[str, float], config: RetentionConfig
) -> int:
    total = 0
    for _ in range(config.max_batches):
        n = await db.execute(q(name), {**params, "batch": config.batch})
        total += n
        if n < config.batch:
            break
    return total
