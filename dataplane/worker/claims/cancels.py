"""Cancels of running jobs, heard on the type's cancel channel.

An operator's cancel (:mod:`dataplane.operator.cancel`), or the withdrawal of a running
job's last requester (the BFF's ``DELETE``, ``job_cancel``), makes its row
``cancelled`` and notifies ``surface_<id>[_dev]_cancel`` with its id; every worker of
the type LISTENs there (the worker's listener). :meth:`CancelWatch.heard` takes the
notify without blocking: one for a job this worker does not hold, or not an id at all,
is ignored at once (no query); one for a held claim is queued for :meth:`run`.

The notify is a hint, never an order: any role that may connect may NOTIFY. For each
held claim of that job still executing, :meth:`run` reads the row fenced on the claim
(:meth:`~dataplane.queue.QueueClient.cancelled_held`: cancelled, and still naming
this worker and this claim's dequeue count); only then is the claim marked
``cancelled`` and ``lost`` and its execution's cancel scope cancelled. The executor
then drops the work (the row is final: nothing is completed, failed nor released)
and counts the attempt ``cancelled``. A forged notify costs one indexed read and changes nothing.

Failure handling: a notify missed (a LISTEN gap, a full queue, a claim not yet added
when it came, the check's read failing) leaves the cancel to the lease keeper, whose
next renewal finds the claim gone (a lost lease, then); a completion that races the
cancel is fenced out by ``job_complete`` (it matches ``in_progress`` rows only).
"""

from __future__ import annotations

import logging
import uuid

import trio

from dataplane.core.errors import DatabaseError
from dataplane.queue import QueueClient
from dataplane.worker.claims.held import HeldJobs, Running

log = logging.getLogger(__name__)

QUEUE_SIZE = 64  # cancel notifies of held jobs waiting for their check


class CancelWatch:
    """Checks each cancel notify of a held claim against its row, and cancels it."""

    def __init__(self, queue: QueueClient, held: HeldJobs) -> None:
        self.queue = queue
        self.held = held
        self.cancelled = 0  # executions cancelled (for an operator or the requesters)
        self.ignored = 0  # notifies of no held claim, or not an id, or queued too many
        self.refused = 0  # notifies of a held claim whose row was not cancelled
        self._send, self._receive = trio.open_memory_channel[uuid.UUID](QUEUE_SIZE)

    def heard(self, payload: str) -> None:
        """A notify on the cancel channel (does not block)."""
        try:
            job_id = uuid.UUID(payload.strip())
        except ValueError:
            self.ignored += 1
            return
        if not self._executing(job_id):
            self.ignored += 1
            return
        try:
            self._send.send_nowait(job_id)
        except trio.WouldBlock:  # a flood: the lease keeper finds a real cancel anyway
            self.ignored += 1

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Check the queued notifies one by one, until cancelled."""
        task_status.started()
        async for job_id in self._receive:
            for running in self._executing(job_id):
                await self._check(running)

    def _executing(self, job_id: uuid.UUID) -> list[Running]:
        """The held claims of ``job_id`` whose execution a cancel would still stop."""
        return [
            r
            for r in self.held.running()
            if r.job.id == job_id and not (r.finishing or r.finished or r.lost)
        ]

    async def _check(self, running: Running) -> None:
        job = running.job
        try:
            cancelled = await self.queue.cancelled_held(job)
        except DatabaseError as exc:
            log.warning("job %s: cannot check a cancel notify (%s); its lease decides", job.id, exc)
            return
        if cancelled is None:
            self.refused += 1
            log.warning("job %s: a cancel notify, but its row is not cancelled: ignored", job.id)
            return
        if running.finishing or running.finished or running.lost:
            return  # its write was under way: the fence refuses it
        running.cancelled = running.lost = True
        running.scope.cancel()
        self.cancelled += 1
        who = "its requesters" if cancelled.by == "requesters" else "an operator"
        log.warning(
            "job %s (%s, attempt %d): cancelled by %s%s; cancelling its handler",
            job.id,
            job.type,
            job.dequeue_count,
            who,
            f" ({cancelled.operator})" if cancelled.operator else "",
        )
