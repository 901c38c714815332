"""What the HTTP edge answers on a route of the OpenAPI document besides the route's own
statuses: added to every operation by :func:`with_edge_statuses`, so that every status a
route can answer is in ``/openapi.json``.

* ``400``: a path that percent-encodes what needs no encoding (a letter, a digit,
  ``-._~``) or a slash or backslash, refused before routing (:mod:`dataplane.http.paths`):
  on every route with a path parameter, where a client's value can carry one (a job id
  with a backslash is sent as ``%5C``).
* ``408``: a request body that did not arrive within the app's ``BODY_TIMEOUT``, on
  every route that reads one.
* ``431``: a request head over Hypercorn's 16 KiB (``h11_max_incomplete_size``; an
  oversized ``Authorization``), refused before the request is parsed
  (:mod:`dataplane.compat.http11`), on every route.

Each with the JSON error body (``Error``). A status the route documents already keeps
its own description.
"""

from __future__ import annotations

from typing import Any

ERROR_BODY = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
PATH_ESCAPE = (
    "The path percent-encodes what is sent as itself (a letter, digit, '-._~') or a slash"
    " or backslash: refused before the route (a path parameter is sent with only the"
    " escapes it needs)"
)
BODY_LATE = "The request body did not arrive in time (10 s)"
HEAD_TOO_LARGE = "The request's head is over 16 KiB (an oversized Authorization, say)"


def with_edge_statuses(paths: dict[str, Any]) -> dict[str, Any]:
    """``paths`` with the edge's statuses added to each operation (new dicts: the
    document's shared parts are left as they are)."""
    out: dict[str, Any] = {}
    for path, item in paths.items():
        out[path] = {
            method: _with_edge(operation, has_parameter="{" in path)
            for method, operation in item.items()
        }
    return out


def _with_edge(operation: dict[str, Any], *, has_parameter: bool) -> dict[str, Any]:
    added = {"431": HEAD_TOO_LARGE}
    if has_parameter:
        added["400"] = PATH_ESCAPE
    if "requestBody" in operation:
        added["408"] = BODY_LATE
    responses = dict(operation.get("responses", {}))
    for status, text in added.items():
        responses.setdefault(status, {"description": text, "content": ERROR_BODY})
    return {**operation, "responses": dict(sorted(responses.items()))}
