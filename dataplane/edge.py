"""The HTTP edge shared by the BFF and the capcom receiver (Quart-Trio on Hypercorn).

* :class:`ApiError`: an HTTP error answered as ``{"error": {"status", "code",
  "message"}}``; :func:`install_error_handlers` makes every error (ours, and
  Quart's 404/405/413/415...) answer that body, and closes a connection whose
  request body was left unread by the refusal (reusing it would stall both sides);
* :func:`json_response`, :func:`prometheus_response`: the bodies we send;
* :class:`RequireTrio`: the ASGI guard that fails at startup, naming ``-k trio``,
  when Hypercorn serves the app under asyncio;
* :func:`server_span`: a route wrapped in an HTTP server span;
* :func:`log_to_stderr`: our loggers to stderr next to Hypercorn's own.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import sniffio
from opentelemetry.trace import SpanKind
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

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

    app.register_error_handler(ApiError, api_error)
    app.register_error_handler(HTTPException, http_error)
    app.after_request(close_if_body_unread)


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


class RequireTrio:
    """ASGI guard: served under anything but Trio, fail at startup with ``message``."""

    def __init__(self, inner: QuartTrio, message: str) -> None:
        self.inner = inner
        self.message = message

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
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
                    print(f"error: {self.message}", file=sys.stderr, flush=True)
                    os._exit(3)
                if message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        raise RuntimeError(self.message)
