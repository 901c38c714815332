"""Pausing a queue type: its claims take nothing until it is resumed (issue 41).

A paused type is a row of ``maestro_paused`` (migration 0017). ``maestro_claim`` returns
nothing for it and ``maestro_queue_depth`` reports 0 (migration 0018), so its workers
stay idle (an empty claim backs off as ever) and an autoscaler does not add any. Its
rows stay pending: nothing is lost, enqueues and attaches still work, a lapsed lease
is claimed (or poisoned) once it is resumed. Resuming wakes the type's claimers, so its
backlog is taken at once. Each change writes one audit row in its transaction; pausing
a paused type (or resuming one that is not) changes nothing and records nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dataplane.db import Connection, Database, q
from dataplane.operator.audit import Operator, record
from dataplane.queue import QueueType


@dataclass(frozen=True, slots=True)
class Paused:
    """A paused queue type, since when, by whom (an :class:`Operator`'s actor)."""

    type: str
    paused_at: datetime
    paused_by: str


async def pause(db: Database, operator: Operator, queue_type: str) -> bool:
    """Pause ``queue_type`` (:class:`InvalidArgument` unless it is one); False if it
    already was."""
    return await _change(db, operator, "pause", "queue_pause", queue_type)


async def resume(db: Database, operator: Operator, queue_type: str) -> bool:
    """Resume ``queue_type`` and wake its claimers; False if it was not paused."""
    return await _change(db, operator, "resume", "queue_resume", queue_type)


async def paused(db: Database) -> list[Paused]:
    """Every paused type, by name."""
    rows = await db.fetchall(q("queue_paused_list"))
    return [Paused(row["type"], row["paused_at"], row["paused_by"]) for row in rows]


async def _change(
    db: Database, operator: Operator, action: str, statement: str, queue_type: str
) -> bool:
    name = QueueType.parse(queue_type).name

    async def change(conn: Connection) -> bool:
        async with conn.transaction():
            cur = await conn.execute(q(statement), {"type": name, "by": operator.actor})
            changed = await cur.fetchone() is not None  # False: it was already so
            await record(conn, operator, action, {"type": name}, int(changed))
            return changed

    return await db.run(change)
