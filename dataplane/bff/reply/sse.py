"""Server-Sent Events for one job: ``queued``, any ``progress`` and ``retry``, then
``done`` or ``error``.

Event ids let a reconnecting EventSource (``Last-Event-ID``) skip what it has:
``queued`` is 1, ``TIMEOUT`` 2, ``done``/``POISON``/``CANCELLED`` 3. A ``progress``
event carries no id, so it leaves ``Last-Event-ID`` as it was: progress is a state, not
a delta, and every connection and reconnection of a running job's stream gets its
latest progress first (the row's, or a newer one the reply pump heard), then each
newer one (``attempt`` and ``seq`` in its data order them: a client may drop one it
has). A ``retry`` event (an attempt failed and the job waits out its backoff:
:mod:`dataplane.queue.notices.retries`) is such a state too, without an id: it comes after
every progress of the attempt that failed and before the next attempt's, and a stream
that connects while the job waits gets it first, from the row. A ``: keep-alive``
comment goes out every 15 s without other traffic. Past the stream deadline the
stream ends with ``TIMEOUT``; the job keeps running and its answer stays on the row.

How a stream ends is its outcome (``done``, ``poison``, ``cancelled``, ``TIMEOUT``;
``abandoned`` when the reply pump ended under it — the plane restarts or the BFF stops —
and the stream ends without an event, so its EventSource reconnects; the edge notes
``disconnect``): on the stream's server span (``dataplane.outcome``, and a
``TIMEOUT``/``POISON``/``CANCELLED`` span event) and in its access log line; a
TIMEOUT or POISON is also logged here, as a WARNING in the stream's span.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import trio
from opentelemetry import trace

from dataplane.bff.auth.tokens import StreamGrant
from dataplane.bff.jobs import answer, record_end_to_end, traceparent_of
from dataplane.bff.plane import BffServices
from dataplane.bff.reply.waiter import NO_PROGRESS, Update, Waiter
from dataplane.http import Exchange, cork_next_write
from dataplane.queue import JobRow
from dataplane.queue.notices.progress import Progress
from dataplane.queue.notices.retries import Retry
from telemetry.metrics import QUEUE_TYPE, instruments
from telemetry.tracing import context_from, messaging, tracer

log = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 15.0
SSE_RETRY_MS = 2000  # EventSource reconnect hint
EVENT_QUEUED, EVENT_TIMEOUT, EVENT_FINAL = 1, 2, 3


def event(name: str, event_id: int, data: Any, *, retry: bool = False) -> bytes:
    """One event; ``json.dumps`` escapes newlines, so a field never breaks out of its line."""
    head = f"retry: {SSE_RETRY_MS}\n" if retry else ""
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"{head}id: {event_id}\nevent: {name}\ndata: {payload}\n\n".encode()


async def job_events(
    services: BffServices,
    row: JobRow,
    grant: StreamGrant | None,
    last_id: int,
    waiter: Waiter | None,
    exchange: Exchange | None = None,
) -> AsyncIterator[bytes]:
    """The stream's body. ``waiter`` was added before ``row`` was read, so a finish
    since is not missed; it is discarded when the stream ends, however it ends. A
    finished ``row`` needs none. ``exchange``: the stream's request, told how the
    stream ends."""
    parent = context_from(traceparent_of(row))
    try:
        if row.finished:
            _ended(exchange, row)
            yield _last(_final(services, row, grant, parent, retry=True))
            return
        if waiter is None:
            raise ValueError("a stream of an unfinished job needs its waiter")
        if last_id < EVENT_QUEUED:
            queued = {"jobId": str(row.id), "status": row.status}
            yield event("queued", EVENT_QUEUED, queued, retry=True)
        kept = Progress.from_value(row.progress)
        if kept is not None:
            waiter.deliver_progress(kept)  # unless the pump has already heard a newer one
        waiting = Retry.from_row(row)  # a failed attempt it waits out (after its progress)
        if waiting is not None:
            waiter.deliver_retry(waiting)
        seen = NO_PROGRESS
        deadline = trio.current_time() + services.config.sse_deadline_seconds
        while True:
            with trio.move_on_at(min(deadline, trio.current_time() + KEEPALIVE_SECONDS)):
                await waiter.changed(seen)
            finished = waiter.row
            if finished is not None:
                _ended(exchange, finished)
                yield _last(_final(services, finished, grant, parent, retry=False))
                return
            if waiter.abandoned:  # the plane restarts: the browser reconnects to it
                if exchange is not None:
                    exchange.outcome = "abandoned"
                return
            if trio.current_time() >= deadline:
                instruments().stream_timeouts.add(1, {QUEUE_TYPE: row.type})
                _ended(exchange, row, "TIMEOUT", services.config.sse_deadline_seconds)
                yield _last(_timeout(row))
                return
            update = waiter.latest()
            if update is not None and update.order > seen:
                seen = update.order
                yield update_event(str(row.id), update)
                continue
            yield b": keep-alive\n\n"
    finally:
        if waiter is not None:
            services.pump.discard(waiter)


def update_event(job_id: str, update: Update) -> bytes:
    """A ``progress`` or ``retry`` event: no id (``Last-Event-ID`` stays the stream's
    last); a retry's ``retryInMs`` counts from now."""
    name = "retry" if isinstance(update, Retry) else "progress"
    payload = json.dumps(update.event(job_id), separators=(",", ":"), ensure_ascii=False)
    return f"event: {name}\ndata: {payload}\n\n".encode()


def _last(event: bytes) -> bytes:
    """The stream's last event: it leaves in one socket write with the body's end,
    which follows it at once (``edge.cork_next_write``)."""
    cork_next_write()
    return event


EVENTS = {"poison": "POISON", "cancelled": "CANCELLED"}  # span events of a final row


def _ended(
    exchange: Exchange | None, row: JobRow, outcome: str | None = None, deadline: float = 0.0
) -> None:
    """Note how the stream ends: ``outcome`` (else the row's status) on the span and
    the access line, an event for TIMEOUT/POISON/CANCELLED, a log line for the first two."""
    code = outcome or EVENTS.get(row.status)
    if exchange is not None:
        exchange.outcome = outcome or row.status
    if code is None:
        return
    job_id = str(row.id)
    attributes: dict[str, Any] = {"messaging.message.id": job_id}
    if code == "TIMEOUT":
        attributes["dataplane.deadline_seconds"] = deadline
    span = exchange.start_span() if exchange is not None else trace.INVALID_SPAN
    span.add_event(code, attributes)
    if code == "CANCELLED":
        return
    extra = {"job_id": job_id, "queue_type": row.type, "code": code}
    with trace.use_span(span, end_on_exit=False):  # the line carries the stream's ids
        if code == "TIMEOUT":
            log.warning(
                "stream TIMEOUT: job %s (%s) has no answer after %gs; it keeps running",
                job_id,
                row.type,
                deadline,
                extra=extra,
            )
        else:
            log.warning(
                "stream POISON: job %s (%s) was given up after %d attempt(s)",
                job_id,
                row.type,
                row.dequeue_count,
                extra=extra,
            )


def _timeout(row: JobRow) -> bytes:
    message = (
        "no answer within the stream deadline; the job keeps running: "
        "poll the job or reconnect the stream"
    )
    return event(
        "error", EVENT_TIMEOUT, {"jobId": str(row.id), "code": "TIMEOUT", "message": message}
    )


def _final(
    services: BffServices, row: JobRow, grant: StreamGrant | None, parent: Any, *, retry: bool
) -> bytes:
    """The final event, under an ``SSE done`` span in the job's trace (the browser's
    GET carries no trace context of its own); records end-to-end time."""
    with tracer().start_as_current_span(
        "SSE done" if row.status == "done" else "SSE error",
        context=parent,
        attributes={
            **messaging("receive", row.type, str(row.id), outcome=row.status),
            "messaging.operation.name": "deliver",
        },
    ):
        body = answer(services, row, grant)
        if row.status in ("poison", "cancelled"):
            data = {"jobId": body["jobId"], **body["error"]}
            out = event("error", EVENT_FINAL, data, retry=retry)
        else:
            out = event("done", EVENT_FINAL, body, retry=retry)
    record_end_to_end(row)
    return out
