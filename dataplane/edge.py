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
  a sized response's head leaves in the same socket write as its body;
* :func:`server_span`: a route wrapped in an HTTP server span;
* :class:`RequireTrio` also records ``http.server.request.duration`` for every request,
  to the end of its response, with the route template Quart matched (:func:`_note_route`);
* :func:`log_to_stderr`: our loggers to stderr next to Hypercorn's own.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, ClassVar

import h11
import hypercorn.protocol
import sniffio
import trio
from hypercorn.events import RawData
from hypercorn.protocol.events import StreamClosed
from hypercorn.protocol.h11 import H11Protocol
from opentelemetry.trace import SpanKind
from quart import Response, request
from quart_trio import QuartTrio
from quart_trio.wrappers.request import TrioBody, TrioRequest
from werkzeug.exceptions import HTTPException

from dataplane.observability.metrics import instruments
from dataplane.observability.tracing import tracer

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


Route = Callable[..., Awaitable[Response]]


def server_span(route: str) -> Callable[[Route], Route]:
    """Wrap a route in an HTTP server span (status from the response or the error)."""

    def decorate(fn: Route) -> Route:
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


def log_to_stderr(*names: str) -> None:
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


class DeferredContinueH11Protocol(H11Protocol):
    """Hypercorn's HTTP/1.1 protocol, but ``100 Continue`` waits for the app.

    Stock Hypercorn sends ``100 Continue`` as soon as it has parsed the headers of a
    request carrying ``Expect: 100-continue``, before the app has even seen it: a
    client is invited to send its body to be refused (401) anyway. Here the 100 goes
    out when the app first reads the body (:meth:`send_continue`), and never when it
    answers first (a response ends the client's wait, RFC 9110 §10.1.1). And a sized
    response's head is written together with its body (one socket write fewer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection = _DeferredContinueConnection(self.connection)  # type: ignore[assignment]
        self._head = b""  # a response's status line and headers, not sent yet

    async def _send_h11_event(self, event: Any) -> None:
        # A sized response's head leaves with its body (or its end): one socket write
        # instead of two. Its body follows at once; a stream's head (no Content-Length:
        # its first event may be minutes away) is never held.
        if type(event) is _H11.Response and any(
            name == b"content-length" for name, _ in event.headers
        ):
            try:
                self._head += self.connection.send(event) or b""
            except _H11.LocalProtocolError:
                if self.connection.their_state != _H11.ERROR:
                    raise
            return
        head, self._head = self._head, b""
        try:
            data = head + (self.connection.send(event) or b"")
        except _H11.LocalProtocolError:
            if self.connection.their_state != _H11.ERROR:
                raise
            data = head
        if data:
            await self.send(RawData(data=data))

    async def stream_send(self, event: Any) -> None:
        if isinstance(event, StreamClosed) and self._head:  # never lose a held head
            head, self._head = self._head, b""
            await self.send(RawData(data=head))
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

EXCHANGE_EXTENSION = "dataplane.exchange"  # ASGI scope extension: what the metric needs
_RULE_PARAMETER = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")


async def _note_route() -> None:
    """Before a matched route runs: its template (``/api/{surface_id}/q``) for the metric."""
    exchange = (request.scope.get("extensions") or {}).get(EXCHANGE_EXTENSION)
    rule = request.url_rule
    if isinstance(exchange, dict) and rule is not None:
        exchange["route"] = route_template(rule.rule)


@functools.cache
def route_template(rule: str) -> str:
    """A Quart rule as an ``http.route`` template: ``/q/<job_id>`` -> ``/q/{job_id}``."""
    return _RULE_PARAMETER.sub(r"{\1}", rule)


def _record_request(
    scope: dict[str, Any], exchange: dict[str, Any], seconds: float, error: str | None
) -> None:
    attrs: dict[str, Any] = {"http.request.method": scope.get("method", "_OTHER")}
    if "route" in exchange:
        attrs["http.route"] = exchange["route"]
    status = exchange.get("status")
    if status is not None:
        attrs["http.response.status_code"] = status
        if status >= 500:
            error = error or str(status)
    if status is None or error is not None:
        attrs["error.type"] = error or "_OTHER"  # no response: the client went away
    instruments().http_duration.record(seconds, attrs)


async def _measured(inner: QuartTrio, scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """Serve one HTTP request and record its ``http.server.request.duration``."""
    started = time.perf_counter()
    exchange: dict[str, Any] = {}
    scope = {
        **scope,
        "extensions": {**(scope.get("extensions") or {}), EXCHANGE_EXTENSION: exchange},
    }

    async def send_noting_status(message: dict[str, Any]) -> None:
        if message.get("type") == "http.response.start":
            exchange["status"] = message.get("status")
        await send(message)

    error: str | None = None
    try:
        await inner(scope, receive, send_noting_status)  # type: ignore[arg-type]
    except BaseException as exc:
        error = type(exc).__qualname__
        raise
    finally:
        _record_request(scope, exchange, time.perf_counter() - started, error)


class RequireTrio:
    """ASGI guard: served under anything but Trio, fail at startup with ``message``."""

    def __init__(self, inner: QuartTrio, message: str) -> None:
        self.inner = inner
        self.message = message
        defer_100_continue()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        try:
            library = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            library = "unknown"
        if library == "trio":
            if scope["type"] == "http":
                hook = continue_hook(scope, send)
                if hook is not None:
                    extensions = {**(scope.get("extensions") or {}), CONTINUE_EXTENSION: hook}
                    scope = {**scope, "extensions": extensions}
                send = shield_final_send(send)
                await _measured(self.inner, scope, receive, send)
                return
            await self.inner(scope, receive, send)  # type: ignore[arg-type]
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
