"""The request observer: each request seen from its start to the last byte of its
answer (:class:`Exchange`).

:func:`server_span` routes get an HTTP server span ending with the answer's last byte
(a stream's end); every request gets one ``dataplane.access`` log line and an
``http.server.request.duration`` record with the route template Quart matched
(:func:`note_route`). Routes note what they learn (:func:`note`) and may cork the
response's next part (:func:`cork_next_write`: honoured by the HTTP/1.1 protocol
:mod:`dataplane.compat.hypercorn` installs; nothing under stock Hypercorn).
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from quart import Response, request
from werkzeug.exceptions import HTTPException

from dataplane.http.errors import ApiError
from telemetry.metrics import instruments
from telemetry.tracing import context_from, tracer

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def ends_response(message: dict[str, Any]) -> bool:
    """Whether ``message`` is the last one of an HTTP response."""
    kind = message.get("type")
    if kind == "http.response.body":
        return not message.get("more_body", False)
    if kind == "http.response.trailers":
        return not message.get("more_trailers", False)
    return False


_RULE_PARAMETER = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")


async def note_route() -> None:
    """Before a matched route runs: its template, for the metric (a route with a server
    span names its own instead, the span's ``http.route``)."""
    exchange = _EXCHANGE.get()
    rule = request.url_rule
    if exchange is not None and rule is not None:
        exchange.http_route = route_template(rule.rule)


@functools.cache
def route_template(rule: str) -> str:
    """A Quart rule as an ``http.route`` template: ``/q/<job_id>`` -> ``/q/{job_id}``."""
    return _RULE_PARAMETER.sub(r"{\1}", rule)


def _record_request(exchange: Exchange, seconds: float) -> None:
    """The request's ``http.server.request.duration`` (HTTP semantic conventions)."""
    method = exchange.scope.get("method", "_OTHER")
    attrs: dict[str, Any] = {"http.request.method": method if method in KNOWN_METHODS else "_OTHER"}
    route = exchange.route or exchange.http_route
    if route is not None:
        attrs["http.route"] = route
    if exchange.status is not None:
        attrs["http.response.status_code"] = exchange.status
    if exchange.error_type is not None:
        attrs["error.type"] = exchange.error_type
    elif exchange.status is None:
        attrs["error.type"] = "_OTHER"  # no response: the client went away
    instruments().http_duration.record(seconds, attrs)


# -- observing each request: the server span and the access log -----------------------

access_log = logging.getLogger("dataplane.access")
KNOWN_METHODS = frozenset(
    ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
)
DEFAULT_PORTS = {"http": 80, "https": 443}
ACCESS_LINE = "%s %s %s %.1fms job=%s client=%s coalesced=%s outcome=%s"


class Exchange:
    """One HTTP request as the edge sees it, from its start to the last byte of its
    answer (a stream's: when the stream ends, at ``done``/``error`` or a disconnect).

    :class:`RequireTrio` makes one per request (:func:`current_exchange` inside the
    app). Routes note what they learn (:meth:`note`: the job, the verified client,
    coalesced; a stream's ``outcome``). A route wrapped in :func:`server_span` has an
    HTTP server span (OpenTelemetry HTTP conventions), started at the request's start.
    :meth:`finish` ends it — a 5xx ERROR with ``error.type``, a 4xx UNSET — and writes
    one INFO line to ``dataplane.access`` for every request: method, route template,
    status, duration, job id, client, coalesced, outcome. Never the query string (it
    carries stream tokens), never a header."""

    __slots__ = (
        "client",
        "coalesced",
        "corked",
        "ended",
        "error_type",
        "finished",
        "http_route",
        "job_id",
        "outcome",
        "route",
        "scope",
        "span",
        "started",
        "started_ns",
        "status",
    )

    def __init__(self, scope: dict[str, Any]) -> None:
        self.scope = scope
        self.started = time.perf_counter()
        self.started_ns = time.time_ns()
        self.route: str | None = None  # the template; set by server_span
        self.http_route: str | None = None  # the template Quart matched (every route)
        self.status: int | None = None
        self.job_id: str | None = None
        self.client: str | None = None
        self.coalesced: bool | None = None
        self.outcome: str | None = None
        self.error_type: str | None = None
        self.span: Span | None = None
        self.ended = False  # the answer's last byte went out
        self.finished = False
        self.corked = False  # hold the response's next part for the one after it

    def note(
        self,
        *,
        job_id: str | None = None,
        client: str | None = None,
        coalesced: bool | None = None,
    ) -> None:
        """What the route learnt about the request (for the span and the access log)."""
        if job_id is not None:
            self.job_id = job_id
            if self.span is not None:
                self.span.set_attribute("messaging.message.id", job_id)
        if client is not None:
            self.client = client
        if coalesced is not None:
            self.coalesced = coalesced

    def start_span(self, context: otel_context.Context | None = None) -> Span:
        """The server span, started (at the request's start) if it is not yet: a child
        of ``context``, else of the caller's ``traceparent`` header, else a root."""
        if self.span is not None:
            return self.span
        scope = self.scope
        method: str = scope["method"]
        host, port, traceparent = _from_headers(scope)
        attributes: dict[str, Any] = {
            "http.request.method": method if method in KNOWN_METHODS else "_OTHER",
            "url.path": scope["path"],
            "url.scheme": scope.get("scheme", "http"),
            "server.address": host,
            "server.port": port,
            "network.protocol.version": scope.get("http_version", "1.1"),
        }
        if self.route is not None:
            attributes["http.route"] = self.route
        client = scope.get("client")
        if client:
            attributes["client.address"] = client[0]
        if self.job_id is not None:
            attributes["messaging.message.id"] = self.job_id
        self.span = tracer().start_span(
            f"{method} {self.route}" if self.route is not None else method,
            context=context if context is not None else context_from(traceparent),
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=self.started_ns,
        )
        return self.span

    def failed(self, exc: BaseException) -> None:
        """An exception the answer will not name: its type is a 5xx's ``error.type``."""
        if self.error_type is None:
            self.error_type = f"{type(exc).__module__}.{type(exc).__qualname__}"
        if self.span is not None and self.span.is_recording():
            self.span.record_exception(exc)

    def observe(self, send: Send) -> Send:
        """``send``, noting the status and finishing the exchange with the last byte."""

        async def observed(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
            await send(message)
            if ends_response(message):
                self.ended = True
                self.finish()

        return observed

    def finish(self) -> None:
        """End the span and write the access line (once; see the class docstring)."""
        if self.finished:
            return
        self.finished = True
        elapsed_ms = (time.perf_counter() - self.started) * 1000
        status = self.status
        if not self.ended and self.outcome is None and self.error_type is None:
            self.outcome = "disconnect"  # the client left before the answer ended
        if status is None:
            if self.error_type is None and self.outcome != "disconnect":
                self.error_type = "_OTHER"
        elif status >= 500 and self.error_type is None:
            self.error_type = str(status)
        elif status < 500:
            self.error_type = None  # a 4xx is the client's error, not ours
        span = self.span
        if span is None and self.route is not None:
            span = self.start_span()  # a deferred span whose route failed first
        ids: dict[str, str] = {}
        if span is not None:
            if status is not None:
                span.set_attribute("http.response.status_code", status)
            if self.error_type is not None:
                span.set_attribute("error.type", self.error_type)
                span.set_status(Status(StatusCode.ERROR))
            if self.outcome is not None:
                span.set_attribute("dataplane.outcome", self.outcome)
            span.end()
            context = span.get_span_context()
            if context.is_valid:
                ids = {
                    "trace_id": format(context.trace_id, "032x"),
                    "span_id": format(context.span_id, "016x"),
                }
        _record_request(self, elapsed_ms / 1000)
        if access_log.isEnabledFor(logging.INFO):
            self._log(elapsed_ms, ids)

    def _log(self, elapsed_ms: float, ids: dict[str, str]) -> None:
        method = self.scope["method"]
        route = self.route or self.http_route
        coalesced = self.coalesced
        args = (
            method,
            route or self.scope["path"],
            self.status or "-",
            elapsed_ms,
            self.job_id or "-",
            self.client or "-",
            "-" if coalesced is None else str(coalesced).lower(),
            self.outcome or "-",
        )
        fields = {
            "method": method,
            "route": route,
            "path": self.scope["path"],
            "status": self.status,
            "duration_ms": round(elapsed_ms, 3),
            "job_id": self.job_id,
            "client": self.client,
            "coalesced": coalesced,
            "outcome": self.outcome,
            "error_type": self.error_type,
            **ids,
        }
        # One record made directly: what ``access_log.info`` would do, without looking
        # up the caller's frame (a third of a line's cost; the line's origin is known).
        record = access_log.makeRecord(
            access_log.name, logging.INFO, __file__, 0, ACCESS_LINE, args, None, extra=fields
        )
        access_log.handle(record)


_EXCHANGE: ContextVar[Exchange | None] = ContextVar("dataplane_exchange", default=None)


def current_exchange() -> Exchange | None:
    """This request's :class:`Exchange` (None outside a request served by RequireTrio)."""
    return _EXCHANGE.get()


def note(
    *, job_id: str | None = None, client: str | None = None, coalesced: bool | None = None
) -> None:
    """:meth:`Exchange.note` on this request's exchange (nothing outside one)."""
    exchange = _EXCHANGE.get()
    if exchange is not None:
        exchange.note(job_id=job_id, client=client, coalesced=coalesced)


def cork_next_write() -> None:
    """Hold this response's next part (its head, or a body part) until the part after
    it, so both leave in one socket write: for a route that knows the next part follows
    at once (a stream whose first event is ready; a stream's last event, which the
    body's end follows). Nothing is lost by a response that ends otherwise: held bytes
    lead whatever is written next, and go out when the stream closes. Nothing outside
    a request served by :class:`RequireTrio` over HTTP/1.1."""
    exchange = _EXCHANGE.get()
    if exchange is not None:
        exchange.corked = True


def _from_headers(scope: dict[str, Any]) -> tuple[str, int, str | None]:
    """``server.address`` and ``server.port`` (from ``Host``, else the socket), and the
    caller's ``traceparent``, in one pass over the headers."""
    host_header = traceparent = None
    for name, value in scope.get("headers", ()):
        if name == b"host":
            host_header = value.decode("latin-1")
        elif name == b"traceparent":
            traceparent = value.decode("latin-1")
    server = scope.get("server") or ("", 0)
    if not host_header:
        return str(server[0]), int(server[1] or 0), traceparent
    host, sep, port = host_header.rpartition(":")
    if not sep or "]" in port or not port.isdigit():  # no port (a bare name or [v6])
        default = DEFAULT_PORTS.get(scope.get("scheme", "http"), int(server[1] or 0))
        return host_header, default, traceparent
    return host, int(port), traceparent


Route = Callable[..., Awaitable[Response]]


def server_span(route: str, *, deferred: bool = False) -> Callable[[Route], Route]:
    """Trace a route with an HTTP server span named ``<method> <route>`` (``route`` is
    the ``http.route`` template) that ends with the answer's last byte (a stream's end).

    ``deferred``: the route starts the span itself, once it knows its parent
    (:meth:`Exchange.start_span`); one that fails first gets a root span at the end.
    Only a request served through :class:`RequireTrio` is observed."""

    def decorate(fn: Route) -> Route:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Response:
            exchange = _EXCHANGE.get()
            if exchange is None:
                return await fn(*args, **kwargs)
            exchange.route = route
            try:
                if deferred:
                    return await fn(*args, **kwargs)
                with trace.use_span(
                    exchange.start_span(),
                    record_exception=False,
                    set_status_on_exception=False,
                ):
                    return await fn(*args, **kwargs)
            except (ApiError, HTTPException):
                raise  # answered: the status says what happened
            except Exception as exc:
                exchange.failed(exc)
                raise

        return wrapper

    return decorate
