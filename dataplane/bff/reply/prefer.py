"""``Prefer: wait=N`` on ``POST /q`` (RFC 7240): a fast answer in the POST's own response.

The caller asks to wait up to N seconds (capped by ``DATAPLANE_MAX_PREFER_WAIT_SECONDS``)
for the answer. The POST then waits on the reply pump exactly as a stream does:

* the pump waiter is added **before** the (at most one) row read, so a job that
  finishes in between is not missed (the done-before-LISTEN race); then the waiter
  alone wakes the request: no polling. The read is skipped when none of the notifies
  the pump heard since before the enqueue was the job's (and no LISTEN gap came):
  then the job's finish cannot have gone by unheard, and the answer costs no DB read
  beyond the pump's own, at idle and under load alike;
* answered in time: ``200`` with the job's answer, the body the stream's final event
  and the poll carry (:func:`~dataplane.bff.jobs.answer`) for every finished job:
  ``done`` with ``result``/``blobRef``, ``done`` with an ``error`` (an expected error
  such as 403 or 404 from the handler), ``poison`` or ``cancelled`` with an ``error``.
  The HTTP status says the request was carried out; the job's outcome is in the body,
  as in the poll's ``200``. ``Content-Location`` names the poll URL (this body is that
  resource's representation);
* not in time: the usual ``202`` (the job runs on; stream or poll it); likewise at
  once when the server's shutdown grace begins (SIGTERM), so a waiting POST gets its
  URLs before its connection closes;
* the client goes away while waiting: the request is cancelled and its waiter
  discarded in ``finally``; nothing else is touched.

Parsing follows RFC 7240 section 2: several ``Prefer`` fields and comma-separated
preferences, case-insensitive names, optional ``;`` parameters (ignored), quoted
values, only the first occurrence of a preference counts, and a preference that
cannot be honoured (``wait=abc``, ``wait=-1``, ``wait=``) is ignored, never an error.
``Preference-Applied`` names what was applied (``wait=<seconds waited at most>``,
``respond-async`` on a 202 that asked for it); ``Vary: Prefer`` is on every answer,
since the answer depends on the header.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import trio
from quart import Response, request
from werkzeug.http import parse_list_header, parse_options_header, unquote_header_value

from dataplane.bff.auth.tokens import StreamGrant
from dataplane.bff.jobs import answer, record_end_to_end
from dataplane.bff.plane import BffServices
from dataplane.bff.reply.pump import Heard, ReplyPump
from dataplane.core.errors import DatabaseError
from dataplane.http import json_response
from dataplane.http.serve import cancelled_on_stop
from dataplane.queue import JobRow, QueueClient

log = logging.getLogger(__name__)

DELTA_SECONDS_OVERFLOW = 2**31  # a longer delta-seconds counts as this (RFC 9111 1.2.2)


@dataclass(frozen=True, slots=True)
class Preferences:
    """What a request's ``Prefer`` fields ask of this server (the rest is ignored)."""

    wait: int | None = None  # seconds (RFC 7240 delta-seconds); None: absent or invalid
    respond_async: bool = False


def parse_prefer(fields: Iterable[str]) -> Preferences:
    """The preferences of every ``Prefer`` field of a request (RFC 7240 section 2)."""
    seen: dict[str, str | None] = {}
    for field in fields:
        for item in parse_list_header(field):  # commas inside quoted values do not split
            preference, _params = parse_options_header(item)  # ";" parameters: ignored
            name, eq, value = preference.partition("=")
            name = name.strip().lower()
            if not name or name in seen:  # only the first instance of a preference counts
                continue
            value = unquote_header_value(value.strip()) if eq else ""
            seen[name] = value or None  # an empty value is no value (section 2)
    return Preferences(wait=_delta_seconds(seen.get("wait")), respond_async="respond-async" in seen)


def _delta_seconds(value: str | None) -> int | None:
    """``1*DIGIT``, or None (then the preference is ignored)."""
    if value is None or not value.isascii() or not value.isdigit():
        return None
    return int(value) if len(value) <= 10 else DELTA_SECONDS_OVERFLOW


async def wait_finished(
    pump: ReplyPump,
    queue: QueueClient,
    job_id: uuid.UUID,
    seconds: float,
    *,
    heard_before: Heard | None = None,
) -> JobRow | None:
    """The job's finished row if it finishes within ``seconds``, else None.

    The pump's waiter, added first, then at most one row read: none when
    ``heard_before`` (:meth:`ReplyPump.heard` read before the job could finish) lets
    the pump tell that the job's notify has not gone by (:meth:`ReplyPump.may_have_missed`;
    then the waiter alone hears the finish), nor when the notify that went by carried
    the answer (:meth:`ReplyPump.answered`; the caller enqueued the job: it is its
    owner). The waiter is discarded however this ends (an answer, the time up, or the
    request cancelled by a client that went away). The server's stop signal ends the
    wait at once (:func:`~dataplane.http.serve.cancelled_on_stop`): the caller answers
    202 with the job's URLs rather than be cut at the grace's end."""
    waiter = pump.add(job_id)
    try:
        if heard_before is None or pump.may_have_missed(job_id, heard_before):
            carried = pump.answered(job_id)  # it went by, carrying the answer
            if carried is not None:
                return carried
            try:
                rows = await queue.get_finished_many([job_id])
            except DatabaseError as exc:  # the waiter still hears the notify or the sweep
                log.warning("prefer wait: could not read job %s (%s); waiting", job_id, exc)
                rows = []
            if rows:
                return rows[0]
        with trio.move_on_after(seconds), cancelled_on_stop():
            return await waiter.wait()
        return None
    finally:
        pump.discard(waiter)


async def respond(
    services: BffServices,
    job_id: uuid.UUID,
    grant: StreamGrant,
    queued: Response,
    heard: Heard | None = None,
) -> Response:
    """The POST's response: the job's answer if the caller's ``Prefer: wait`` sees it
    come, else ``queued`` (the 202, its ``Location`` the poll URL), with
    ``Preference-Applied`` and ``Vary: Prefer``. ``heard``: the pump's
    :meth:`~ReplyPump.heard` before the enqueue (see :func:`wait_finished`)."""
    prefer = parse_prefer(request.headers.getlist("Prefer"))
    applied: list[str] = []
    resp = queued
    wait = min(prefer.wait or 0, services.config.max_prefer_wait_seconds)
    if wait > 0:
        applied.append(f"wait={wait}")
        row = await wait_finished(services.pump, services.queue, job_id, wait, heard_before=heard)
        if row is not None:
            resp = json_response(answer(services, row, grant), 200)
            resp.headers["Content-Location"] = queued.headers["Location"]
            record_end_to_end(row)
    if prefer.respond_async and resp is queued:
        applied.insert(0, "respond-async")
    if applied:
        resp.headers["Preference-Applied"] = ", ".join(applied)
    resp.vary.add("Prefer")
    return resp
