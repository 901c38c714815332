"""An operator cancels a job, pending or running: ``dataplane jobs cancel ID``, and the
console's action, through :func:`cancel`.

States: ``pending`` or ``in_progress`` -> ``cancelled`` (completed_at set, lease
cleared; the row names the operator and whether it was running: migration 0025, which
every answer of the job says); a finished job (``done``, ``poison``, ``cancelled``) is a
:class:`Conflict` carrying its status (the console's 409), an unknown id :class:`NotFound` (404).

One transaction: the row is locked (``job_operator_lock``), cancelled with its notifies
in one statement (``job_operator_cancel``), and the audit row written (action
``cancel``, target ``{"jobId": ...}``, rows 1); a failure leaves none of them. On
commit the job's streams hear of it on its done channel (they end ``CANCELLED``, as
after a withdrawal), and, for a running job, every worker of its type on the type's
cancel channel (:attr:`~dataplane.queue.types.QueueType.cancel_channel`). The worker
holding the claim checks the row against its claim and cancels the execution at once
(:mod:`dataplane.worker.claims.cancels`); a worker that missed the notify finds the
claim gone at its next lease renewal. Its late completion is fenced out either way
(``job_complete`` matches ``in_progress`` rows only).
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass

from dataplane.core.errors import DataPlaneError, InvalidArgument
from dataplane.db import Connection, Database, q
from dataplane.operator.audit import Operator, record
from dataplane.queue import LIVE_STATUSES, QueueType
from dataplane.queue.records import job_uuid


class NotFound(DataPlaneError):
    """No job has this id (the console's 404)."""

    http_status = 404


class Conflict(DataPlaneError):
    """The job is finished: nothing to cancel (the console's 409, with its status)."""

    http_status = 409

    def __init__(self, job_id: uuid.UUID, status: str) -> None:
        super().__init__(f"job {job_id} is {status}: only a pending or running job is cancelled")
        self.job_id = job_id
        self.status = status


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    job_id: uuid.UUID
    status_before: str  # pending or in_progress
    status_after: str  # cancelled


async def cancel(db: Database, operator: Operator, job_id: uuid.UUID | str) -> CancelOutcome:
    """Cancel a pending or running job, audited; :class:`NotFound`, :class:`Conflict`
    (its status) or :class:`InvalidArgument` (not a job id) change nothing."""
    job = job_uuid(job_id)
    return await db.run(_cancel, operator, job)


async def _cancel(conn: Connection, operator: Operator, job: uuid.UUID) -> CancelOutcome:
    async with conn.transaction():
        cur = await conn.execute(q("job_operator_lock"), {"id": job})
        row = await cur.fetchone()
        if row is None:
            raise NotFound(f"no job {job}")
        before: str = row["status"]
        if before not in LIVE_STATUSES:
            raise Conflict(job, before)
        running = before == "in_progress"
        channel = QueueType.parse(row["type"]).cancel_channel if running else None
        params = {"id": job, "cancel_channel": channel, "operator": operator.actor}
        cur = await conn.execute(q("job_operator_cancel"), params)
        assert await cur.fetchone() is not None  # locked and live: it is cancelled
        await record(conn, operator, "cancel", {"jobId": str(job)}, 1)
    return CancelOutcome(job, before, "cancelled")


async def cancel_command(db: Database, job_id: str) -> int:
    """``dataplane jobs cancel ID``: one line saying what happened; the exit code (0
    cancelled; 1 unknown, finished or not a job id)."""
    try:
        outcome = await cancel(db, Operator.cli(), job_id)
    except (NotFound, Conflict, InvalidArgument) as exc:
        print(f"dataplane jobs cancel: {exc}", file=sys.stderr)
        return 1
    was = "running" if outcome.status_before == "in_progress" else outcome.status_before
    print(f"job {outcome.job_id} cancelled (it was {was})")
    return 0
