"""Jobs as operators select and act on them: a filter, its count, a keyset page, and the
bulk retry and discard (issue 41). The console and the CLI call these and nothing else.

* :class:`JobFilter` selects rows by status (``poison`` by default), queue type
  (exactly: ``surface-x`` never reaches ``surface-x-dev``), client, operation, a
  substring of ``last_error``, a creation-time range and a job id. Every field is
  validated when the filter is built (:class:`InvalidArgument`, one line): an unknown
  status, a string that is not a queue type, a naive datetime. A queue type that no
  installed surface declares is allowed (its rows may outlive its surface).
* :func:`retry` re-drives finished rows (``poison``, ``cancelled``): pending again with a
  fresh dequeue budget, claimers woken. A row whose request has a live row again (the
  same dedupe key, enqueued since) is left alone: that row answers it.
* :func:`discard` deletes finished rows (``poison``, ``done``, ``cancelled``) and their
  blobs. A live row (pending, in flight) is never discarded: its waiting streams would
  be left with nothing to hear (the reply pump reads finished rows only), so ending a
  live job is a cancel. A finished row's streams heard their final event when it
  finished; the delete notifies ``maestro_rows_deleted`` (migration 0009), so no BFF
  answers a discarded job from memory afterwards: a later poll or stream of it is 404.
* Both write one ``dataplane_audit`` row in the action's transaction: the action, the
  filter as applied (every field, ``null`` for one not set, the status defaulted
  included, with ``all`` and ``limit``) and the rows changed, a filter that matches
  nothing included (``rows`` 0: someone asked). ``dry_run`` counts the rows the action
  would select and writes nothing (retry may then change fewer: see above).
* Every job of every type takes an explicit ``every`` (the CLI's ``--all``, the
  console's "all"): a filter that names nothing beyond a status is refused without it
  (:class:`Unfiltered`), so a filter lost on its way (a form read as empty) can never
  widen an action to everything; ``every`` with a filter is refused too (which did the
  operator mean?). A dry run is a count: it takes either.
* Bounded: an action selecting more than :data:`BULK_MAX` rows is refused
  (:class:`InvalidArgument`) unless ``limit`` is given, which takes the oldest ``limit``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any, Final

from dataplane.core.errors import InvalidArgument
from dataplane.db import Connection, Database, q
from dataplane.operator.audit import Operator, record
from dataplane.queue import STATUSES, JobRow, QueueType

BULK_MAX: Final = 100_000  # rows one action may change without an explicit limit
BULK_TIMEOUT: Final = 300.0  # seconds one bulk action may take
PAGE_MAX: Final = 500  # rows of one listing page
MAX_TEXT: Final = 1000  # characters of a client, operation or error filter
RETRYABLE: Final = ("poison", "cancelled")
DISCARDABLE: Final = ("poison", "done", "cancelled")


def parse_time(text: str, name: str) -> datetime:
    """``text`` as an ISO 8601 time in UTC (naive: taken as UTC);
    :class:`InvalidArgument` naming ``name`` for one that is not, or that UTC cannot
    hold (``0001-01-01T00:00+14:00`` is a year before 1)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(f"{name} is an ISO 8601 time, got {text[:40]!r}") from None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidArgument(f"{name} is out of range, got {text[:40]!r}") from None


class Unfiltered(InvalidArgument):
    """A bulk action whose filter names nothing beyond a status, without ``every``."""


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which rows an operator means. ``None`` matches everything; ``status`` is
    ``poison`` unless set (``None``: every status the action may touch). ``error`` is a
    case-insensitive substring of ``last_error``; ``since`` (inclusive) and ``until``
    (exclusive) bound ``created_at`` and must be timezone-aware."""

    status: str | None = "poison"
    queue_type: str | None = None
    client: str | None = None
    operation: str | None = None
    error: str | None = None  # substring of last_error
    since: datetime | None = None
    until: datetime | None = None
    job_id: uuid.UUID | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in STATUSES:
            raise InvalidArgument(
                f"status must be one of {', '.join(STATUSES)}, got {self.status!r}"
            )
        if self.queue_type is not None:
            QueueType.parse(self.queue_type)  # InvalidArgument naming the expected form
        for name in ("client", "operation", "error"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, str) or not 1 <= len(value) <= MAX_TEXT
            ):
                raise InvalidArgument(f"{name} must be 1 to {MAX_TEXT} characters")
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise InvalidArgument(f"{name} must be a timezone-aware datetime")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise InvalidArgument("since must be before until")
        if self.job_id is not None and not isinstance(self.job_id, uuid.UUID):
            raise InvalidArgument(f"job_id must be a UUID, got {self.job_id!r}")

    @property
    def narrowed(self) -> bool:
        """Whether the filter names anything beyond a status (a type, a client, ...)."""
        return any(getattr(self, f.name) is not None for f in fields(self) if f.name != "status")

    def to_json(self) -> dict[str, Any]:
        """Every field as a JSON value, ``None`` for one not set (the audit row's
        ``target``: the filter as applied, not as typed)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, uuid.UUID):
                value = str(value)
            out[f.name] = value
        return out

    def params(self, statuses: tuple[str, ...] = STATUSES) -> dict[str, Any]:
        """The named parameters of the filter's WHERE clause (sql/queries/operator.sql)."""
        if self.status is not None and self.status not in statuses:
            raise InvalidArgument(
                f"this action takes rows of status {' or '.join(statuses)}, not {self.status!r}"
            )
        return {
            "status": self.status,
            "statuses": list(statuses),
            "type": self.queue_type,
            "client": self.client,
            "operation": self.operation,
            "error": self.error,
            "since": self.since,
            "until": self.until,
            "job_id": self.job_id,
        }


async def count(db: Database, flt: JobFilter) -> int:
    """How many rows ``flt`` selects, counted up to ``BULK_MAX + 1`` (a larger set
    counts as ``BULK_MAX + 1``: more than an action takes without a limit)."""
    return await _count(db, flt.params(), BULK_MAX + 1)


async def list_jobs(
    db: Database,
    flt: JobFilter,
    *,
    limit: int = 50,
    before: tuple[datetime, uuid.UUID] | None = None,
) -> list[JobRow]:
    """One page of ``flt``'s rows, newest first by ``(created_at, id)``; the next page
    is ``before=(last.created_at, last.id)`` (keyset, never OFFSET). ``limit`` is
    1..:data:`PAGE_MAX`."""
    if not isinstance(limit, int) or not 1 <= limit <= PAGE_MAX:
        raise InvalidArgument(f"limit must be in 1..{PAGE_MAX}, got {limit!r}")
    before_at, before_id = before if before is not None else (None, None)
    rows = await db.fetchall(
        q("job_filter_page"),
        {**flt.params(), "limit": limit, "before_at": before_at, "before_id": before_id},
    )
    return [JobRow.from_row(row) for row in rows]


def check_scope(action: str, flt: JobFilter, *, every: bool) -> None:
    """:class:`Unfiltered` unless ``flt`` names something beyond a status or ``every``
    says the operator chose every job; :class:`InvalidArgument` for both at once."""
    if every and flt.narrowed:
        raise InvalidArgument(
            "all means every job of every type and client: give it without a filter, "
            "or drop it and keep the filter"
        )
    if not every and not flt.narrowed:
        what = f"{flt.status} " if flt.status is not None else ""
        raise Unfiltered(
            f"the filter names nothing beyond its status: this {action} would take every "
            f"{what}job of every type and client; name a type, client, operation, error "
            "or time, or choose all"
        )


async def retry(
    db: Database,
    operator: Operator,
    flt: JobFilter,
    *,
    dry_run: bool = False,
    limit: int | None = None,
    every: bool = False,
) -> int:
    """Re-drive ``flt``'s poison or cancelled rows (status ``None``: both): pending with
    a fresh dequeue budget, each type's claimers woken; the rows changed (``dry_run``:
    the rows selected, nothing written). One audit row ``retry``.
    :class:`InvalidArgument` for another status, more than :data:`BULK_MAX` rows
    without a ``limit`` (the oldest ``limit`` are taken), or a scope
    :func:`check_scope` refuses."""
    return await _act(
        db, operator, "retry", flt, RETRYABLE, dry_run=dry_run, limit=limit, every=every
    )


async def discard(
    db: Database,
    operator: Operator,
    flt: JobFilter,
    *,
    dry_run: bool = False,
    limit: int | None = None,
    every: bool = False,
) -> int:
    """Delete ``flt``'s finished rows (poison, done, cancelled; status ``None``: all
    three) and their blobs; the rows deleted (``dry_run``: selected, nothing written).
    One audit row ``discard``. A live status is refused
    (:class:`InvalidArgument`), as is more than :data:`BULK_MAX` rows without a
    ``limit``, or a scope :func:`check_scope` refuses."""
    return await _act(
        db, operator, "discard", flt, DISCARDABLE, dry_run=dry_run, limit=limit, every=every
    )


async def _act(
    db: Database,
    operator: Operator,
    action: str,
    flt: JobFilter,
    statuses: tuple[str, ...],
    *,
    dry_run: bool,
    limit: int | None,
    every: bool,
) -> int:
    if limit is not None and (not isinstance(limit, int) or not 1 <= limit <= BULK_MAX):
        raise InvalidArgument(f"limit must be in 1..{BULK_MAX}, got {limit!r}")
    params = flt.params(statuses)
    if dry_run:
        return await _count(db, params, limit if limit is not None else BULK_MAX + 1)
    check_scope(action, flt, every=every)
    target = {**flt.to_json(), "all": every, "limit": limit}
    statement = q("job_filter_retry" if action == "retry" else "job_filter_discard")

    async def act(conn: Connection) -> int:
        async with conn.transaction():
            if limit is None:
                cur = await conn.execute(q("job_filter_count"), {**params, "cap": BULK_MAX + 1})
                selected = await cur.fetchone()
                if selected is not None and int(selected["n"]) > BULK_MAX:
                    raise InvalidArgument(
                        f"the filter selects more than {BULK_MAX:,} rows; give a limit"
                    )
            cur = await conn.execute(statement, {**params, "limit": limit})
            row = await cur.fetchone()
            changed = int(row["n"]) if row is not None else 0
            await record(conn, operator, action, target, changed)  # 0 rows is an action too
            return changed

    return await db.run(act, call_timeout=BULK_TIMEOUT)


async def _count(db: Database, params: dict[str, Any], cap: int) -> int:
    row = await db.fetchone(q("job_filter_count"), {**params, "cap": cap})
    return int(row["n"]) if row is not None else 0
