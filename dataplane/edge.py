"""The HTTP edge shared by the BFF and the capcom receiver (Quart-Trio on Hypercorn).

* :class:`ApiError`: an HTTP error answered as ``{"error": {"status", "code",
  "message"}}``; :func:`install_error_handlers` makes every error (ours, and
  Quart's 404/405/413/415...) answer that body, and closes a connection whose
  request body was left unread by the refusal (reusing it would stall both sides);
  a path with a doubled slash is an unknown route (JSON 404), not an HTML redirect;
* :func:`json_response`, :func:`prometheus_response`: the bodies we send;
* :func:`require_bearer`: a shared-token check (``/metrics`` with a token);
* :class:`RequireTrio`: the ASGI guard that fails at startup, naming ``-k trio``,
  when Hypercorn serves the app under asyncio; under Trio it makes the connection
  close as HTTP says (:func:`shield_final_send`) and ``100 Continue`` wait until the
  app reads the body (:class:`DeferredContinueH11Protocol`, :class:`ContinueRequest`);
  both work around Hypercorn/Quart-Trio defects described in ``docs/known-issues.md``;
  a response's head leaves in the same socket write as its first body bytes (a stream's
  too, and its last event with the body's end, when the route corks them:
  :func:`cork_next_write`); bytes the socket takes at once leave without a scheduler
  pass (:func:`lean_protocol_send`); and the keep-alive timer restarts without a lock
  or a start handshake (:class:`KeepAliveTimer`);
* :class:`Exchange`: each request observed — :func:`server_span` routes get an HTTP
  server span ending with the answer's last byte (a stream's end), and every request
  one ``dataplane.access`` log line;
* :class:`EdgeLogger`: Hypercorn's error log through our logging handler, its access
  log replaced by ours.
  :class:`Exchange` also records ``http.server.request.duration`` for every request,
  to the end of its response, with the route template Quart matched (:func:`_note_route`);
* :func:`serve_app`: Hypercorn serving an app in this process until SIGTERM, with a
  bounded grace (``dataplane bff``, ``dataplane capcom``).

Whatever else is installed, :class:`RequireTrio` first makes Hypercorn's connections
HTTP/1.1 only and closed on time (:mod:`dataplane.http11`).
"""

from __future__ import annotations

import functools
import hmac
import importlib
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Generator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import hypercorn.config
import hypercorn.logging
import hypercorn.protocol
import hypercorn.trio
import hypercorn.trio.tcp_server as hypercorn_tcp_server
import sniffio
import trio
from hypercorn.events import Closed, RawData
from hypercorn.protocol.events import StreamClosed
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from quart import Response, request
from quart_trio import QuartTrio
from quart_trio.wrappers.request import TrioBody, TrioRequest
from werkzeug.exceptions import HTTPException

from dataplane.config import setting
from dataplane.http11 import HTTP11OnlyProtocol, guard_connections
from dataplane.observability.metrics import instruments
from dataplane.observability.tracing import context_from, tracer

log = logging.getLogger(__name__)

PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UNAVAILABLE_RETRY_AFTER = 5  # seconds, on a 503


class ApiError(Exception):
    """An HTTP error answered as ``{"error": {"status", "code", "message"}}``."""

    CODES: ClassVar[dict[int, str]] = {
        400: "BAD_REQUEST",
        401: "UNAUTHORIZED",
        403: "FORBIDDEN",
        404: "NOT_FOUND",
        405: "METHOD_NOT_ALLOWED",
        409: "CONFLICT",
        413: "PAYLOAD_TOO_LARGE",
        415: "UNSUPPORTED_MEDIA_TYPE",
        429: "TOO_MANY_REQUESTS",
        503: "UNAVAILABLE",
    }

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        *,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or self.CODES.get(status, "ERROR")
        self.message = message
        self.retry_after = retry_after

    def response(self) -> Response:
        body = {"error": {"status": self.status, "code": self.code, "message": self.message}}
        resp = Response(json.dumps(body), status=self.status, mimetype="application/json")
        if self.status == 401:
            resp.headers["WWW-Authenticate"] = 'Bearer realm="dataplane"'
        retry_after = self.retry_after
        if retry_after is None and self.status == 503:
            retry_after = UNAVAILABLE_RETRY_AFTER
        if retry_after is not None:
            resp.headers["Retry-After"] = str(retry_after)
        return resp


def json_response(body: Any, status: int = 200) -> Response:
    """Compact UTF-8 JSON."""
    return Response(
        json.dumps(body, separators=(",", ":"), ensure_ascii=False),
        status=status,
        mimetype="application/json",
    )


def prometheus_response(text: bytes) -> Response:
    resp = Response(text, status=200)
    resp.headers["Content-Type"] = PROMETHEUS_CONTENT_TYPE
    return resp


def body_unread() -> bool:
    """Whether the current request announced a body that nobody has read."""
    length = request.headers.get("Content-Length")
    has_body = (length is not None and length.strip() not in ("", "0")) or (
        "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    )
    if not has_body:
        return False
    complete = getattr(request.body, "_complete", None)
    return not (complete is not None and complete.is_set())


def install_error_handlers(app: QuartTrio, *, max_body_bytes: int) -> None:
    """Every error answers the JSON error body; refusals before the body close."""

    async def api_error(error: ApiError) -> Response:
        return error.response()

    async def http_error(error: HTTPException) -> Response:
        status = error.code or 500
        message = {413: f"request body over {max_body_bytes} bytes"}.get(
            status, error.description or error.name
        )
        resp = ApiError(status, message).response()
        allow = dict(error.get_headers()).get("Allow")
        if allow:
            resp.headers["Allow"] = allow
        return resp

    async def close_if_body_unread(response: Response) -> Response:
        # An answer given before the request body was read (405, 413, 415, 401...) leaves
        # that body on the connection; reusing it would stall both sides. Close it.
        if response.status_code >= 400 and body_unread():
            response.headers["Connection"] = "close"
        return response

    # A doubled slash must not be "merged" by a 308 redirect: Quart answers routing
    # redirects with HTML, past every error handler. Unmerged, the path matches no
    # route and answers the JSON 404 like any other unknown route.
    app.url_map.merge_slashes = False
    for rule in app.url_map.iter_rules():
        rule.merge_slashes = False
    # Expect: 100-continue is answered only when a route reads the body (see
    # ContinueRequest): a refusal (401, 403, 415...) goes out without inviting it.
    app.request_class = ContinueRequest
    app.register_error_handler(ApiError, api_error)
    app.register_error_handler(HTTPException, http_error)
    app.after_request(close_if_body_unread)
    app.before_request(_note_route)


def require_bearer(expected: str | None, setting: str) -> None:
    """401 unless the request carries ``Authorization: Bearer <expected>`` (nothing to
    check when ``expected`` is unset); compared in constant time."""
    if not expected:
        return
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode("utf-8", "surrogateescape"), expected.encode()
    ):
        raise ApiError(401, f"send Authorization: Bearer <{setting}>")


Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


# -- Expect: 100-continue, only once the app reads the body ---------------------------

_H11: Any = h11  # the HTTP/1.1 state machine Hypercorn speaks
CONTINUE_EXTENSION = "dataplane.send_continue"  # ASGI scope extension: await it for a 100
SendContinue = Callable[[], Awaitable[None]]


class _DeferredContinueConnection:
    """Hypercorn's h11 server connection, reporting a client that waits for ``100
    Continue`` only once the app asked for the body (Hypercorn then sends the 100)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.continue_wanted = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def they_are_waiting_for_100_continue(self) -> bool:
        return self.continue_wanted and bool(self._inner.they_are_waiting_for_100_continue)

    def start_next_cycle(self) -> None:
        self._inner.start_next_cycle()
        self.continue_wanted = False


class DeferredContinueH11Protocol(HTTP11OnlyProtocol):
    """Hypercorn's HTTP/1.1 protocol (HTTP/1.1 only: :mod:`dataplane.http11`), but
    ``100 Continue`` waits for the app.

    Stock Hypercorn sends ``100 Continue`` as soon as it has parsed the headers of a
    request carrying ``Expect: 100-continue``, before the app has even seen it: a
    client is invited to send its body to be refused (401) anyway. Here the 100 goes
    out when the app first reads the body (:meth:`send_continue`), and never when it
    answers first (a response ends the client's wait, RFC 9110 §10.1.1). And a sized
    response's head is written together with its body (one socket write fewer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection = _DeferredContinueConnection(self.connection)  # type: ignore[assignment]
        self._held = b""  # bytes of a response not written yet (they lead the next write)

    async def _send_h11_event(self, event: Any) -> None:
        # A sized response's head leaves with its body (or its end): one socket write
        # instead of two. A stream's head (no Content-Length: its first event may be
        # minutes away) or body part is held only when the route corked it
        # (cork_next_write): the part that follows is known to come at once.
        kind = type(event)
        if kind is _H11.Response or kind is _H11.Data:
            exchange = _EXCHANGE.get()
            corked = exchange is not None and exchange.corked
            if corked or (
                kind is _H11.Response and any(n == b"content-length" for n, _ in event.headers)
            ):
                if corked:
                    exchange.corked = False  # type: ignore[union-attr]
                try:
                    self._held += self.connection.send(event) or b""
                except _H11.LocalProtocolError:
                    if self.connection.their_state != _H11.ERROR:
                        raise
                return
        held, self._held = self._held, b""
        try:
            data = held + (self.connection.send(event) or b"")
        except _H11.LocalProtocolError:
            if self.connection.their_state != _H11.ERROR:
                raise
            data = held
        if data:
            await self.send(RawData(data=data))

    async def stream_send(self, event: Any) -> None:
        if isinstance(event, StreamClosed) and self._held:  # never lose held bytes
            held, self._held = self._held, b""
            await self.send(RawData(data=held))
        await super().stream_send(event)

    async def send_continue(self) -> None:
        connection: Any = self.connection
        if not isinstance(connection, _DeferredContinueConnection):
            return  # upgraded to a WebSocket meanwhile
        connection.continue_wanted = True
        if connection.they_are_waiting_for_100_continue:
            await self._send_h11_event(
                _H11.InformationalResponse(
                    status_code=100, headers=self.config.response_headers("h11")
                )
            )


def defer_100_continue() -> None:
    """Make Hypercorn serve HTTP/1.1 with :class:`DeferredContinueH11Protocol`
    (idempotent; in effect for connections accepted from then on)."""
    hypercorn.protocol.H11Protocol = DeferredContinueH11Protocol  # type: ignore[attr-defined]


class KeepAliveTimer:
    """Hypercorn's per-connection keep-alive timer (the ``TrioSingleTask`` of
    ``hypercorn.trio.tcp_server``) without its lock and its start handshake.

    Hypercorn stops the timer when a request arrives and restarts it when the
    connection goes idle, on every keep-alive request. Its own version takes a
    ``trio.Lock`` both times and restarts through ``nursery.start``: three scheduler
    passes and a start handshake per request, about 7 % of the BFF's CPU under load.
    Here neither call has a checkpoint (both are atomic under Trio without a lock);
    the timer task is still spawned in the connection's task group, so it ends with
    the connection, and it runs in a cancel scope of its own that the next
    :meth:`stop` or :meth:`restart` cancels. With no checkpoint, a restart from a
    cancelled scope (the final send of a response, ``docs/known-issues.md`` 1) still
    starts the timer."""

    __slots__ = ("_scope",)

    def __init__(self) -> None:
        self._scope: trio.CancelScope | None = None

    async def restart(self, task_group: Any, action: Callable[[], Awaitable[None]]) -> None:
        if self._scope is not None:
            self._scope.cancel()
        self._scope = scope = trio.CancelScope()
        task_group._nursery.start_soon(_keep_alive, scope, action)

    async def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None


async def _keep_alive(scope: trio.CancelScope, action: Callable[[], Awaitable[None]]) -> None:
    with scope:
        await action()


def lean_keep_alive_timer() -> None:
    """Make Hypercorn's trio connections use :class:`KeepAliveTimer` (idempotent; in
    effect for connections accepted from then on). Left alone when this Hypercorn's
    trio server has no ``TrioSingleTask`` to replace (its layout changed)."""
    if isinstance(getattr(hypercorn_tcp_server, "TrioSingleTask", None), type):
        setattr(hypercorn_tcp_server, "TrioSingleTask", KeepAliveTimer)  # noqa: B010


_stock_protocol_send: Callable[[Any, Any], Awaitable[None]] | None = None


async def lean_protocol_send(server: Any, event: Any) -> None:
    """Hypercorn's ``TCPServer.protocol_send``, but bytes that the socket takes at once
    leave without a scheduler pass.

    Stock Hypercorn takes its send lock (a checkpoint) and sends through Trio's
    ``send_all`` (another: every Trio socket call that succeeds is followed by a
    schedule point), so each write of a response costs its task two trips through
    the scheduler and the resumption of the whole ASGI call chain twice. Here, when
    no other write of the connection is under way (the lock is free: nothing can be
    interleaved, and the write is atomic under Trio), the bytes go to the
    non-blocking socket directly. What it does not take at once (a full send buffer)
    follows by the stock path, under the lock, shielded once a part is out (the stock
    path is cancellable only before its first byte) from all but the connection's end
    (:func:`~dataplane.http11.send_until_connection_ends` is the stock path here: the
    end of a shutdown's grace cuts it); a broken connection is handled as the stock
    path handles it. TLS streams and every other event take the stock path. Measured
    with ``bench/bff_ab.py``: ``bench/results/lean-send.md``.
    """
    stock = _stock_protocol_send
    assert stock is not None
    lock = getattr(server, "send_lock", None)  # a Hypercorn without one: the stock path
    if type(event) is RawData and lock is not None and not lock.locked():
        stream = server.stream
        sock = getattr(stream, "socket", None)  # a TLS stream has none: stock path
        if isinstance(stream, trio.SocketStream) and sock is not None:
            fd = sock.fileno()
            data = event.data
            if fd >= 0 and not sock.did_shutdown_SHUT_WR and data:
                try:
                    sent = os.write(fd, data)
                except BlockingIOError:
                    sent = 0
                except OSError:  # reset or broken: as send_all's BrokenResourceError
                    await server.protocol.handle(Closed())
                    return
                if sent >= len(data):
                    return
                if sent:  # the rest must follow, cancelled or not: the lock keeps order
                    with trio.CancelScope(shield=True):
                        await stock(server, RawData(data=data[sent:]))
                    return
    await stock(server, event)


def lean_socket_send() -> None:
    """Make Hypercorn's trio connections write with :func:`lean_protocol_send`
    (once; later calls do nothing, so a wrapper installed since stays). Left alone
    when this Hypercorn's ``TCPServer`` has no ``protocol_send`` (its layout changed).
    What it does not write itself goes to the write installed before it, which
    :func:`~dataplane.http11.guard_connections` (called first) makes one that a
    shutdown can end."""
    global _stock_protocol_send
    guard_connections()
    server = getattr(hypercorn_tcp_server, "TCPServer", None)
    current = getattr(server, "protocol_send", None)
    if _stock_protocol_send is not None or server is None or current is None:
        return
    _stock_protocol_send = current
    server.protocol_send = lean_protocol_send


def continue_hook(scope: dict[str, Any], send: Send) -> SendContinue | None:
    """For a request that expects ``100 Continue`` over our HTTP/1.1 protocol: the
    coroutine function that sends it. ``send`` is Hypercorn's ``HTTPStream.app_send``,
    whose stream sends through the connection's protocol."""
    if not any(
        name == b"expect" and value.strip().lower() == b"100-continue"
        for name, value in scope.get("headers", ())
    ):
        return None
    stream = getattr(send, "__self__", None)
    protocol = getattr(getattr(stream, "send", None), "__self__", None)
    if isinstance(protocol, DeferredContinueH11Protocol):
        return protocol.send_continue
    return None


class ContinueBody(TrioBody):
    """A request body that sends ``100 Continue`` (when one is awaited) the first
    time the app reads it, unless the body is already refused (too large)."""

    send_continue: SendContinue | None = None

    async def _invite(self) -> None:
        send_continue, self.send_continue = self.send_continue, None
        if send_continue is not None and self._must_raise is None:
            await send_continue()

    def __await__(self) -> Generator[Any, None, Any]:
        yield from self._invite().__await__()
        return (yield from super().__await__())

    async def __anext__(self) -> bytes:
        await self._invite()
        return await super().__anext__()


class ContinueRequest(TrioRequest):
    body_class = ContinueBody

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        extensions: dict[str, Any] = dict(self.scope.get("extensions") or {})
        hook = extensions.get(CONTINUE_EXTENSION)
        if callable(hook) and isinstance(self.body, ContinueBody):
            self.body.send_continue = hook


# -- closing connections ----------------------------------------------------------------


def ends_response(message: dict[str, Any]) -> bool:
    """Whether ``message`` is the last one of an HTTP response."""
    kind = message.get("type")
    if kind == "http.response.body":
        return not message.get("more_body", False)
    if kind == "http.response.trailers":
        return not message.get("more_trailers", False)
    return False


def shield_final_send(send: Send) -> Send:
    """``send``, with the message that ends a response shielded from cancellation.

    Hypercorn's trio server finishes a response *inside* that ``send``: it hands the
    app ``http.disconnect``, then either closes the socket (``Connection: close``,
    HTTP/1.0, a close-delimited body such as an SSE stream) or arms the keep-alive
    timer. Quart-Trio cancels the request's nursery as soon as it receives that
    ``http.disconnect`` — so, unshielded, the close (or the timer) is cancelled half
    way and the connection is never closed (docs/known-issues.md). Sending bytes is
    already shielded by Hypercorn; this adds only the bookkeeping that follows the
    last one, which does not wait on the peer (``send_eof``/``aclose``, starting a
    timer, one message to the app's receive channel).
    """

    async def send_shielded_at_end(message: dict[str, Any]) -> None:
        if ends_response(message):
            with trio.CancelScope(shield=True):
                await send(message)
        else:
            await send(message)

    return send_shielded_at_end


# -- http.server.request.duration ---------------------------------------------------------

_RULE_PARAMETER = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")


async def _note_route() -> None:
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


class EdgeLogger(hypercorn.logging.Logger):
    """Hypercorn's logger, with its error log (on stderr, the default) going through
    the process's own handler (:func:`dataplane.observability.logs.configure_logging`:
    same format, JSON included) and its access log replaced by ``dataplane.access``:
    Hypercorn's request line would carry the query string, hence stream tokens."""

    def __init__(self, config: hypercorn.config.Config) -> None:
        super().__init__(config)
        if self.error_logger is not None and config.errorlog == "-":
            self.error_logger.handlers = []
            self.error_logger.propagate = True
        if self.access_logger is not None:
            self.access_logger = None
            log.warning(
                "Hypercorn's access log is off: dataplane.access logs every request "
                "(without query strings, which carry stream tokens)"
            )


def route_hypercorn_logs() -> None:
    """Make Hypercorn log through :class:`EdgeLogger` (idempotent; in effect for a
    server whose logger is created from then on: Hypercorn creates it after the app's
    startup)."""
    hypercorn.config.Config.logger_class = EdgeLogger


class RequireTrio:
    """ASGI guard: served under anything but Trio, fail at startup with ``message``."""

    def __init__(self, inner: QuartTrio, message: str) -> None:
        self.inner = inner
        self.message = message
        guard_connections()  # HTTP/1.1 only and connections closed on time: always on
        defer_100_continue()
        lean_keep_alive_timer()
        lean_socket_send()
        route_hypercorn_logs()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        try:
            library = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            library = "unknown"
        if library == "trio":
            if scope["type"] != "http":
                await self.inner(scope, receive, send)  # type: ignore[arg-type]
                return
            hook = continue_hook(scope, send)
            if hook is not None:
                extensions = {**(scope.get("extensions") or {}), CONTINUE_EXTENSION: hook}
                scope = {**scope, "extensions": extensions}
            exchange = Exchange(scope)
            token = _EXCHANGE.set(exchange)
            try:
                observed = shield_final_send(exchange.observe(send))
                await self.inner(scope, receive, observed)  # type: ignore[arg-type]
            except Exception as exc:
                exchange.failed(exc)
                raise
            finally:
                exchange.finish()
                _EXCHANGE.reset(token)
            return
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    # Say why, then end the worker process with a failure status: under
                    # asyncio, Hypercorn would log a failed lifespan and exit 0.
                    print(f"error: {self.message}", file=sys.stderr, flush=True)
                    os._exit(3)
                if message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        raise RuntimeError(self.message)


# -- serving in this process: `dataplane bff`, `dataplane capcom` ----------------------------

BFF_BIND = "127.0.0.1:8000"
CAPCOM_BIND = "127.0.0.1:8001"
KEEP_ALIVE = 75.0  # seconds an idle keep-alive connection is kept (Hypercorn's default: 5)
SHUTDOWN_GRACE = 5.0  # seconds requests in flight may take after SIGTERM, then they are cut
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """How ``dataplane bff`` and ``dataplane capcom`` serve (their flags override it)."""

    bff_bind: str = setting("DATAPLANE_BIND", BFF_BIND)
    capcom_bind: str = setting("CAPCOM_BIND", CAPCOM_BIND)
    keep_alive_seconds: float = setting("DATAPLANE_KEEP_ALIVE_SECONDS", KEEP_ALIVE, minimum=0)
    shutdown_grace_seconds: float = setting(
        "DATAPLANE_SHUTDOWN_GRACE_SECONDS", SHUTDOWN_GRACE, minimum=0
    )


async def serve_app(
    target: str, *, bind: list[str], keep_alive_seconds: float, shutdown_grace_seconds: float
) -> None:
    """Serve the ASGI app ``module:attribute`` with Hypercorn's trio worker in this
    process, until SIGINT or SIGTERM; then stop taking connections, give the requests
    in flight ``shutdown_grace_seconds``, close what is left (writes to clients that
    do not read included), run the app's shutdown and return.

    An exception that escapes the server propagates: the process exits non-zero.
    (Hypercorn's CLI serves from a worker process and its parent exits 0 whatever
    ended the worker: ``docs/known-issues.md`` 5.) Bind errors and an app that fails
    its startup raise too."""
    module, _, attribute = target.partition(":")
    app = getattr(importlib.import_module(module), attribute)
    config = hypercorn.config.Config()
    config.bind = list(bind)
    config.keep_alive_timeout = keep_alive_seconds
    config.graceful_timeout = shutdown_grace_seconds
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:  # before startup: none lost

        async def wait_for_stop() -> None:
            async for signum in signals:
                log.info(
                    "%s: stopping; requests in flight have %g s",
                    signal.Signals(signum).name,
                    shutdown_grace_seconds,
                )
                return

        await hypercorn.trio.serve(app, config, shutdown_trigger=wait_for_stop)
