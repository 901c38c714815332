"""The surface BFF: ``hypercorn -k trio dataplane.app:app``.

Routes (all plane routes under ``/api/<surface>/``; JSON in, JSON out)::

    POST /api/<surface>/q                  enqueue -> 202 {jobId, streamUrl, pollUrl, coalesced}
    GET  /api/<surface>/q/<jobId>/stream   Server-Sent Events: queued, then done | error
    GET  /api/<surface>/q/<jobId>          poll: 200 with the answer, 202 while live
    GET  /api/<surface>/q/<jobId>/blob     the result blob's bytes
    GET  /healthz  /readyz  /openapi.json

The process-wide :class:`Plane` (queue DB pool, reply pump, verifiers) is built
at startup in a task of the app's lifespan nursery: the pump has executed LISTEN
before the server accepts streams (or, with the DB down, after a bounded wait;
``/readyz`` tells). Without ``MAESTRO_QUEUES_URL`` or a JWT key, every plane
route answers 503 saying what is missing, and ``/healthz`` still answers.

Errors are ``{"error": {"status", "code", "message"}}``. A job is readable only
by a caller whose surface, client and scope key match its envelope; anyone else
gets 404, so job ids cannot be probed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import trio
from opentelemetry.trace import SpanKind
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from dataplane.auth import AuthError, JwtVerifier, StreamGrant, StreamTokens
from dataplane.config import Settings
from dataplane.db import Database, DatabaseConfig, open_bridge, open_database
from dataplane.envelope import Auth, Envelope
from dataplane.errors import DatabaseError, DatabaseUnavailable, HttpError, InvalidArgument
from dataplane.manifest import Surface
from dataplane.pump import ReplyPump, Waiter
from dataplane.queue import JobRow, QueueClient, done_channel
from dataplane.sql import q
from dataplane.surfaces import all_surfaces
from telemetry.metrics import instruments
from telemetry.otel import prometheus_text, setup_telemetry
from telemetry.tracing import context_from, current_traceparent, links_to, messaging, tracer

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
MAX_JSON_DEPTH = 32  # nesting levels a request body may have
BODY_TIMEOUT = 10  # seconds a client may take to send its body
KEEPALIVE_SECONDS = 15.0
SSE_RETRY_MS = 2000  # EventSource reconnect hint
STARTUP_WAIT = 10.0  # seconds to wait for LISTEN before serving anyway
READY_TIMEOUT = 2.0  # seconds /readyz may spend on its DB check
RETRY_AFTER_SECONDS = 1
# Event ids: a reconnect with Last-Event-ID skips what the browser already has.
EVENT_QUEUED, EVENT_TIMEOUT, EVENT_FINAL = 1, 2, 3

STATIC = Path(__file__).resolve().parent / "static"


class ApiError(Exception):
    """An HTTP error answered as ``{"error": {"status", "code", "message"}}``."""

    CODES: ClassVar[dict[int, str]] = {
        400: "BAD_REQUEST",
        401: "UNAUTHORIZED",
        403: "FORBIDDEN",
        404: "NOT_FOUND",
        405: "METHOD_NOT_ALLOWED",
        413: "PAYLOAD_TOO_LARGE",
        415: "UNSUPPORTED_MEDIA_TYPE",
        503: "UNAVAILABLE",
    }

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or self.CODES.get(status, "ERROR")
        self.message = message

    def response(self) -> Response:
        body = {"error": {"status": self.status, "code": self.code, "message": self.message}}
        resp = Response(json.dumps(body), status=self.status, mimetype="application/json")
        if self.status == 401:
            resp.headers["WWW-Authenticate"] = 'Bearer realm="dataplane"'
        if self.status == 503:
            resp.headers["Retry-After"] = "5"
        return resp


@dataclass
class Plane:
    """Everything a plane route needs, built once per process."""

    settings: Settings
    surfaces: dict[str, Surface]
    db: Database
    queue: QueueClient
    pump: ReplyPump
    verifier: JwtVerifier
    tokens: StreamTokens

    def queue_type(self, surface: Surface) -> str:
        return surface.queue_type(self.settings.queue_suffix)


def create_app() -> QuartTrio:
    app = QuartTrio(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.config["BODY_TIMEOUT"] = BODY_TIMEOUT
    app.config["JSON_SORT_KEYS"] = False
    state: dict[str, Any] = {"plane": None, "why": "the data plane is starting"}
    app.extensions["dataplane"] = state  # the Plane, for operators' tools and tests

    def probe_enabled() -> bool:
        current: Plane | None = state["plane"]
        return current.settings.probe_enabled if current else Settings.from_env().probe_enabled

    def plane() -> Plane:
        current: Plane | None = state["plane"]
        if current is None:
            raise ApiError(503, state["why"], "NOT_CONFIGURED")
        return current

    @app.before_serving
    async def start_plane() -> None:
        _log_to_stderr("dataplane", "telemetry")  # Hypercorn configures only its own
        if "telemetry" not in state:
            state["telemetry"] = setup_telemetry("dataplane-bff")
        settings = Settings.from_env()
        missing = []
        if settings.queues_url is None:
            missing.append("MAESTRO_QUEUES_URL (the queue database)")
        if not (settings.jwt_secret or settings.jwt_public_key):
            missing.append("DATAPLANE_JWT_SECRET or DATAPLANE_JWT_PUBLIC_KEY")
        if missing:
            state["why"] = "the data plane is not configured: set " + " and ".join(missing)
            log.warning("%s; plane routes answer 503", state["why"])
            return
        verifier = JwtVerifier.from_settings(
            secret=settings.jwt_secret,
            public_key=settings.jwt_public_key,
            audience=settings.jwt_audience,
            issuer=settings.jwt_issuer,
        )
        tokens = StreamTokens.from_settings(settings.stream_secret, settings.jwt_secret)
        ready = trio.Event()
        app.nursery.start_soon(_serve_plane, settings, verifier, tokens, state, ready)
        with trio.move_on_after(STARTUP_WAIT):
            await ready.wait()
        if not ready.is_set():
            log.warning("the reply pump is not listening yet (queue DB down?); serving anyway")

    @app.errorhandler(ApiError)
    async def api_error(error: ApiError) -> Response:
        return error.response()

    @app.after_request
    async def close_if_body_unread(response: Response) -> Response:
        # An answer given before the request body was read (405, 413, 415, 401...) leaves
        # that body on the connection; reusing it would stall both sides. Close it.
        if response.status_code >= 400 and _body_unread():
            response.headers["Connection"] = "close"
        return response

    @app.errorhandler(HTTPException)
    async def http_error(error: HTTPException) -> Response:
        status = error.code or 500
        message = {413: f"request body over {MAX_BODY_BYTES} bytes"}.get(
            status, error.description or error.name
        )
        resp = ApiError(status, message).response()
        allow = dict(error.get_headers()).get("Allow")
        if allow:
            resp.headers["Allow"] = allow
        return resp

    @app.after_serving
    async def flush_telemetry() -> None:
        telemetry = state.get("telemetry")
        if telemetry is not None:
            telemetry.shutdown()

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        telemetry = state.get("telemetry")
        if telemetry is None or not telemetry.prometheus:
            raise ApiError(404, "metrics are served only with DATAPLANE_METRICS=1")
        resp = Response(prometheus_text(), mimetype="text/plain")
        resp.headers["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
        return resp

    @app.get("/healthz")
    async def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        current: Plane | None = state["plane"]
        checks: dict[str, Any] = {"configured": current is not None}
        if current is not None:
            checks["listening"] = current.pump.listening
            try:
                await current.db.fetchone(q("ping"), call_timeout=READY_TIMEOUT)
                checks["queueDb"] = True
            except DatabaseError:
                checks["queueDb"] = False
        ok = all(checks.values()) and current is not None
        return _json(
            {"status": "ready" if ok else "not ready", "checks": checks}, 200 if ok else 503
        )

    @app.get("/")
    async def demo_page() -> Response:
        if not probe_enabled():
            raise ApiError(404, "the demo page is served only with DATAPLANE_PROBE=1")
        return await _static_file("index.html")

    @app.get("/static/<name>")
    async def static_file(name: str) -> Response:
        return await _static_file(name)

    @app.get("/openapi.json")
    async def openapi() -> Response:
        from dataplane.openapi import openapi_document

        return _json(openapi_document(all_surfaces(probe_enabled=probe_enabled())))

    @app.post("/api/<surface_id>/q")
    @_server_span("/api/{surface}/q")
    async def enqueue(surface_id: str) -> Response:
        p = plane()
        surface = _surface(p, surface_id)
        if request.mimetype != "application/json":
            raise ApiError(415, "send the body as application/json")
        auth = _bearer(p)
        body = await _json_body()
        operation_name, params = _parse_query(body)
        try:
            op = surface.operation(operation_name)
            params = op.check(auth, params)
        except HttpError as exc:
            raise ApiError(exc.status, exc.message) from None
        queue_type = p.queue_type(surface)
        with tracer().start_as_current_span(
            f"send {queue_type}",
            kind=SpanKind.PRODUCER,
            attributes=messaging("send", queue_type, surface=surface.id, operation=op.name),
        ) as send:
            env = Envelope(surface.id, op.name, op.version, params, auth, current_traceparent())
            try:
                result = await p.queue.enqueue(queue_type, env.dedupe_key, env.to_json())
            except InvalidArgument as exc:  # text Postgres cannot store (NUL, lone surrogates)
                raise ApiError(400, f"params: {exc}") from None
            except DatabaseUnavailable as exc:
                raise ApiError(503, f"the queue is unreachable: {exc}") from None
            job_id = str(result.job_id)
            send.set_attribute("messaging.message.id", job_id)
            send.set_attribute("dataplane.coalesced", result.coalesced)
            if result.coalesced:
                # Attached to a live job: link to the trace that executes it.
                for link in links_to(result.traceparent):
                    send.add_link(link.context, {"dataplane.link": "coalesced"})
        metrics = instruments()
        metrics.enqueued.add(1, {"surface": surface.id, "operation": op.name})
        if result.coalesced:
            metrics.coalesced.add(1, {"layer": "transport", "surface": surface.id})
        token = p.tokens.mint(
            StreamGrant(job_id, surface.id, auth.client, auth.scope_key, result.coalesced)
        )
        base = f"/api/{surface.id}/q/{job_id}"
        poll_url = f"{base}?token={token}"
        resp = _json(
            {
                "jobId": job_id,
                "streamUrl": f"{base}/stream?token={token}",
                "pollUrl": poll_url,
                "coalesced": result.coalesced,
            },
            202,
        )
        resp.headers["Location"] = poll_url
        resp.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return resp

    @app.get("/api/<surface_id>/q/<job_id>")
    @_server_span("/api/{surface}/q/{jobId}")
    async def poll(surface_id: str, job_id: str) -> Response:
        p = plane()
        surface = _surface(p, surface_id)
        row, grant = await _readable_job(p, surface, job_id)
        if not row.finished:
            resp = _json({"jobId": str(row.id), "status": row.status}, 202)
            resp.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
            return resp
        return _json(_answer(p, row, grant))

    @app.get("/api/<surface_id>/q/<job_id>/blob")
    @_server_span("/api/{surface}/q/{jobId}/blob")
    async def blob(surface_id: str, job_id: str) -> Response:
        p = plane()
        surface = _surface(p, surface_id)
        row, _grant = await _readable_job(p, surface, job_id)
        stored = await _db(p.queue.get_blob(row.id))
        if stored is None:
            raise ApiError(404, "no blob for this job (it may have expired)")
        resp = Response(stored.data, mimetype=stored.content_type)
        resp.headers["Content-Length"] = str(stored.size)
        ref = (row.result or {}).get("blobRef") if isinstance(row.result, dict) else None
        if isinstance(ref, dict) and isinstance(ref.get("filename"), str):
            name = ref["filename"].replace('"', "")
            resp.headers["Content-Disposition"] = f'attachment; filename="{name}"'
        resp.headers["Cache-Control"] = "private, max-age=3600"
        return resp

    @app.get("/api/<surface_id>/q/<job_id>/stream")
    async def stream(surface_id: str, job_id: str) -> Response:
        p = plane()
        surface = _surface(p, surface_id)
        last_id = _last_event_id()
        waiting = contextlib.ExitStack()  # the waiter's registration, handed to the stream
        waiters: list[Waiter] = []
        try:
            row, grant = await _readable_job(
                p,
                surface,
                job_id,
                before_read=lambda jid: waiters.append(waiting.enter_context(p.pump.register(jid))),
            )
        except BaseException:
            waiting.close()
            raise
        if last_id >= EVENT_FINAL:
            waiting.close()
            return Response("", status=204)  # the browser has the answer: stop reconnecting
        body = _events(p, row, grant, last_id, waiting, waiters[0])
        resp = Response(body, mimetype="text/event-stream")
        resp.headers["Cache-Control"] = "no-cache"
        resp.headers["X-Accel-Buffering"] = "no"
        resp.timeout = None  # a stream lives past RESPONSE_TIMEOUT
        return resp

    return app


async def _serve_plane(
    settings: Settings,
    verifier: JwtVerifier,
    tokens: StreamTokens,
    state: MutableMapping[str, Any],
    ready: trio.Event,
) -> None:
    """The plane's lifetime: bridge loop, pool and pump, until the app shuts down."""
    assert settings.queues_url is not None
    surfaces = all_surfaces(probe_enabled=settings.probe_enabled)
    config = DatabaseConfig(settings.queues_url, pool_size=20, application_name="dataplane-bff")
    async with open_bridge(), open_database(config) as db:
        queue = QueueClient(db, settings.queue_config())
        channels = [done_channel(s.queue_type(settings.queue_suffix)) for s in surfaces.values()]
        pump = ReplyPump(queue, channels, sweep_seconds=settings.sweep_seconds)
        state["plane"] = Plane(settings, surfaces, db, queue, pump, verifier, tokens)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump.run)
            await pump.listener.wait_connected()
            ready.set()
            log.info(
                "BFF ready: %d surface(s), listening on %s", len(surfaces), ", ".join(channels)
            )


STATIC_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".ts": "text/plain; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}


async def _static_file(name: str) -> Response:
    """A file of ``dataplane/static`` (flat: no sub-directories, no dot-files)."""
    path = STATIC / name
    if "/" in name or name.startswith(".") or path.suffix not in STATIC_TYPES:
        raise ApiError(404, "no such file")
    try:
        data = await trio.Path(path).read_bytes()
    except FileNotFoundError:
        raise ApiError(404, "no such file") from None
    resp = Response(data, mimetype=STATIC_TYPES[path.suffix].split(";")[0])
    resp.headers["Content-Type"] = STATIC_TYPES[path.suffix]
    resp.headers["Cache-Control"] = "no-cache"
    return resp


def _log_to_stderr(*names: str) -> None:
    """Our loggers to stderr at INFO, without touching Hypercorn's (no double lines)."""
    for name in names:
        logger = logging.getLogger(name)
        if not logger.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
            )
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
            logger.propagate = False


def _body_unread() -> bool:
    length = request.headers.get("Content-Length")
    has_body = (length is not None and length.strip() not in ("", "0")) or (
        "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    )
    if not has_body:
        return False
    complete = getattr(request.body, "_complete", None)
    return not (complete is not None and complete.is_set())


def _json(body: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":"), ensure_ascii=False),
        status=status,
        mimetype="application/json",
    )


def _surface(p: Plane, surface_id: str) -> Surface:
    surface = p.surfaces.get(surface_id)
    if surface is None:
        raise ApiError(404, f"unknown surface {surface_id!r}")
    return surface


def _bearer(p: Plane) -> Auth:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "send Authorization: Bearer <token>")
    try:
        return p.verifier.verify(token.strip())
    except AuthError as exc:
        raise ApiError(401, str(exc)) from None


async def _json_body() -> Any:
    raw = await request.get_data(cache=False, as_text=False)
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}") from None
    if _depth_over(body, MAX_JSON_DEPTH):
        raise ApiError(400, f"the body is nested deeper than {MAX_JSON_DEPTH} levels")
    return body


def _depth_over(value: Any, limit: int) -> bool:
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


def _parse_query(body: Any) -> tuple[str, Any]:
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


async def _db(call: Awaitable[Any]) -> Any:
    try:
        return await call
    except DatabaseUnavailable as exc:
        raise ApiError(503, f"the queue is unreachable: {exc}") from None


async def _readable_job(
    p: Plane,
    surface: Surface,
    job_id: str,
    before_read: Callable[[uuid.UUID], object] | None = None,
) -> tuple[JobRow, StreamGrant | None]:
    """The job, if this caller may read it; 404 for every other case.

    ``before_read`` runs once the caller is authenticated, just before the row is
    read (the stream registers its waiter there, so no finish can slip between).
    """
    not_found = ApiError(404, "no such job")
    try:
        jid = uuid.UUID(job_id)
    except ValueError:
        raise not_found from None
    token = request.args.get("token")
    grant: StreamGrant | None = None
    if token:
        try:
            grant = p.tokens.check(token)
        except AuthError as exc:
            raise ApiError(401, str(exc)) from None
        if grant.job_id != str(jid) or grant.surface != surface.id:
            raise not_found
        client, scope = grant.client, grant.scope_key
    else:
        auth = _bearer(p)
        client, scope = auth.client, auth.scope_key
    if before_read is not None:
        before_read(jid)
    row: JobRow | None = await _db(p.queue.get(jid))
    if row is None or row.type != p.queue_type(surface):
        raise not_found
    owner = row.payload.get("auth") if isinstance(row.payload, dict) else None
    if (
        not isinstance(owner, dict)
        or owner.get("client") != client
        or owner.get("scopeKey") != scope
    ):
        raise not_found
    return row, grant


def _answer(p: Plane, row: JobRow, grant: StreamGrant | None) -> dict[str, Any]:
    """The body of a finished job: done event data and the poll answer."""
    out: dict[str, Any] = {"jobId": str(row.id), "status": row.status}
    attached = bool(grant and grant.coalesced)
    if row.status == "poison":
        out["error"] = {
            "status": 500,
            "code": "POISON",
            "message": f"the job failed {row.dequeue_count} time(s) and was parked: "
            + (row.last_error or "unknown error").splitlines()[-1][:500],
        }
        out["coalesced"] = attached
        return out | _timings(row)
    result = row.result if isinstance(row.result, dict) else {"data": row.result}
    if "error" in result:
        out["error"] = result["error"]
    elif "blobRef" in result:
        ref = dict(result["blobRef"])
        token = p.tokens.mint(
            StreamGrant(
                str(row.id),
                str(row.payload.get("surface")),
                str(row.payload["auth"]["client"]),
                str(row.payload["auth"]["scopeKey"]),
                attached,
            )
        )
        ref["url"] = f"{ref['url']}?token={token}"
        out["blobRef"] = ref
    else:
        out["result"] = result.get("data")
    out["cache"] = result.get("cache", "bypass")
    out["coalesced"] = bool(result.get("coalesced")) or attached
    return out | _timings(row)


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


def _last_event_id() -> int:
    raw = request.headers.get("Last-Event-ID", "").strip()
    try:
        return int(raw)
    except ValueError:
        return 0


def _sse(event: str, event_id: int, data: Any, *, retry: bool = False) -> bytes:
    # json.dumps escapes newlines, so a field can never break out of its line.
    head = f"retry: {SSE_RETRY_MS}\n" if retry else ""
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"{head}id: {event_id}\nevent: {event}\ndata: {payload}\n\n".encode()


def _final_event(p: Plane, row: JobRow, grant: StreamGrant | None, *, retry: bool) -> bytes:
    answer = _answer(p, row, grant)
    if row.status == "poison":
        return _sse(
            "error", EVENT_FINAL, {"jobId": answer["jobId"], **answer["error"]}, retry=retry
        )
    return _sse("done", EVENT_FINAL, answer, retry=retry)


async def _events(
    p: Plane,
    first: JobRow,
    grant: StreamGrant | None,
    last_id: int,
    waiting: contextlib.ExitStack,
    waiter: Waiter,
) -> AsyncIterator[bytes]:
    """queued -> done | error, with keep-alives; the waiter lives as long as the stream."""
    traceparent = first.payload.get("traceparent") if isinstance(first.payload, dict) else None
    parent = context_from(traceparent)
    try:
        async for chunk in _stream_events(p, first, grant, last_id, parent, waiter):
            yield chunk
    finally:
        waiting.close()


async def _stream_events(
    p: Plane,
    row: JobRow,
    grant: StreamGrant | None,
    last_id: int,
    parent: Any,
    waiter: Waiter,
) -> AsyncIterator[bytes]:
    # The waiter was registered before ``row`` was read: a finish since is not missed.
    if row.finished:
        yield _done_event(p, row, grant, parent, retry=True)
        return
    if last_id < EVENT_QUEUED:
        yield _sse("queued", EVENT_QUEUED, {"jobId": str(row.id), "status": row.status}, retry=True)
    deadline = trio.current_time() + p.settings.sse_deadline_seconds
    while True:
        finished: JobRow | None = None
        with trio.move_on_at(min(deadline, trio.current_time() + KEEPALIVE_SECONDS)):
            finished = await waiter.wait()
        if finished is not None:
            yield _done_event(p, finished, grant, parent, retry=False)
            return
        if trio.current_time() >= deadline:
            yield _sse(
                "error",
                EVENT_TIMEOUT,
                {
                    "jobId": str(row.id),
                    "code": "TIMEOUT",
                    "message": "no answer within the stream deadline; the job keeps "
                    "running: poll the job or reconnect the stream",
                },
            )
            return
        yield b": keep-alive\n\n"


def _done_event(
    p: Plane, row: JobRow, grant: StreamGrant | None, parent: Any, *, retry: bool
) -> bytes:
    """The final event, under an ``SSE done`` span in the job's trace (the browser's
    GET carries no trace context of its own); records end-to-end time."""
    with tracer().start_as_current_span(
        "SSE done" if row.status == "done" else "SSE error",
        context=parent,
        attributes=messaging("receive", row.type, str(row.id), outcome=row.status),
    ):
        event = _final_event(p, row, grant, retry=retry)
    instruments().end_to_end.record(
        max(0.0, (datetime.now(UTC) - row.created_at).total_seconds() * 1000),
        {"surface": str(row.payload.get("surface")), "status": row.status},
    )
    return event


def _server_span(route: str) -> Callable[[Callable[..., Awaitable[Response]]], Any]:
    """Wrap a route in an HTTP server span (status from the response or the error)."""

    def decorate(fn: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Response:
            with tracer().start_as_current_span(
                f"{request.method} {route}",
                kind=SpanKind.SERVER,
                attributes={
                    "http.request.method": request.method,
                    "http.route": route,
                    "url.path": request.path,
                },
            ) as span:
                try:
                    response = await fn(*args, **kwargs)
                except ApiError as exc:
                    span.set_attribute("http.response.status_code", exc.status)
                    raise
                span.set_attribute("http.response.status_code", response.status_code)
                return response

        return wrapper

    return decorate


class RequireTrio:
    """ASGI guard: served under anything but Trio, fail at startup naming ``-k trio``."""

    MESSAGE = (
        "dataplane.app must be served under Trio: run `hypercorn -k trio dataplane.app:app` "
        "(Hypercorn's asyncio worker cannot run the Trio-based data plane)"
    )

    def __init__(self, inner: QuartTrio) -> None:
        self.inner = inner

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        import sniffio

        try:
            library = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            library = "unknown"
        if library == "trio":
            await self.inner(scope, receive, send)  # type: ignore[arg-type]
            return
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    # Say why, then end the worker process with a failure status: under
                    # asyncio, Hypercorn would log a failed lifespan and exit 0.
                    print(f"error: {self.MESSAGE}", file=sys.stderr, flush=True)
                    os._exit(3)
                if message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        raise RuntimeError(self.MESSAGE)


quart_app = create_app()
app = RequireTrio(quart_app)
