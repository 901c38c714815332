"""``POST /api/<surface>/invalidate``: the BFF's write paths drop cached results.

The seed keeps writes in the BFF; after one, the results cached about what it
changed must go. The body is ``{"tags": ["u:42", "c:acme", ...]}``; every tag is
broadcast over ``dataplane_invalidate`` and dropped by every worker's cache (the
Python call for code in the BFF process is ``QueueClient.invalidate``). Allowed to
a staff caller, for ``u:`` tags and its own client's ``c:`` tag, or to a service
holding ``DATAPLANE_INVALIDATE_TOKEN`` (as its bearer), for any tag. Answers
``202 {"invalidated": [...]}``.
"""

from __future__ import annotations

import hmac

from quart import Blueprint, Response, request

from dataplane.bff.jobs import bearer, queue_call
from dataplane.bff.plane import Plane
from dataplane.bff.routes import json_body, plane, surface_of
from dataplane.edge import ApiError, json_response, server_span

MAX_TAGS = 100
MAX_TAG_LENGTH = 200

invalidation = Blueprint("invalidation", __name__)


@invalidation.post("/api/<surface_id>/invalidate")
@server_span("/api/{surface}/invalidate")
async def invalidate(surface_id: str) -> Response:
    p = plane()
    surface_of(p, surface_id)
    if request.mimetype != "application/json":
        raise ApiError(415, "send the body as application/json")
    service = _service_token(p.config.invalidate_token)
    client = None if service else _staff_client(p)
    body = await json_body()
    tags = body.get("tags") if isinstance(body, dict) else None
    if not isinstance(tags, list) or not tags or len(tags) > MAX_TAGS:
        raise ApiError(400, f'send {{"tags": [...]}} with 1 to {MAX_TAGS} cache tags')
    for tag in tags:
        if not isinstance(tag, str) or not tag or len(tag) > MAX_TAG_LENGTH or "\x00" in tag:
            raise ApiError(400, f"tags: {tag!r} is not a cache tag")
        if client is not None and tag.startswith("c:") and tag != f"c:{client}":
            raise ApiError(403, f"you may only invalidate your own client's tag c:{client}")
        if client is not None and not tag.startswith(("c:", "u:")):
            raise ApiError(403, "staff callers may invalidate c:<own client> and u:<user> tags")
    await queue_call(p.queue.invalidate(*tags))
    return json_response({"invalidated": tags}, 202)


def _service_token(expected: str | None) -> bool:
    if not expected:
        return False
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), expected.encode()
    )


def _staff_client(p: Plane) -> str:
    auth = bearer(p)
    if not auth.staff:
        raise ApiError(403, "invalidation is for staff (or a service token)")
    return auth.client
