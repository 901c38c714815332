"""The worker's progress writer: the latest progress of each running job, to its row.

A handler's ``await ctx.progress(...)`` costs no I/O: it checks the report
(:func:`~dataplane.queue.notices.progress.progress_report`), numbers it and leaves it here,
replacing what that job left before (the latest always wins). One task per worker
(:meth:`ProgressWriter.run`) writes what is waiting in one statement
(:func:`~dataplane.queue.notices.progress.write_progress`: the rows, fenced, and their progress
notifies), then waits :data:`~dataplane.queue.notices.progress.PROGRESS_INTERVAL` before the
next write: each job's progress reaches its row and its streams at most five times a
second, however often its handler reports. A job that reports nothing costs nothing
here. What is waiting is at most one report per held job (bounded by the worker's
slots); a finished job's is dropped (:meth:`ProgressWriter.forget`), and a report
written after its job finished matches no row (the write is fenced on
``in_progress``). Progress is a hint, not an outcome: a write that fails is logged and
dropped, the next report (or the answer) supersedes it.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import trio

from dataplane.core.errors import DatabaseError
from dataplane.queue import ClaimedJob, QueueClient
from dataplane.queue.notices.progress import (
    PROGRESS_INTERVAL,
    Progress,
    progress_report,
    write_progress,
)

log = logging.getLogger(__name__)

WRITE_TIMEOUT = 5.0  # seconds one progress write may take


class ProgressSink:
    """One attempt's reports (``OperationContext.progress`` calls it)."""

    __slots__ = ("_job", "_seq", "_writer")

    def __init__(self, writer: ProgressWriter, job: ClaimedJob) -> None:
        self._writer, self._job, self._seq = writer, job, 0

    def __call__(self, **report: Any) -> None:
        checked = progress_report(**report)
        self._seq += 1
        self._writer.report(self._job, Progress(self._job.dequeue_count, self._seq, checked))


class ProgressWriter:
    def __init__(self, queue: QueueClient, *, interval: float = PROGRESS_INTERVAL) -> None:
        self.queue = queue
        self.interval = interval
        self._waiting: dict[uuid.UUID, tuple[ClaimedJob, Progress]] = {}
        self._wake = trio.Event()
        self.written = 0  # reports that reached their row
        self.superseded = 0  # reports replaced by a later one before they were written

    def sink(self, job: ClaimedJob) -> ProgressSink:
        return ProgressSink(self, job)

    def report(self, job: ClaimedJob, progress: Progress) -> None:
        if job.id in self._waiting:
            self.superseded += 1
        self._waiting[job.id] = (job, progress)
        self._wake.set()

    def forget(self, job_id: uuid.UUID) -> None:
        """The job finished: what it left unwritten is moot (its answer supersedes it)."""
        self._waiting.pop(job_id, None)

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            waiting, self._waiting = self._waiting, {}
            if waiting:
                await self._write(list(waiting.values()))
            await trio.sleep(self.interval)

    async def _write(self, reports: list[tuple[ClaimedJob, Progress]]) -> None:
        with trio.move_on_after(WRITE_TIMEOUT) as scope:
            try:
                self.written += len(await write_progress(self.queue.db, self.queue.seal, reports))
            except DatabaseError as exc:
                log.warning("progress of %d job(s) not written (%s)", len(reports), exc)
        if scope.cancelled_caught:
            log.warning("progress of %d job(s) not written within %gs", len(reports), WRITE_TIMEOUT)
