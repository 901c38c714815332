"""A failed attempt the job waits out: what a waiting caller is told, how it is carried.

When an attempt fails with tries left, ``job_fail`` puts the row back to ``pending``
until ``available_at`` (now + ``DATAPLANE_FAIL_BACKOFF_SECONDS``) and, in the same
statement (so on commit), notifies the type's retry channel (``surface_<id>_retry``):
``<job id>`` alone, or with a notify secret ``<job id> <sealed note>``
(:mod:`dataplane.queue.notices.seal`, kind ``retry``: a retry note never opens as a progress or
done note, nor one of them as a retry). A BFF opens a sealed note and delivers it
without reading the row; anything else makes it read the row.

The row is the truth (:meth:`Retry.from_row`): a job waits out a failed attempt while it
is ``pending`` with ``dequeue_count > 0``, tries left and ``last_error`` set. A notify is
a hint: any role that may connect may send one, and an unsealed one yields a retry only
when the row says so.

What a stream and a poll get is :meth:`Retry.event`: ``jobId``, the ``attempt`` that
failed, ``maxAttempts``, the ``error`` as a POISON answer shows it (:func:`error_line`),
``retryAt`` (ISO 8601) and ``retryInMs`` (from when the event is made; 0 once due). A
retry orders after every progress of its attempt and before the next attempt's
(:attr:`Retry.order`), so the latest of the two is what a stream holds.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dataplane.db import Database, q
from dataplane.queue.notices.seal import NotifySeal
from dataplane.queue.records import MAX_COUNT, ClaimedJob, JobRow, is_count, parse_timestamp
from dataplane.queue.types import retry_channel

MAX_ERROR_LINE = 500  # characters of the error a retry (or a POISON answer) shows
SEAL_KIND = "retry"
AFTER_PROGRESS = MAX_COUNT + 1  # a retry's place in its attempt: after every progress


def error_line(last_error: str | None) -> str:
    """The error as a caller is shown it: the last line of ``last_error``, at most
    :data:`MAX_ERROR_LINE` characters."""
    lines = (last_error or "").splitlines()
    return (lines[-1] if lines else "unknown error")[:MAX_ERROR_LINE]


@dataclass(frozen=True, slots=True)
class Retry:
    attempt: int  # the attempt that failed (its claim's dequeue count)
    max_attempts: int
    error: str  # error_line of the row's last_error
    retry_at: datetime  # when the job is claimable again (the row's available_at)

    @property
    def order(self) -> tuple[int, int]:
        return self.attempt, AFTER_PROGRESS

    def note(self) -> str:
        """The JSON a sealed retry notify carries."""
        return json.dumps(
            {
                "attempt": self.attempt,
                "maxAttempts": self.max_attempts,
                "error": self.error,
                "retryAt": self.retry_at.isoformat(),
            },
            separators=(",", ":"),
            ensure_ascii=False,
        )

    def event(self, job_id: str, now: datetime | None = None) -> dict[str, Any]:
        """The data of the stream's ``retry`` event and of a poll's ``retry``."""
        wait = self.retry_at - (now or datetime.now(UTC))
        return {
            "jobId": job_id,
            "attempt": self.attempt,
            "maxAttempts": self.max_attempts,
            "error": self.error,
            "retryAt": self.retry_at.isoformat(),
            "retryInMs": max(0, round(wait.total_seconds() * 1000)),
        }

    @classmethod
    def of(
        cls,
        *,
        status: str,
        dequeue_count: int,
        max_dequeues: int,
        last_error: str | None,
        available_at: datetime,
    ) -> Retry | None:
        """The retry a row's fields confirm, else None."""
        if status != "pending" or last_error is None:
            return None
        if not 0 < dequeue_count < max_dequeues:
            return None
        return cls(dequeue_count, max_dequeues, error_line(last_error), available_at)

    @classmethod
    def from_row(cls, row: JobRow) -> Retry | None:
        return cls.of(
            status=row.status,
            dequeue_count=row.dequeue_count,
            max_dequeues=row.max_dequeues,
            last_error=row.last_error,
            available_at=row.available_at,
        )

    @classmethod
    def from_note(cls, text: str) -> Retry | None:
        """From an opened note; None unless it is one (never an error)."""
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, dict):
            return None
        attempt, most, error = value.get("attempt"), value.get("maxAttempts"), value.get("error")
        retry_at = parse_timestamp(value.get("retryAt"))
        if not (is_count(attempt) and is_count(most)) or not 0 < attempt < most:
            return None
        if not isinstance(error, str) or retry_at is None:
            return None
        return cls(attempt, most, error[:MAX_ERROR_LINE], retry_at)


def retry_notice(
    seal: NotifySeal | None, job: ClaimedJob, error: str, backoff_seconds: float
) -> dict[str, Any]:
    """``job_fail``'s retry notify parameters: the channel, and the sealed note when the
    worker holds a secret and the attempt has tries left. ``retryAt`` is the worker's
    reckoning of the row's ``available_at`` on the queue DB's clock: the claim's time
    plus what this process took since it received the claim (as a completion's
    ``completed_at``), plus the backoff."""
    note = None
    if seal is not None and job.dequeue_count < job.max_dequeues:
        took = max(0.0, time.monotonic() - job.received)
        due = job.claimed_at + timedelta(seconds=took + backoff_seconds)
        retry = Retry(job.dequeue_count, job.max_dequeues, error_line(error), due)
        note = seal.seal(str(job.id), retry.note(), kind=SEAL_KIND)
    return {"retry_channel": retry_channel(job.type), "retry_note": note}


async def read_retries(db: Database, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Retry]:
    """The retries the rows of ``ids`` confirm (those waiting out a failed attempt)."""
    if not ids:
        return {}
    rows = await db.fetchall(q("job_retry_waits"), {"ids": list(ids)})
    found = {row["id"]: Retry.of(**{k: v for k, v in row.items() if k != "id"}) for row in rows}
    return {job_id: r for job_id, r in found.items() if r is not None}
