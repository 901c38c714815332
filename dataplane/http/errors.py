"""Errors and the bodies we send: every error answers ``{"error": {"status", "code",
"message"}}``.

* :class:`ApiError`: an HTTP error answered as that body; :func:`install_error_handlers`
  makes every error (ours, and Quart's 404/405/413/415...) answer it, and closes a
  connection whose request body was left unread by the refusal (reusing it would stall
  both sides); a path with a doubled slash is an unknown route (JSON 404), not an HTML
  redirect;
* :func:`json_response`, :func:`prometheus_response`: the bodies we send;
* :func:`require_bearer`: a shared-token check (``/metrics`` with a token).
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any, ClassVar

from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from dataplane.http.paths import needless_escape

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

    async def refuse_needless_escapes() -> None:
        escape = needless_escape(request.scope.get("raw_path") or b"")
        if escape is not None:
            raise ApiError(
                400,
                f"the path percent-encodes {escape}: letters, digits, '-._~' and '/' are"
                " sent as themselves, never encoded",
            )

    app.before_request(refuse_needless_escapes)
    app.register_error_handler(ApiError, api_error)
    app.register_error_handler(HTTPException, http_error)
    app.after_request(close_if_body_unread)
    from dataplane.http.exchange import note_route  # it imports ApiError from here

    app.before_request(note_route)


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


# -- Expect: 100-continue, only once the app reads the body ---------------------------
