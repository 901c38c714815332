"""What the console reads: the wallboard's cards, the jobs list, a job's page, and the
slowest recent job (the latency alerts' way to a trace).

Every statement is in ``sql/queries/console.sql``, bounded and indexed. The cards are
the view ``dataplane_overview`` (migration 0021: live rows, poison rows, paused types,
the last hour's job reports per queue type), which the Grafana wallboard selects from
too; the statistics of reports come from each type's newest :data:`RUN_SAMPLE` reports
of the last hour, so their cost does not grow with the table. Failures are the database
layer's errors; the caller decides what a page shows then.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from dataplane.core.errors import InvalidArgument
from dataplane.db import Database, q
from dataplane.maintenance.retention import DONE_RETENTION_SECONDS
from dataplane.operator.attempts import AttemptView, merge, read_reports
from dataplane.operator.jobs import parse_time
from dataplane.queue.records import Cancellation
from dataplane.queue.types import STATUSES, QueueType

# The view's constants (migration 0021), for the reader: the newest job reports of the
# last hour the statistics are taken from (per queue type), and the window answers per
# minute count.
RUN_SAMPLE = 2_000
ANSWER_WINDOW = 300.0  # seconds
PAGE_SIZE = 50  # jobs per page
MAX_PAGE_SIZE = 500
MAX_FILTER_CHARS = 200
READ_TIMEOUT = 5.0  # seconds one console read may take
SLOWEST_SAMPLE = 10_000  # the newest done jobs of a window the slowest is taken from
MAX_SINCE = timedelta(seconds=DONE_RETENTION_SECONDS)  # done rows are deleted after it
_SINCE = re.compile(r"([0-9]{1,6})([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SECRET_KEY = re.compile(r"token|secret|password|passwd|authorization|api[_-]?key", re.I)


@dataclass
class Card:
    """One queue type's card on the wallboard."""

    type: str
    tier: str  # "live" or "dev"
    pending: int = 0
    ready: int = 0
    backing_off: int = 0
    in_flight: int = 0
    poison: int = 0
    oldest_ready_s: float | None = None
    newest_poison: datetime | None = None
    paused_at: datetime | None = None
    paused_by: str | None = None
    runs: int = 0
    answers_per_minute: float = 0.0
    wait_p50_ms: float | None = None
    wait_p95_ms: float | None = None
    exec_p50_ms: float | None = None
    exec_p95_ms: float | None = None
    cache_hit_ratio: float | None = None
    coalesced_ratio: float | None = None

    @property
    def paused(self) -> bool:
        return self.paused_at is not None


CARD_COLUMNS = tuple(f.name for f in fields(Card))  # console_overview's columns


async def overview(db: Database) -> list[Card]:
    """Every queue type's card, the poison ones first, then by type: one read of the
    view ``dataplane_overview`` (migration 0021), which Grafana's wallboard reads too."""
    rows = await db.fetchall(q("console_overview"), call_timeout=READ_TIMEOUT)
    cards = [Card(**{name: row[name] for name in CARD_COLUMNS}) for row in rows]
    return sorted(cards, key=lambda c: (c.poison == 0, c.type))


async def type_known(db: Database, queue_type: str) -> bool:
    row = await db.fetchone(q("console_type_known"), {"type": queue_type})
    return bool(row and row["known"])


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The jobs list's filters; every one optional. Checked at construction (400s)."""

    type: str | None = None
    status: str | None = None
    client: str | None = None
    operation: str | None = None
    error: str | None = None  # a substring of last_error, case-insensitive
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        for name in ("type", "status", "client", "operation", "error"):
            value = getattr(self, name)
            if value is not None and (len(value) > MAX_FILTER_CHARS or "\x00" in value):
                raise InvalidArgument(f"{name}: at most {MAX_FILTER_CHARS} characters, no NUL")
        if self.type is not None:
            QueueType.parse(self.type)
        if self.status is not None and self.status not in STATUSES:
            raise InvalidArgument(f"status must be one of {', '.join(STATUSES)}")
        if self.since and self.until and self.since >= self.until:
            raise InvalidArgument("since must be before until")

    @classmethod
    def from_args(cls, args: Any) -> JobFilter:
        """From a query string (empty fields are unset; times are ISO 8601)."""
        text = {k: (args.get(k) or "").strip() or None for k in ("type", "status", "client")}
        extra = {k: (args.get(k) or "").strip() or None for k in ("operation", "error")}
        return cls(**text, **extra, since=_time(args, "since"), until=_time(args, "until"))

    def params(self) -> dict[str, Any]:
        error = None
        if self.error is not None:
            escaped = re.sub(r"([\\%_])", r"\\\1", self.error)
            error = f"%{escaped}%"
        return {
            "type": self.type,
            "status": self.status,
            "client": self.client,
            "operation": self.operation,
            "error": error,
            "since": self.since,
            "until": self.until,
        }

    def query(self) -> dict[str, str]:
        """The filter as query-string fields (for links that keep it)."""
        out = {k: v for k, v in self.params().items() if isinstance(v, str)}
        if self.error is not None:
            out["error"] = self.error
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value.isoformat()
        return out


def _time(args: Any, name: str) -> datetime | None:
    raw = (args.get(name) or "").strip()
    return parse_time(raw, name) if raw else None  # a browser's datetime-local: UTC


@dataclass
class JobsPage:
    rows: list[dict[str, Any]]
    next_cursor: str | None


def parse_cursor(raw: str | None) -> tuple[datetime, uuid.UUID] | None:
    """``<created_at ISO>_<id>`` (the last row of the previous page) or None."""
    if not raw:
        return None
    at, _, job_id = raw.rpartition("_")
    try:
        return parse_time(at, "after"), uuid.UUID(job_id)
    except ValueError:  # InvalidArgument included
        raise InvalidArgument("after must be a cursor from a previous page") from None


async def list_jobs(
    db: Database, jobs: JobFilter, *, after: str | None = None, limit: int = PAGE_SIZE
) -> JobsPage:
    """A page of jobs newest first, keyset-paged (never OFFSET)."""
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidArgument(f"limit must be in 1..{MAX_PAGE_SIZE}")
    cursor = parse_cursor(after)
    params = {
        **jobs.params(),
        "after_at": cursor[0] if cursor else None,
        "after_id": cursor[1] if cursor else None,
        "limit": limit + 1,
    }
    rows = await db.fetchall(q("console_jobs"), params, call_timeout=READ_TIMEOUT)
    more = len(rows) > limit
    rows = rows[:limit]
    last = rows[-1] if more else None
    next_cursor = f"{last['created_at'].isoformat()}_{last['id']}" if last else None
    return JobsPage([dict(r) for r in rows], next_cursor)


@dataclass
class JobDetail:
    job: dict[str, Any]
    envelope: dict[str, Any]
    params: Any
    attempts: list[AttemptView] = field(default_factory=list)  # in time order
    blobs: list[dict[str, Any]] = field(default_factory=list)
    trace_id: str | None = None
    cancellation: Cancellation | None = None  # who cancelled it, when (its page's header)


def parse_job_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise InvalidArgument(f"a job id is a UUID, got {raw[:40]!r}") from None


async def job_detail(db: Database, job_id: uuid.UUID) -> JobDetail | None:
    row = await db.fetchone(q("console_job"), {"id": job_id}, call_timeout=READ_TIMEOUT)
    if row is None:
        return None
    job = dict(row)
    payload = job.pop("payload") or {}
    reports = await read_reports(db, job_id)
    blobs = await db.fetchall(q("console_job_blobs"), {"id": job_id}, call_timeout=READ_TIMEOUT)
    detail = JobDetail(job, safe_envelope(payload), redact(payload.get("params")))
    detail.cancellation = Cancellation.of_row(row)
    detail.attempts = merge(job["status"], job["dequeue_count"], job.pop("errors"), reports)
    detail.blobs = [dict(b) for b in blobs]
    detail.trace_id = _trace_of(payload) or next(
        (a.trace_id for a in reversed(detail.attempts) if a.trace_id), None
    )
    return detail


@dataclass(frozen=True, slots=True)
class Slowest:
    """The slowest recent done job: its id, type and seconds from enqueue to done."""

    id: uuid.UUID
    type: str
    seconds: float


def parse_since(raw: str | None, now: datetime) -> datetime:
    """The start of a window: ``raw`` a duration back from ``now`` (``90s``, ``30m``,
    ``1h``, ``1d``) or an ISO 8601 time; an hour when absent; at most :data:`MAX_SINCE`
    back (done jobs are not kept longer)."""
    raw = (raw or "").strip() or "1h"
    hours = MAX_SINCE.total_seconds() / 3600
    too_far = f"since: at most {hours:g} h back (done jobs are kept {hours:g} h), got {raw[:40]}"
    found = _SINCE.fullmatch(raw)
    if found:
        back = timedelta(seconds=int(found[1]) * _UNIT[found[2]])
        if back > MAX_SINCE:  # checked before the subtraction: 999999d is before year 1
            raise InvalidArgument(too_far)
        return now - back
    try:
        start = parse_time(raw, "since")
    except InvalidArgument as exc:
        raise InvalidArgument(
            f"since is a duration (90s, 30m, 1h, 1d) or an ISO 8601 time: {exc}"
        ) from None
    if start < now - MAX_SINCE:
        raise InvalidArgument(too_far)
    if start > now:
        raise InvalidArgument(f"since is in the future, got {raw[:40]}")
    return start


async def slowest_job(db: Database, since: datetime, queue_type: str | None) -> Slowest | None:
    """The done job (of ``queue_type``, when given) that took longest from enqueue to
    completion among the newest :data:`SLOWEST_SAMPLE` completed since ``since``."""
    if queue_type is not None:
        QueueType.parse(queue_type)
    params = {"since": since, "type": queue_type, "sample": SLOWEST_SAMPLE}
    row = await db.fetchone(q("console_slowest"), params, call_timeout=READ_TIMEOUT)
    return None if row is None else Slowest(row["id"], row["type"], row["seconds"])


def safe_envelope(payload: dict[str, Any]) -> dict[str, Any]:
    """The envelope's fields an operator may see: who and what, never a credential."""
    found = payload.get("auth")
    auth: dict[str, Any] = found if isinstance(found, dict) else {}
    return {
        "surface": payload.get("surface"),
        "operation": payload.get("operation"),
        "version": payload.get("version"),
        "tier": payload.get("tier") or "live",
        "per_user": bool(payload.get("perUser")),
        "client": auth.get("client"),
        "staff": auth.get("staff"),
        "scope_key": auth.get("scopeKey"),
        "branches": auth.get("branches"),
        "user_id": auth.get("userId"),
    }


def redact(value: Any) -> Any:
    """``value`` with every key that names a credential masked, at any depth."""
    if isinstance(value, dict):
        return {
            k: "[redacted]" if _SECRET_KEY.search(str(k)) else redact(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def _trace_of(payload: dict[str, Any]) -> str | None:
    parts = str(payload.get("traceparent") or "").split("-")
    if len(parts) == 4 and re.fullmatch(r"[0-9a-f]{32}", parts[1]):
        return parts[1]
    return None


async def is_operator_role(db: Database) -> bool:
    """Whether the console's queue-DB login is a member of ``dataplane_operator``."""
    row = await db.fetchone(q("console_role_member"))
    return bool(row is not None and row["member"])
