"""A running job's progress: what a handler reports, how it is carried and read.

A handler reports (``await ctx.progress(...)``) a fraction or ``done``/``total``, a
short message, and optionally a small partial result. The worker writes the latest
report of each running job to its row (``progress``, migration 0016) at most
:data:`PROGRESS_INTERVAL` apart, fenced like a completion, and notifies the type's
progress channel in the same statement: ``<job id>`` alone, or with a notify secret
``<job id> <sealed note>`` (:mod:`dataplane.queue.notices.seal`, kind ``progress``), which a
BFF opens and delivers without reading the row. A note that does not open, or does
not parse, is never delivered: the row is read instead.

A progress is ordered by ``(attempt, seq)``: the attempt is the claim's dequeue count
(a retried job starts its progress again), ``seq`` counts the attempt's reports. What
a stream gets is :meth:`Progress.event`: the report and ``jobId``, ``attempt``, ``seq``.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from dataplane.db import Database, q
from dataplane.queue.notices.seal import NotifySeal
from dataplane.queue.records import ClaimedJob
from dataplane.queue.types import progress_channel

PROGRESS_INTERVAL = 0.2  # seconds between two writes of one job's progress (5 a second)
MAX_MESSAGE_CHARS = 200
MAX_PARTIAL_BYTES = 4096  # a partial result's JSON: its sealed note still fits a notify
MAX_COUNT = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Progress:
    attempt: int
    seq: int
    report: dict[str, Any]  # fraction, done, total, message, partial (those given)

    @property
    def order(self) -> tuple[int, int]:
        return self.attempt, self.seq

    def note(self) -> str:
        """The JSON the row keeps and the notify carries."""
        return json.dumps(
            {"attempt": self.attempt, "seq": self.seq, **self.report},
            separators=(",", ":"),
            ensure_ascii=False,
        )

    def event(self, job_id: str) -> dict[str, Any]:
        """The data of the stream's ``progress`` event."""
        return {"jobId": job_id, "attempt": self.attempt, "seq": self.seq, **self.report}

    @classmethod
    def from_value(cls, value: Any) -> Progress | None:
        """From the row's ``progress`` (or an opened note, parsed): None unless it is
        one (a wrong type or a count out of range is None, never an error)."""
        if not isinstance(value, Mapping):
            return None
        attempt, seq = value.get("attempt"), value.get("seq")
        if not (_count(attempt) and _count(seq)):
            return None
        report = {k: value[k] for k in _FIELDS if k in value}
        return cls(attempt, seq, report)

    @classmethod
    def from_note(cls, text: str) -> Progress | None:
        try:
            return cls.from_value(json.loads(text))
        except (ValueError, RecursionError):
            return None


_FIELDS = ("fraction", "done", "total", "message", "partial")


def _count(value: object) -> TypeGuard[int]:
    return type(value) is int and 0 <= value <= MAX_COUNT


def progress_report(
    fraction: float | None = None,
    *,
    done: int | None = None,
    total: int | None = None,
    message: str | None = None,
    partial: Any = None,
) -> dict[str, Any]:
    """The report of one ``ctx.progress`` call, checked: :class:`ValueError` (a defect
    of the handler, which fails its attempt) for what no stream should carry."""
    report: dict[str, Any] = {}
    if (done is None) != (total is None):
        raise ValueError("progress: give done and total together")
    if done is not None and total is not None:
        if not (_count(done) and _count(total)) or total < 1 or done > total:
            raise ValueError(f"progress: done={done!r}, total={total!r} (0 <= done <= total)")
        report["done"], report["total"] = done, total
        if fraction is None:
            fraction = done / total
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise ValueError(f"progress: fraction must be a number, got {fraction!r}")
        if not (math.isfinite(fraction) and 0.0 <= fraction <= 1.0):
            raise ValueError(f"progress: fraction must be in [0, 1], got {fraction!r}")
        report["fraction"] = round(float(fraction), 4)
    if message is not None:
        if not isinstance(message, str):
            raise ValueError("progress: message must be a string")
        report["message"] = message[:MAX_MESSAGE_CHARS]
    if partial is not None:
        try:
            size = len(json.dumps(partial, separators=(",", ":")).encode())
        except (TypeError, ValueError) as exc:
            raise ValueError(f"progress: partial is not JSON ({exc})") from None
        if size > MAX_PARTIAL_BYTES:
            raise ValueError(f"progress: partial is {size} bytes of JSON, over {MAX_PARTIAL_BYTES}")
        report["partial"] = partial
    if not report:
        raise ValueError("progress: report a fraction, done/total, a message or a partial")
    return report


async def write_progress(
    db: Database, seal: NotifySeal | None, reports: Sequence[tuple[ClaimedJob, Progress]]
) -> set[uuid.UUID]:
    """Write the latest progress of held jobs of one worker and one type (fenced) and
    notify it; the ids whose row took it (a lost or finished claim's is dropped)."""
    if not reports:
        return set()
    jobs = [job for job, _ in reports]
    if len({j.worker_id for j in jobs}) != 1 or len({j.type for j in jobs}) != 1:
        raise ValueError("write_progress takes the jobs of one worker and one type")
    notes = [p.note() for _, p in reports]
    sealed = [
        seal.seal(str(job.id), note, kind="progress") if seal is not None else None
        for job, note in zip(jobs, notes, strict=True)
    ]
    rows = await db.fetchall(
        q("job_progress"),
        {
            "ids": [j.id for j in jobs],
            "dequeue_counts": [j.dequeue_count for j in jobs],
            "worker_id": jobs[0].worker_id,
            "progress": notes,
            "notes": sealed,
            "channel": progress_channel(jobs[0].type),
        },
    )
    return {row["id"] for row in rows}


async def read_progress(db: Database, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Progress]:
    """The last progress of those of ``ids`` still running and with one."""
    if not ids:
        return {}
    rows = await db.fetchall(q("job_progress_many"), {"ids": list(ids)})
    found = {row["id"]: Progress.from_value(row["progress"]) for row in rows}
    return {job_id: p for job_id, p in found.items() if p is not None}
