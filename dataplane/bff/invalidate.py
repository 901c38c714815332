"""``POST /api/<surface>/invalidate``: the BFF's write paths drop cached results.

The seed keeps writes in the BFF; after one, the results cached about what it
changed must go. The body is ``{"tags": ["u:42", "c:acme", ...]}`` (1 to
``MAX_TAGS`` tags, each non-empty text without NUL or unpaired surrogates, at most
``MAX_TAG_LENGTH`` characters; no other field); every tag is broadcast over
``dataplane_invalidate`` (one notify per tag, the tag as its payload: see
:mod:`dataplane.queue.types`) and dropped by every worker's cache. Allowed to

* a staff caller, for its own client's ``c:<client>`` tag and for ``u:<user>`` tags,
  which are scoped to its client: ``u:42`` is broadcast as ``c:<client>|u:42`` and
  drops only that client's entries about user 42;
* a service holding ``DATAPLANE_INVALIDATE_TOKEN`` (as its bearer), for any tag, as
  given: ``u:42`` drops user 42's entries of every client. The Python call for code in
  the BFF process, ``QueueClient.invalidate``, is the same (scope a ``u:`` tag with
  :func:`~dataplane.queue.types.client_tag` to drop one client's only).

Answers ``202 {"invalidated": [...]}`` with the tags as given; 400 for a body or a
tag that is not one, 403 for a tag the caller may not drop.
"""

from __future__ import annotations

import hmac

from quart import Blueprint, Response, request

from dataplane.bff.jobs import bearer, queue_call
from dataplane.bff.plane import BffServices
from dataplane.bff.routes import current_services, json_body, surface_of
from dataplane.core.errors import InvalidArgument
from dataplane.http import ApiError, json_response, server_span
from dataplane.queue.types import check_tag, client_tag

MAX_TAGS = 100
MAX_TAG_LENGTH = 200  # characters, as given (before a staff caller's client scope)

invalidation = Blueprint("invalidation", __name__)


@invalidation.post("/api/<surface_id>/invalidate")
@server_span("/api/{surface}/invalidate")
async def invalidate(surface_id: str) -> Response:
    services = current_services()
    surface_of(services, surface_id)
    if request.mimetype != "application/json":
        raise ApiError(415, "send the body as application/json")
    service = _service_token(services.config.invalidate_token)
    client = None if service else _staff_client(services)
    tags = _tags_of(await json_body())
    broadcast = [_broadcast_tag(tag, client) for tag in tags]
    await queue_call(services.queue.invalidate(*broadcast))
    return json_response({"invalidated": tags}, 202)


def _tags_of(body: object) -> list[str]:
    usage = f'send {{"tags": [...]}} with 1 to {MAX_TAGS} cache tags'
    if not isinstance(body, dict) or set(body) != {"tags"}:
        raise ApiError(400, usage)
    tags = body["tags"]
    if not isinstance(tags, list) or not 0 < len(tags) <= MAX_TAGS:
        raise ApiError(400, usage)
    for index, tag in enumerate(tags):
        try:
            check_tag(tag)
        except InvalidArgument as exc:
            raise ApiError(400, f"tags[{index}]: {exc}") from None
        if len(tag) > MAX_TAG_LENGTH:
            raise ApiError(
                400, f"tags[{index}]: a cache tag is at most {MAX_TAG_LENGTH} characters"
            )
    return tags


def _broadcast_tag(tag: str, client: str | None) -> str:
    """What goes on the wire for ``tag``: as given for a service (``client`` None);
    for a staff caller its own ``c:`` tag, or a ``u:`` tag scoped to its client."""
    if client is None:
        return tag
    if tag.startswith("u:"):
        try:
            return check_tag(client_tag(client, tag))
        except InvalidArgument as exc:  # a client id as long as a token allows
            raise ApiError(400, f"{tag!r} scoped to your client: {exc}") from None
    if tag.startswith("c:"):
        if tag != f"c:{client}":
            raise ApiError(403, f"you may only invalidate your own client's tag c:{client}")
        return tag
    raise ApiError(403, "staff callers may invalidate c:<own client> and u:<user> tags")


def _service_token(expected: str | None) -> bool:
    if not expected:
        return False
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode("utf-8", "surrogateescape"), expected.encode()
    )


def _staff_client(services: BffServices) -> str:
    auth = bearer(services)
    if not auth.staff:
        raise ApiError(403, "invalidation is for staff (or a service token)")
    return auth.client
