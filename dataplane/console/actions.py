"""The console's actions, through the operators' code path (:mod:`dataplane.operator`).

Retry, discard, pause, resume and cancel are the CLI's functions (``dataplane jobs
retry|discard|cancel``, ``dataplane queue pause|resume``): each changes rows and writes
its audit row in one transaction. This adapter is the only place the console calls
them, and it maps their errors onto answers: a bad argument 400, an unknown job 404, a
cancel of a finished job 409 naming the job's status, the queue DB out of reach or
refusing 503. A bulk action takes poison rows unless the filter names another status;
without a filter beyond the status it takes every job only when the operator chose
"all" (``every``; :func:`dataplane.operator.jobs.check_scope`), else a 400 saying so.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from dataplane.console.reads import JobFilter
from dataplane.core.errors import DatabaseError, DatabaseUnavailable, InvalidArgument
from dataplane.db import Database
from dataplane.http import ApiError
from dataplane.operator import Operator, jobs
from dataplane.operator import pause as pausing
from dataplane.operator.cancel import Conflict, NotFound
from dataplane.operator.cancel import cancel as cancel_job

BULK = ("retry", "discard")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Done:
    """What an action did: a sentence for the page, and the rows it changed."""

    message: str
    rows: int


def narrowed(selected: JobFilter) -> bool:
    """Whether ``selected`` names anything beyond a status (else an action needs all)."""
    return _operator_filter(selected, None).narrowed


def _operator_filter(selected: JobFilter, job_id: uuid.UUID | None) -> jobs.JobFilter:
    if job_id is not None:  # one job, whatever its status the action may take
        return jobs.JobFilter(status=None, job_id=job_id)
    return jobs.JobFilter(
        status=selected.status or "poison",
        queue_type=selected.type,
        client=selected.client,
        operation=selected.operation,
        error=selected.error,
        since=selected.since,
        until=selected.until,
    )


async def _call(coro: Awaitable[T]) -> T:
    try:
        return await coro
    except jobs.Unfiltered as exc:
        raise ApiError(400, f"{exc}: the confirm page asks for it (the form field all=1)") from None
    except InvalidArgument as exc:
        raise ApiError(400, str(exc)) from None
    except NotFound as exc:
        raise ApiError(404, str(exc) or "no such job") from None
    except Conflict as exc:
        raise ApiError(409, f"the job is {exc.status}: only a live job can be cancelled") from None
    except DatabaseUnavailable as exc:
        raise ApiError(503, f"the queue database is unavailable: {exc}") from None
    except DatabaseError as exc:  # refused (a lock or statement timeout, a privilege)
        raise ApiError(503, f"the queue database refused the action: {exc}") from None


async def count(db: Database, operator: Operator, action: str, selected: JobFilter) -> int:
    """How many jobs ``action`` on ``selected`` would change (its dry run)."""
    act = jobs.retry if action == "retry" else jobs.discard
    return await _call(act(db, operator, _operator_filter(selected, None), dry_run=True))


async def bulk(
    db: Database,
    operator: Operator,
    action: str,
    selected: JobFilter,
    job_id: uuid.UUID | None = None,
    *,
    every: bool = False,
) -> Done:
    """Retry or discard one job (``job_id``) or every job ``selected`` matches (every
    job of every type only with ``every``)."""
    if action not in BULK:
        raise ApiError(400, f"action must be retry or discard, got {action!r}")
    act = jobs.retry if action == "retry" else jobs.discard
    rows = await _call(act(db, operator, _operator_filter(selected, job_id), every=every))
    if job_id is not None and rows == 0:
        if not await _call(jobs.count(db, jobs.JobFilter(status=None, job_id=job_id))):
            raise ApiError(404, f"no job {job_id}")
        raise ApiError(409, f"job {job_id} is not a job {action} can take (its status)")
    what = f"job {job_id}" if job_id is not None else f"{rows} job(s)"
    return Done(f"{action}: {what} — {rows} row(s) changed", rows)


async def pause(db: Database, operator: Operator, queue_type: str, *, resume: bool) -> Done:
    act = pausing.resume if resume else pausing.pause
    changed = await _call(act(db, operator, queue_type))
    state = "resumed" if resume else "paused"
    already = "" if changed else f" (it was {'not paused' if resume else 'already paused'})"
    return Done(f"{queue_type} is {state}{already}", int(changed))


async def cancel(db: Database, operator: Operator, job_id: uuid.UUID) -> Done:
    outcome = await _call(cancel_job(db, operator, job_id))
    was = "running" if outcome.status_before == "in_progress" else outcome.status_before
    return Done(f"job {job_id} cancelled (it was {was})", 1)
