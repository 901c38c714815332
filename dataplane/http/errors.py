"""Errors and the bodies we send: every error answers ``{"error": {"status", "code",
"message"}}``.

* :class:`ApiError`: an HTTP error answered as that body (every error answers it:
  :func:`~dataplane.http.hooks.install_error_handlers`); :func:`body_unread`, whether
  a refusal left the request's body on the connection;
* :func:`json_response`, :func:`prometheus_response`: the bodies we send;
* :func:`require_bearer`: a shared-token check (``/metrics`` with a token).
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any, ClassVar

from quart import Response, request

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
    # Our request body says (dataplane.compat.quart_trio); any other is taken as unread.
    return getattr(request.body, "read_to_the_end", None) is not True


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
