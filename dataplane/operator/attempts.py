"""A job's attempts as operators see them (issue 55): the console's job page and
``dataplane jobs show`` read them here.

Two sources are merged. The row keeps a record of each failed attempt (``errors``,
migration 0023: type, message, traceback, the surface's frame; the newest 20), and
capcom keeps each attempt its workers reported (``worker_runs``: outcome, duration;
the newest :data:`REPORTS_READ` are read). A record and a report are one attempt when
they name the same attempt number and worker, the report nearest in time taken (an
operator's retry starts the numbers again, so a number alone may name two attempts).
Lines are in time order.

* a report with a record: its outcome (``failed``, ``poison``), duration and error;
* a record alone (capcom not configured, or its report lost): ``failed``, or
  ``poison`` for the last record of a poison row; no duration;
* a report alone: an attempt that did not fail (``done``, ``error``, ``lost``,
  ``cancelled``, ``released``), or one a worker without the record ran;
* neither, for a number of the current round (since the numbers last went down)
  up to the row's claim count: the row's running claim (``running``), else an
  attempt nobody reported (``unreported``: its worker died and the lease lapsed, or
  capcom lost the report).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from dataplane.db import Database, q
from telemetry.failures import AttemptFailure

REPORTS_READ: Final = 100  # the newest reports of a job read
READ_TIMEOUT: Final = 5.0  # seconds each read may take
FAILED_OUTCOMES: Final = ("failed", "poison")  # the reports a record may belong to
EARLIEST: Final = datetime.min.replace(tzinfo=UTC)  # what has no time sorts first
LATEST: Final = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Report:
    """One ``worker_runs`` row: an attempt as its worker reported it."""

    attempt: int
    worker: str
    outcome: str
    finished: datetime
    wall_ms: float
    trace_id: str | None = None

    @property
    def started(self) -> datetime:
        return self.finished - timedelta(milliseconds=self.wall_ms)


@dataclass(frozen=True, slots=True)
class AttemptView:
    """One attempt of a job, from its record, its report, or neither."""

    attempt: int
    outcome: str  # a report's, or failed / poison / running / unreported
    worker: str | None = None
    started: datetime | None = None  # the report's finish less its duration
    duration_ms: float | None = None
    error: AttemptFailure | None = None
    report: Report | None = None

    @property
    def at(self) -> datetime | None:
        """When it ended, as its record or report says (the record first)."""
        if self.error is not None and self.error.at is not None:
            return self.error.at
        return None if self.report is None else self.report.finished

    @property
    def trace_id(self) -> str | None:
        if self.error is not None and self.error.trace_id:
            return self.error.trace_id
        return None if self.report is None else self.report.trace_id

    def to_json(self) -> dict[str, Any]:
        error = self.error
        return {
            "attempt": self.attempt,
            "outcome": self.outcome,
            "worker": self.worker,
            "started": None if self.started is None else self.started.isoformat(),
            "ended": None if self.at is None else self.at.isoformat(),
            "duration_ms": self.duration_ms,
            "reported": self.report is not None,
            "trace_id": self.trace_id,
            "error": None
            if error is None
            else {
                "type": error.type,
                "message": error.message,
                "frame": error.frame,
                "traceback": error.traceback,
            },
        }


def reports_from(rows: Iterable[Any]) -> list[Report]:
    """``worker_runs`` rows (``job_attempt_reports``) as reports, oldest first."""
    reports = [
        Report(
            r["dequeue_count"],
            r["worker_id"],
            r["outcome"],
            r["finished_at"],
            float(r["wall_ms"]),
            r["trace_id"],
        )
        for r in rows
    ]
    return sorted(reports, key=lambda r: r.finished)


async def read_reports(db: Database, job_id: uuid.UUID) -> list[Report]:
    rows = await db.fetchall(
        q("job_attempt_reports"),
        {"id": job_id, "limit": REPORTS_READ},
        call_timeout=READ_TIMEOUT,
    )
    return reports_from(rows)


async def attempts_of(db: Database, job_id: uuid.UUID) -> list[AttemptView] | None:
    """A job's attempts (None: no such job): two reads, then :func:`merge`."""
    row = await db.fetchone(q("job_attempt_errors"), {"id": job_id}, call_timeout=READ_TIMEOUT)
    if row is None:
        return None
    reports = await read_reports(db, job_id)
    return merge(row["status"], row["dequeue_count"], row["errors"], reports)


def merge(
    status: str, dequeue_count: int, errors: Any, reports: Sequence[Report]
) -> list[AttemptView]:
    """The job's attempts from its records and reports (see the module docstring)."""
    records = [r for r in map(AttemptFailure.from_json, errors or ()) if r is not None]
    records.sort(key=lambda r: r.at or EARLIEST)
    unused = list(reports)
    views: list[AttemptView] = []
    for i, record in enumerate(records):
        report = _nearest(record, unused)
        if report is not None:
            unused.remove(report)
        last_of_poison = status == "poison" and i == len(records) - 1
        views.append(_view(record, report, "poison" if last_of_poison else "failed"))
    views += [_view(None, report) for report in unused]
    views.sort(key=lambda v: v.at or EARLIEST)
    start = _current_round(views)
    current = views[start:] + _missing(views[start:], status, dequeue_count)
    current.sort(key=lambda v: (v.attempt, v.at or LATEST))
    return views[:start] + current


def _view(record: AttemptFailure | None, report: Report | None, alone: str = "") -> AttemptView:
    if report is None:
        assert record is not None
        return AttemptView(record.attempt, alone, record.worker, error=record)
    return AttemptView(
        report.attempt,
        report.outcome,
        report.worker,
        report.started,
        report.wall_ms,
        record,
        report,
    )


def _nearest(record: AttemptFailure, reports: Sequence[Report]) -> Report | None:
    """The report of the same attempt and worker nearest in time to ``record``."""
    candidates = [
        r
        for r in reports
        if r.attempt == record.attempt
        and r.worker == record.worker
        and r.outcome in FAILED_OUTCOMES
    ]
    if record.at is None or not candidates:
        return candidates[0] if candidates else None
    at = record.at
    return min(candidates, key=lambda r: abs((r.finished - at).total_seconds()))


def _current_round(views: Sequence[AttemptView]) -> int:
    """Where the current round starts: after the last time the numbers went down (an
    operator's retry starts them again)."""
    start = 0
    for i in range(1, len(views)):
        if views[i].attempt < views[i - 1].attempt:
            start = i
    return start


def _missing(current: Sequence[AttemptView], status: str, dequeue_count: int) -> list[AttemptView]:
    """The current round's numbers up to the claim count that nothing tells of."""
    seen = {v.attempt for v in current}
    return [
        AttemptView(
            n, "running" if status == "in_progress" and n == dequeue_count else "unreported"
        )
        for n in range(1, dequeue_count + 1)
        if n not in seen
    ]
