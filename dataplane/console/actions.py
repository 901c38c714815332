"""The console's actions, through the operators' code path (:mod:`dataplane.operator`).

Retry, discard, pause, resume and cancel are the CLI's functions (``dataplane jobs
retry|discard|cancel``, ``dataplane queue pause|resume``): each changes rows and writes
its audit row in one transaction. This adapter is the only place the console calls
them; it imports them when an action is asked for, so a build without them still
serves every page (an action then answers 501 saying what is missing), and it maps
their errors onto answers: a bad argument 400, an unknown job 404, a conflict (a
cancel of a finished job) 409 naming the job's status.
"""

from __future__ import annotations

import importlib
import uuid
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from dataplane.console.reads import JobFilter
from dataplane.core.errors import InvalidArgument
from dataplane.db import Database
from dataplane.http import ApiError
from dataplane.operator import Operator

BULK = ("retry", "discard")


@dataclass(frozen=True, slots=True)
class Done:
    """What an action did: a sentence for the page, and the rows it changed."""

    message: str
    rows: int


def _module(name: str) -> ModuleType:
    try:
        return importlib.import_module(f"dataplane.operator.{name}")
    except ImportError:
        raise ApiError(
            501, f"this build has no dataplane.operator.{name}: the action is not available"
        ) from None


def _operator_filter(jobs: ModuleType, selected: JobFilter, job_id: uuid.UUID | None) -> Any:
    fields: dict[str, Any] = {
        k: v
        for k, v in {
            "status": selected.status,
            "type": selected.type,
            "client": selected.client,
            "operation": selected.operation,
            "since": selected.since,
        }.items()
        if v is not None
    }
    if job_id is not None:
        fields = {"job_id": job_id}
    return jobs.JobFilter(**fields)


async def _call(coro: Any) -> Any:
    try:
        return await coro
    except InvalidArgument as exc:
        raise ApiError(400, str(exc)) from None
    except LookupError as exc:
        raise ApiError(404, str(exc) or "no such job") from None
    except Exception as exc:
        status = getattr(exc, "status", None)
        if "conflict" in type(exc).__name__.lower():
            raise ApiError(409, f"{exc} (the job is {status})" if status else str(exc)) from None
        raise


async def count(db: Database, selected: JobFilter) -> int:
    """How many jobs a bulk action on ``selected`` would change (the dry run)."""
    jobs = _module("jobs")
    return int(await _call(jobs.count(db, _operator_filter(jobs, selected, None))))


async def bulk(
    db: Database,
    operator: Operator,
    action: str,
    selected: JobFilter,
    job_id: uuid.UUID | None = None,
) -> Done:
    """Retry or discard one job (``job_id``) or every job ``selected`` matches."""
    if action not in BULK:
        raise ApiError(400, f"action must be retry or discard, got {action!r}")
    jobs = _module("jobs")
    act = getattr(jobs, action)
    rows = int(await _call(act(db, operator, _operator_filter(jobs, selected, job_id))))
    what = f"job {job_id}" if job_id is not None else f"{rows} job(s)"
    return Done(f"{action}: {what} — {rows} row(s) changed", rows)


async def pause(db: Database, operator: Operator, queue_type: str, *, resume: bool) -> Done:
    module = _module("pause")
    act = module.resume if resume else module.pause
    await _call(act(db, operator, queue_type))
    return Done(f"{queue_type} is {'resumed' if resume else 'paused'}", 1)


async def cancel(db: Database, operator: Operator, job_id: uuid.UUID) -> Done:
    module = _module("cancel")
    outcome = await _call(module.cancel(db, operator, job_id))
    return Done(f"job {job_id}: cancel {getattr(outcome, 'value', outcome)}", 1)
