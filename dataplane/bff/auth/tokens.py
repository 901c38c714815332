"""The signed tokens of stream, poll and blob URLs.

EventSource cannot send headers, so ``streamUrl``/``pollUrl``/blob URLs carry a
short-lived HMAC-SHA256-signed token bound to one job id and to the caller's
surface, client, scope key and tier, signed with a key of the BFF's
(``DATAPLANE_STREAM_SECRET``, else derived from the JWT secret). They are not JWTs:
a fixed format is cheaper to mint and check on every request.

A token also names its *requester* (:func:`requester_of`: a digest of the caller's
client and user id, never the id itself), so a withdrawal (``DELETE``) is counted once
per requester, whether it comes with the URL token or the bearer JWT. Tokens of the
previous format (``s2``, minted before requesters were named) are still honoured
until they expire; they stand for a requester of their own.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

from dataplane.auth.verifier import LEEWAY_SECONDS, MAX_TOKEN_BYTES, AuthError
from dataplane.core.errors import ConfigError, InvalidArgument

STREAM_TOKEN_TTL = 600  # seconds a stream/poll/blob URL stays valid
STREAM_AUDIENCE = "dataplane-stream"
STREAM_TOKEN_VERSION = "s3"  # s2: bound to the tier as well; s3: and the requester
PREVIOUS_VERSION = "s2"
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class StreamGrant:
    job_id: str
    surface: str
    client: str
    scope_key: str
    coalesced: bool
    tier: str = ""  # the BFF's queue suffix: a live token never reads a dev job
    requester: str = ""  # requester_of(the caller): who withdraws with this token


def requester_of(client: str, user_id: str) -> str:
    """Who a request is from, as a withdrawal counts it: a digest of the caller's client
    and user id (a token carries it; user ids are not put in URLs)."""
    digest = hashlib.sha256(f"requester|{client}|{user_id}".encode()).digest()
    return _b64(digest[:16])


class StreamTokens:
    """Sign and check the job-bound tokens carried in stream/poll/blob URLs."""

    def __init__(self, key: bytes, *, ttl: int = STREAM_TOKEN_TTL) -> None:
        if len(key) < 32:
            raise ConfigError("the stream-token key must be at least 32 bytes")
        self._key = key
        self.ttl = ttl

    @classmethod
    def from_settings(cls, stream_secret: str | None, jwt_secret: str | None) -> StreamTokens:
        if stream_secret:
            return cls(hashlib.sha256(b"dataplane-stream|" + stream_secret.encode()).digest())
        if jwt_secret:
            return cls(hashlib.sha256(b"dataplane-stream|" + jwt_secret.encode()).digest())
        # A public-key deployment without a stream secret: tokens are per process.
        return cls(secrets.token_bytes(32))

    def mint(self, grant: StreamGrant) -> str:
        """``base64url(fields) . base64url(HMAC-SHA256)`` — compact and cheap to check."""
        expires = int(time.time()) + self.ttl
        fields = [
            STREAM_TOKEN_VERSION,
            grant.job_id,
            grant.surface,
            grant.client,
            grant.scope_key,
            "1" if grant.coalesced else "0",
            grant.tier,
            str(expires),
            grant.requester,
        ]
        if any("|" in f for f in fields):
            raise InvalidArgument("stream token fields may not contain '|'")
        body = "|".join(fields).encode()
        return _b64(body) + "." + _b64(self._sign(body))

    def check(self, token: str) -> StreamGrant:
        if not token or len(token) > MAX_TOKEN_BYTES:
            raise AuthError("missing or oversized stream token")
        head, _, sig = token.partition(".")
        try:
            body, mac = _unb64(head), _unb64(sig)
        except ValueError:
            raise AuthError("invalid stream token: not base64url") from None
        if not hmac.compare_digest(mac, self._sign(body)):
            raise AuthError("invalid stream token: bad signature")
        parts = body.decode("utf-8", "replace").split("|")
        if len(parts) == 8 and parts[0] == PREVIOUS_VERSION:  # no requester: its own
            parts.append("t" + _b64(hashlib.sha256(body).digest()[:15]))
        elif len(parts) != 9 or parts[0] != STREAM_TOKEN_VERSION:
            raise AuthError("invalid stream token: unknown format")
        _v, job_id, surface, client, scope, coalesced, tier, expires, requester = parts
        try:
            expired = int(expires) + LEEWAY_SECONDS < time.time()
        except ValueError:
            raise AuthError("invalid stream token: bad expiry") from None
        if expired:
            raise AuthError("stream token expired")
        return StreamGrant(job_id, surface, client, scope, coalesced == "1", tier, requester)

    def _sign(self, body: bytes) -> bytes:
        return hmac.new(self._key, STREAM_AUDIENCE.encode() + b"|" + body, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if _BASE64URL.fullmatch(text) is None:
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
