"""The BFF's routes (all plane routes under ``/api/<surface>/``; JSON in, JSON out)::

    POST /api/<surface>/q                  enqueue -> 202 {jobId, streamUrl, pollUrl, coalesced}
                                           (Prefer: wait=N -> 200 with the answer if in time)
    GET  /api/<surface>/q/<jobId>/stream   Server-Sent Events: queued, progress and retry,
                                           then done | error
    GET  /api/<surface>/q/<jobId>          poll: 200 with the answer, 202 while live (with
                                           its last progress and the failed attempt it
                                           waits out, if any)
    GET  /api/<surface>/q/<jobId>/blob     the result blob's bytes
    DELETE /api/<surface>/q/<jobId>        withdraw: the last requester cancels the job,
                                           pending or running

The routes around the plane (health, readiness, metrics, the demo page, the OpenAPI
document) are :mod:`dataplane.bff.site`'s.

Errors are ``{"error": {"status", "code", "message"}}`` (:mod:`dataplane.http`).
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.trace import SpanKind
from quart import Blueprint, Response, current_app, request

from dataplane.bff.auth.tokens import StreamGrant, requester_of
from dataplane.bff.auth.urls import poll_url, stream_url
from dataplane.bff.jobs import (
    answer,
    bearer,
    job_target,
    known_answer,
    queue_call,
    read_job,
    refuse_unmigrated,
    traceparent_of,
)
from dataplane.bff.plane import BffServices, BffState
from dataplane.bff.reply import prefer
from dataplane.bff.reply.sse import EVENT_FINAL, EVENT_QUEUED, job_events
from dataplane.bff.reply.waiter import Waiter
from dataplane.core.errors import (
    DatabaseError,
    DatabaseUnavailable,
    HttpError,
    InvalidArgument,
    QueueFull,
)
from dataplane.http import (
    ApiError,
    cork_next_write,
    current_exchange,
    json_response,
    note,
    server_span,
)
from dataplane.queue import EnqueueResult, JobRow
from dataplane.queue.blobs import blob_chunks
from dataplane.queue.envelope import Envelope
from dataplane.queue.notices.progress import Progress
from dataplane.queue.notices.retries import Retry
from dataplane.queue.records import Cancellation
from dataplane.surfaces.manifest import Surface
from telemetry.metrics import OPERATION, QUEUE_TYPE, instruments
from telemetry.tracing import (
    context_from,
    current_traceparent,
    links_to,
    messaging,
    tracer,
)

MAX_BODY_BYTES = 64 * 1024
MAX_JSON_DEPTH = 32  # nesting levels a request body may have
RETRY_AFTER_SECONDS = 1
BACKPRESSURE_RETRY_AFTER = 5  # seconds a refused POST is told to wait

routes = Blueprint("dataplane", __name__)


def state() -> BffState:
    current: BffState = current_app.extensions["dataplane"]
    return current


def current_services() -> BffServices:
    """The plane, or 503 saying why it is not serving."""
    s = state()
    if s.services is None:
        raise ApiError(503, s.why, "NOT_CONFIGURED")
    return s.services


def surface_of(services: BffServices, surface_id: str) -> Surface:
    surface = services.surfaces.get(surface_id)
    if surface is None:
        raise ApiError(404, f"unknown surface {surface_id!r}")
    return surface


# -- the plane ----------------------------------------------------------------


@routes.post("/api/<surface_id>/q")
@server_span("/api/{surface}/q")
async def enqueue(surface_id: str) -> Response:
    services = current_services()
    surface = surface_of(services, surface_id)
    if request.mimetype != "application/json":
        raise ApiError(415, "send the body as application/json")
    auth = bearer(services)
    note(client=auth.client)
    operation_name, params = parse_query(await json_body())
    try:
        op = surface.operation(operation_name)
        params = op.check(auth, params)
    except HttpError as exc:
        raise ApiError(exc.status, exc.message) from None
    queue_type = services.queue_type(surface)
    with tracer().start_as_current_span(
        f"send {queue_type}",
        kind=SpanKind.PRODUCER,
        attributes={
            **messaging("send", queue_type.name, surface=surface.id, operation=op.name),
            "messaging.operation.name": "send",
        },
    ) as send:
        env = Envelope(
            surface.id,
            op.name,
            op.version,
            params,
            auth,
            current_traceparent(),
            tier=services.config.queue_suffix,
            per_user=op.per_user,
        )
        heard = services.pump.heard()  # before the job can finish: see prefer.wait_finished
        try:
            result = await _enqueue(services, surface, env)
        except InvalidArgument as exc:  # text Postgres cannot store (NUL, lone surrogates)
            raise ApiError(400, f"params: {exc}") from None
        except DatabaseUnavailable as exc:
            raise ApiError(503, f"the queue is unreachable: {exc}") from None
        except DatabaseError as exc:
            refuse_unmigrated(exc)
            raise
        except QueueFull as exc:
            refused = {QUEUE_TYPE: queue_type.name, "dataplane.scope": exc.scope}
            instruments().refused.add(1, refused)
            status = 429 if exc.scope == "client" else 503
            raise ApiError(status, str(exc), retry_after=BACKPRESSURE_RETRY_AFTER) from None
        job_id = str(result.job_id)
        note(job_id=job_id, coalesced=result.coalesced)
        send.set_attribute("messaging.message.id", job_id)
        send.set_attribute("dataplane.coalesced", result.coalesced)
        if result.coalesced:
            # Attached to a live job: link to the trace that executes it.
            for link in links_to(result.traceparent):
                send.add_link(link.context, {"dataplane.link": "coalesced"})
    metrics = instruments()
    metrics.enqueued.add(1, {QUEUE_TYPE: queue_type.name, OPERATION: op.name})
    if result.coalesced:
        metrics.coalesced.add(1, {QUEUE_TYPE: queue_type.name, "dataplane.layer": "transport"})
    grant = StreamGrant(
        job_id,
        surface.id,
        auth.client,
        auth.scope_key,
        result.coalesced,
        services.config.queue_suffix,
        requester_of(auth.client, auth.user_id),
    )
    token = services.tokens.mint(grant)
    body = {
        "jobId": job_id,
        "streamUrl": stream_url(surface.id, job_id, token),
        "pollUrl": poll_url(surface.id, job_id, token),
        "coalesced": result.coalesced,
    }
    resp = json_response(body, 202)
    resp.headers["Location"] = body["pollUrl"]
    resp.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return await prefer.respond(services, result.job_id, grant, resp, heard)  # Prefer: wait


async def _enqueue(services: BffServices, surface: Surface, env: Envelope) -> EnqueueResult:
    """Enqueue under backpressure: over a limit, only attaching to a live job is allowed."""
    queue_type = services.queue_type(surface).name
    requester = requester_of(env.auth.client, env.auth.user_id)  # who may withdraw
    try:
        services.load.check(queue_type, env.auth.client)
    except QueueFull:
        attached = await services.queue.attach(env.dedupe_key, requester)
        if attached is None:
            raise
        return attached
    result = await services.enqueuer.enqueue(
        queue_type, env.dedupe_key, env.to_json(), requester=requester
    )
    if not result.coalesced:
        services.load.added(queue_type, env.auth.client)
    return result


@routes.get("/api/<surface_id>/q/<job_id>")
@server_span("/api/{surface}/q/{jobId}")
async def poll(surface_id: str, job_id: str) -> Response:
    services = current_services()
    surface = surface_of(services, surface_id)
    target = job_target(services, surface, job_id)
    row = known_answer(services, surface, target) or await read_job(services, surface, target)
    link_job(row)
    if not row.finished:
        body: dict[str, Any] = {"jobId": str(row.id), "status": row.status}
        progress = Progress.from_value(row.progress)
        if progress is not None:  # the job's last progress, as its stream sent it
            body["progress"] = progress.event(str(row.id))
        retry = Retry.from_row(row)
        if retry is not None:  # a failed attempt it waits out, as its stream sent it
            body["retry"] = retry.event(str(row.id))
        resp = json_response(body, 202)
        resp.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return resp
    return json_response(answer(services, row, target.grant))


@routes.delete("/api/<surface_id>/q/<job_id>")
@server_span("/api/{surface}/q/{jobId}")
async def cancel(surface_id: str, job_id: str) -> Response:
    """Withdraw this requester from a live job; the last requester cancels it, pending
    or running (a running job's worker stops its handler). A requester withdraws once:
    a repeated DELETE (with the URL token or the bearer JWT) answers what the first did
    and withdraws nobody else. A caller who did not request the job (a colleague of the
    same client and scope) is refused with 403; a finished job is a 409 naming its
    status. A disconnect or a stream's timeout withdraws nobody: only this does."""
    services = current_services()
    surface = surface_of(services, surface_id)
    target = job_target(services, surface, job_id)
    row = await read_job(services, surface, target)
    link_job(row)
    outcome = await queue_call(services.queue.cancel(row.id, target.requester, row.type))
    if outcome.status == "cancelled":
        instruments().cancelled.add(1, {QUEUE_TYPE: row.type})
        cancelled = Cancellation("requesters", outcome.running, outcome.at)
        body = {"jobId": str(row.id), "status": "cancelled", "cancellation": cancelled.to_json()}
        return json_response(body)
    if outcome.status == "not_requester":
        raise ApiError(403, "only a requester of this job may withdraw from it")
    if outcome.status in ("pending", "in_progress", "withdrawn"):  # others keep it alive
        live = "in_progress" if outcome.running else "pending"
        waiting = {"jobId": str(row.id), "status": live, "requesters": outcome.requesters}
        return json_response(waiting, 202)
    current = await queue_call(services.queue.get(row.id))
    status = current.status if current is not None else row.status
    raise ApiError(409, f"the job is {status}: a finished job has nothing to withdraw from")


@routes.get("/api/<surface_id>/q/<job_id>/blob")
@server_span("/api/{surface}/q/{jobId}/blob")
async def blob(surface_id: str, job_id: str) -> Response:
    services = current_services()
    surface = surface_of(services, surface_id)
    row = await read_job(services, surface, job_target(services, surface, job_id))
    link_job(row)
    stored = await queue_call(services.queue.get_blob_head(row.id))
    if stored is None:
        raise ApiError(404, "no blob for this job (it may have expired)")
    # Streamed from the queue DB a chunk at a time: memory per download stays bounded.
    resp = Response(blob_chunks(services.queue.db, stored), mimetype=stored.content_type)
    resp.headers["Content-Length"] = str(stored.size)
    ref = (row.result or {}).get("blobRef") if isinstance(row.result, dict) else None
    if isinstance(ref, dict) and isinstance(ref.get("filename"), str):
        name = ref["filename"].replace('"', "")
        resp.headers["Content-Disposition"] = f'attachment; filename="{name}"'
    resp.headers["Cache-Control"] = "private, max-age=3600"
    return resp


@routes.get("/api/<surface_id>/q/<job_id>/stream")
@server_span("/api/{surface}/q/{jobId}/stream", deferred=True)
async def stream(surface_id: str, job_id: str) -> Response:
    """The stream's server span ends with the stream (done, error, or a disconnect) and,
    once the row is read, is a child of the job's context: the answer on its way is part
    of the request's trace, beside ``SSE done``. (One that fails first is a root.)"""
    services = current_services()
    surface = surface_of(services, surface_id)
    last_id = last_event_id()
    target = job_target(services, surface, job_id)
    waiter: Waiter | None = None
    row = known_answer(services, surface, target)  # its answer went by: no read, no waiter
    if row is None:
        # The waiter goes in before the row is read: a finish in between is not missed.
        waiter = services.pump.add(target.job_id)
        try:
            row = await read_job(services, surface, target)
        except BaseException:
            services.pump.discard(waiter)
            raise
    exchange = current_exchange()
    if exchange is not None:
        exchange.start_span(context_from(traceparent_of(row)))
    if last_id >= EVENT_FINAL:
        if waiter is not None:
            services.pump.discard(waiter)
        return Response("", status=204)  # the browser has the answer: stop reconnecting
    if row.finished or last_id < EVENT_QUEUED:
        cork_next_write()  # the first event is ready: the head leaves with it
    events = job_events(services, row, target.grant, last_id, waiter, exchange)
    resp = Response(events, mimetype="text/event-stream")
    resp.headers["Cache-Control"] = "no-cache"
    resp.headers["X-Accel-Buffering"] = "no"
    resp.timeout = None  # a stream lives past RESPONSE_TIMEOUT
    return resp


def link_job(row: JobRow) -> None:
    """A poll, blob or cancel request stays its own trace (a browser may poll many
    times), linked to the job's: its span carries ``messaging.message.id`` and the link."""
    exchange = current_exchange()
    span = exchange.span if exchange is not None else None
    if span is not None and span.is_recording():
        for link in links_to(traceparent_of(row)):
            span.add_link(link.context, {"dataplane.link": "job"})


# -- request helpers --------------------------------------------------------------


async def json_body() -> Any:
    raw = await request.get_data(cache=False, as_text=False)
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}") from None
    if depth_over(body, MAX_JSON_DEPTH):
        raise ApiError(400, f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
    return body


def depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers deeper than ``limit`` (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def parse_query(body: Any) -> tuple[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, 'the body must be a JSON object {"operation", "params"}')
    unknown = sorted(set(body) - {"operation", "params"})
    if unknown:
        raise ApiError(400, f"unknown field(s) in the body: {', '.join(unknown)}")
    operation = body.get("operation")
    if not isinstance(operation, str) or not operation:
        raise ApiError(400, "operation: expected a non-empty string")
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise ApiError(400, "params: expected object")
    return operation, params


def last_event_id() -> int:
    raw = request.headers.get("Last-Event-ID", "").strip()
    try:
        return int(raw)
    except ValueError:
        return 0
