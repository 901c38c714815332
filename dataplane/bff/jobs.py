"""Reading a job for a caller, and the answer a finished job gives.

A job is readable only by a caller whose surface, client and scope key match its
envelope; anyone else gets 404 (not 403: job ids are not to be probed). The
caller is known from the signed token of a stream/poll/blob URL or, without one,
from the bearer JWT.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from quart import request

from dataplane.auth.verifier import AuthError
from dataplane.bff.auth.tokens import StreamGrant, requester_of
from dataplane.bff.auth.urls import blob_url
from dataplane.bff.plane import BffServices
from dataplane.core.errors import DatabaseError, DatabaseUnavailable
from dataplane.http import ApiError, note
from dataplane.queue import JobRow
from dataplane.queue.envelope import Auth
from dataplane.queue.notices.retries import error_line
from dataplane.queue.records import iso
from dataplane.surfaces.manifest import Surface
from telemetry.metrics import OUTCOME, QUEUE_TYPE, instruments

T = TypeVar("T")


def bearer(services: BffServices) -> Auth:
    """The caller of this request, from its ``Authorization: Bearer`` JWT (401 otherwise)."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "send Authorization: Bearer <token>")
    try:
        return services.verifier.verify(token.strip())
    except AuthError as exc:
        raise ApiError(401, str(exc)) from None


# What a statement of this release meets on a schema older than it (Postgres's SQLSTATE
# table): a table, column, function, type or schema the migrations add, missing. All of
# class 42's "undefined" codes that a name in our SQL can raise; no data error is here
# (a violated constraint is a bug or bad input, not an old schema).
NOT_MIGRATED = frozenset(
    {
        "42P01",  # undefined_table
        "42703",  # undefined_column
        "42883",  # undefined_function
        "42704",  # undefined_object (a type, an index named in ON CONFLICT)
        "3F000",  # invalid_schema_name
    }
)


def refuse_unmigrated(exc: DatabaseError) -> None:
    """A queue DB without (all of) this release's schema (the BFF started before
    ``dataplane migrate`` finished, or a migration is missing) answers 503 with
    Retry-After, saying so: not a 500."""
    if exc.sqlstate in NOT_MIGRATED:
        raise ApiError(
            503, "the queue database is not migrated yet: run `dataplane migrate`"
        ) from None


async def queue_call(call: Awaitable[T]) -> T:
    """Await a queue call; an unreachable or unmigrated queue DB answers 503."""
    try:
        return await call
    except DatabaseUnavailable as exc:
        raise ApiError(503, f"the queue is unreachable: {exc}") from None
    except DatabaseError as exc:
        refuse_unmigrated(exc)
        raise


@dataclass(frozen=True, slots=True)
class JobTarget:
    """A job id and who asks for it (authenticated, not yet checked against the row)."""

    job_id: uuid.UUID
    client: str
    scope_key: str
    grant: StreamGrant | None
    requester: str  # tokens.requester_of the caller: who a withdrawal is counted for
    # The bearer's user; None for a URL token (its holder was granted this very job).
    user_id: str | None = None


def job_target(services: BffServices, surface: Surface, job_id: str) -> JobTarget:
    """Parse the job id and authenticate the caller (URL token, else bearer JWT)."""
    try:
        jid = uuid.UUID(job_id)
    except ValueError:
        raise ApiError(404, "no such job") from None
    token = request.args.get("token")
    if not token:
        auth = bearer(services)
        note(job_id=str(jid), client=auth.client)
        requester = requester_of(auth.client, auth.user_id)
        return JobTarget(jid, auth.client, auth.scope_key, None, requester, auth.user_id)
    try:
        grant = services.tokens.check(token)
    except AuthError as exc:
        raise ApiError(401, str(exc)) from None
    if (
        grant.job_id != str(jid)
        or grant.surface != surface.id
        or grant.tier != services.config.queue_suffix
    ):
        raise ApiError(404, "no such job")
    note(job_id=str(jid), client=grant.client, coalesced=grant.coalesced)
    return JobTarget(jid, grant.client, grant.scope_key, grant, grant.requester)


async def read_job(services: BffServices, surface: Surface, target: JobTarget) -> JobRow:
    """The job's row, if ``target``'s caller may read it; 404 for every other case.

    The owner (type, hence tier; client; scope key) is matched in the statement
    itself: another tenant's job id reads nothing and answers like an unknown id. A
    ``per_user`` job (its answer is about the user who asked) is also matched on the
    bearer's user: a colleague with the same scope reads it as an unknown id too."""
    row = await queue_call(
        services.queue.get_owned(
            target.job_id,
            queue_type=services.queue_type(surface),
            client=target.client,
            scope_key=target.scope_key,
        )
    )
    if row is None or not _users_job(row, target):
        raise ApiError(404, "no such job")
    return row


def _users_job(row: JobRow, target: JobTarget) -> bool:
    payload = row.payload
    if target.user_id is None or not payload.get("perUser"):
        return True
    return bool(payload.get("auth", {}).get("userId") == target.user_id)


def traceparent_of(row: JobRow) -> str | None:
    """The W3C traceparent of the job's envelope: the request's (executing) trace."""
    payload = row.payload
    value = payload.get("traceparent") if isinstance(payload, dict) else None
    return value if isinstance(value, str) else None


def answer(services: BffServices, row: JobRow, grant: StreamGrant | None) -> dict[str, Any]:
    """The body of a finished job: the ``done`` event's data and the poll answer."""
    out: dict[str, Any] = {"jobId": str(row.id), "status": row.status}
    attached = bool(grant and grant.coalesced)
    if row.status == "poison":
        out["error"] = {
            "status": 500,
            "code": "POISON",
            "message": f"the job failed {row.dequeue_count} time(s) and was parked: "
            + error_line(row.last_error),
        }
        out["coalesced"] = attached
        return out | _timings(row)
    if row.status == "cancelled":
        out["error"] = cancelled_error(row)
        out["coalesced"] = attached
        return out
    result = row.result if isinstance(row.result, dict) else {"data": row.result}
    if "error" in result:
        out["error"] = result["error"]
    elif "blobRef" in result:
        out["blobRef"] = _blob_ref(services, row, result["blobRef"], attached)
    else:
        out["result"] = result.get("data")
    out["cache"] = result.get("cache", "bypass")
    out["coalesced"] = bool(result.get("coalesced")) or attached
    return out | _timings(row)


def cancelled_error(row: JobRow) -> dict[str, Any]:
    """A cancelled job's error: who cancelled it (its requesters or an operator, named),
    before or while it ran, and when, in its message and in ``cancellation`` (a row an
    older release cancelled names nobody: when only)."""
    error: dict[str, Any] = {"status": 409, "code": "CANCELLED"}
    if row.cancellation is not None:
        error["message"] = row.cancellation.says()
        error["cancellation"] = row.cancellation.to_json()
    else:
        at = f", at {iso(row.completed_at)}" if row.completed_at is not None else ""
        error["message"] = f"the job was cancelled{at}"
    return error


def record_end_to_end(row: JobRow) -> None:
    """``dataplane.end_to_end``: enqueue to the answer handed over (in a stream's final
    event or a ``Prefer: wait`` POST's 200), in seconds, by queue type and outcome."""
    instruments().end_to_end.record(
        max(0.0, (datetime.now(UTC) - row.created_at).total_seconds()),
        {QUEUE_TYPE: row.type, OUTCOME: row.status},
    )


def _blob_ref(
    services: BffServices, row: JobRow, stored: dict[str, Any], attached: bool
) -> dict[str, Any]:
    """The stored reference, with the blob's URL and a token bound to the row's owner."""
    surface = str(row.payload.get("surface"))
    owner = row.payload["auth"]
    grant = StreamGrant(
        str(row.id),
        surface,
        str(owner["client"]),
        str(owner["scopeKey"]),
        attached,
        services.config.queue_suffix,
    )
    return {**stored, "url": blob_url(surface, str(row.id), services.tokens.mint(grant))}


def _timings(row: JobRow) -> dict[str, Any]:
    """Queue wait and run time of the execution that answered, from the row."""
    if row.claimed_at is None or row.completed_at is None:
        return {}
    return {
        "timings": {
            "queueMs": round((row.claimed_at - row.created_at).total_seconds() * 1000, 1),
            "runMs": round((row.completed_at - row.claimed_at).total_seconds() * 1000, 1),
        }
    }


def known_answer(services: BffServices, surface: Surface, target: JobTarget) -> JobRow | None:
    """The job's finished row as its done notify carried it to the reply pump
    (:meth:`~dataplane.bff.reply.pump.ReplyPump.answered`), for a caller holding the job's
    URL token; else None (read the row: :func:`read_job`).

    A URL token is minted by the POST that enqueued the job or attached to it, for
    that request's owner (client and scope key, which the job's dedupe key includes),
    and :func:`job_target` has checked it names this job, surface
    and tier: the owner check the statement would make is the token's. The row must
    be of the surface's queue type and of the surface, as a read would require."""
    if target.grant is None:
        return None
    row = services.pump.answered(target.job_id)
    if row is None or row.type != services.queue_type(surface).name:
        return None
    if row.payload.get("surface") != surface.id:
        return None
    if isinstance(row.result, dict) and "blobRef" in row.result:
        return None  # its URL is signed for the owner, who is in the row (never carried)
    return row
