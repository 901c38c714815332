"""The hooks every app of ours installs: errors as the JSON body, refusals before the
body closing the connection, needless escapes refused, the route noted for metrics.

:func:`install_error_handlers` makes every error (ours, and Quart's 404/405/413/415...)
answer :class:`~dataplane.http.errors.ApiError`'s body, and closes a connection whose
request body was left unread by the refusal (reusing it would stall both sides); a path
that percent-encodes what needs no encoding is a 400 (:mod:`dataplane.http.paths`).
(A path with a doubled slash is an unknown route, the JSON 404, once
:mod:`dataplane.compat.quart_trio` has unmerged the app's slashes.)
"""

from __future__ import annotations

from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from dataplane.http.errors import ApiError, body_unread
from dataplane.http.exchange import note_route
from dataplane.http.paths import needless_escape


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
    app.before_request(note_route)
