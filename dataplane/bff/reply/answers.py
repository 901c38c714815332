"""The reply pump's memory of recent done notifies, and the answers a caller may be
given from it without reading the row.

:class:`RecentNotifies` holds the job ids of the last ``capacity`` notifies the pump
took in, each with the number of its latest notify (1-based) and the answer it
carried (sealed, not opened) or None; oldest first, bounded (an answer rides only up
to :data:`~dataplane.queue.DONE_NOTIFY_INLINE_MAX` bytes: a few MB in all).

* **Missed or not** (:meth:`RecentNotifies.missed_since`): a caller that read the
  pump's count of notifies before its job could finish learns whether that job's
  notify went by since, so it reads the row only then. When some of the notifies
  since are forgotten (pushed out by newer ones), the answer is "maybe": read.
* **Answered** (:meth:`RecentNotifies.answered`): a stream or a poll that comes for
  a job after its answer went by is answered from it, without reading the row (a
  finished row never changes). An answer is served only when it opens with the
  notify secret (else it is dropped from memory, counted once by the pump), within
  :data:`ANSWER_MAX_AGE` of its completion, and only if it was heard after the last
  deletion of queue rows (``maestro_queues``' delete trigger notifies
  :data:`~dataplane.queue.ROWS_DELETED_CHANNEL`): a row an operator deleted is not
  answered from memory.
* :func:`~dataplane.bff.jobs.known_answer` says which callers may be given one: a
  holder of the job's URL token, for a row of the surface's queue type, without a blob.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from dataplane.queue import JobRow

RECENT_NOTIFIES = 4096  # notifies remembered, with the answers they carried
ANSWER_MAX_AGE = 60.0  # seconds after its completion a remembered answer is served
CLOCK_MARGIN = 2.0  # seconds the clocks of workers and BFFs may disagree (a deletion wins)


class RecentNotifies:
    """The last ``capacity`` notifies by job id (it holds no reference to its pump:
    no cycle, so a pump is freed as soon as it is dropped)."""

    def __init__(self, capacity: int) -> None:
        # job id -> (the number of its latest notify, the sealed answer it carried or None)
        self._recent: OrderedDict[uuid.UUID, tuple[int, str | None]] = OrderedDict()
        self._max = max(1, capacity)
        self._forgotten = 0  # the number of the newest notify dropped from _recent
        self._deleted_at = 0  # the number of the last notify heard before a deletion
        # Answers completed before this (a deletion's time, plus a margin for the
        # clocks of workers and BFFs) are never served from memory again: a note sealed
        # before the deletion and re-sent after it (anyone may NOTIFY) must not revive it.
        self._deleted_before: datetime | None = None

    def remember(self, number: int, job_id: uuid.UUID, carried: str | None) -> None:
        """Notify ``number`` (counted by the pump) named ``job_id`` and carried this."""
        recent = self._recent
        recent[job_id] = (number, carried)
        recent.move_to_end(job_id)
        while len(recent) > self._max:
            self._forgotten = recent.popitem(last=False)[1][0]

    def rows_deleted(self, number: int) -> None:
        """Queue rows were deleted after notify ``number``: no answer heard until then
        is served any more, nor a note re-sent later of a job completed before now."""
        self._deleted_at = number
        self._deleted_before = datetime.now(UTC) + timedelta(seconds=CLOCK_MARGIN)

    def missed_since(self, job_id: uuid.UUID, notifies: int) -> bool:
        """Whether one of the notifies after the ``notifies``-th may have been the done
        notify of ``job_id``: True when it is remembered, or some are forgotten."""
        if self._forgotten > notifies:
            return True
        return job_id in self._recent

    def answered(
        self, job_id: uuid.UUID, open_: Callable[[uuid.UUID, str], JobRow | None]
    ) -> JobRow | None:
        """The finished row of ``job_id`` when a remembered notify carried its answer, it
        opens (``open_`` turns it into its row, or None when it does not open or parse,
        having counted that), it completed within :data:`ANSWER_MAX_AGE` and no queue
        row was deleted since it was heard; else None: then read the row."""
        entry = self._recent.get(job_id)
        if entry is None or entry[1] is None or entry[0] <= self._deleted_at:
            return None
        row = open_(job_id, entry[1])
        if row is None:
            self._recent[job_id] = (entry[0], None)  # counted once
            return None
        assert row.completed_at is not None
        if (datetime.now(UTC) - row.completed_at).total_seconds() > ANSWER_MAX_AGE:
            return None
        if self._deleted_before is not None and row.completed_at <= self._deleted_before:
            return None  # sealed before a deletion: the row may be gone (read it)
        return row
