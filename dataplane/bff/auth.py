"""Caller authentication: verified JWTs, and the signed stream tokens.

:class:`JwtVerifier` accepts exactly one algorithm family, pinned by the
configuration: HS256 with ``DATAPLANE_JWT_SECRET``, or RS256 / ES256 with the PEM
``DATAPLANE_JWT_PUBLIC_KEY`` (the key's type picks which). ``none`` is never
accepted, ``exp`` is required (30 s leeway), ``aud``/``iss`` are checked when
configured, and the claims the envelope needs must be present and well typed.
Every failure is an :class:`AuthError` (HTTP 401) that says what was wrong.

Stream tokens ride in ``streamUrl``/``pollUrl``/blob URLs because EventSource
cannot send headers. They are short-lived HMAC-SHA256-signed tokens bound to one
job id and to the caller's surface, client, scope key and tier, signed with a key of
the BFF's (``DATAPLANE_STREAM_SECRET``, else derived from the JWT secret). They
are not JWTs: a fixed format is cheaper to mint and check on every request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from dataplane.envelope import Auth
from dataplane.errors import ConfigError, DataPlaneError, InvalidArgument

LEEWAY_SECONDS = 30  # clock skew tolerated on exp/nbf/iat
STREAM_TOKEN_TTL = 600  # seconds a stream/poll/blob URL stays valid
STREAM_AUDIENCE = "dataplane-stream"
STREAM_TOKEN_VERSION = "s2"  # s2: bound to the tier as well
MAX_TOKEN_BYTES = 8192


class AuthError(DataPlaneError):
    """The caller could not be authenticated (HTTP 401)."""


@dataclass(frozen=True, slots=True)
class JwtVerifier:
    key: Any
    algorithm: str
    audience: str | None = None
    issuer: str | None = None
    leeway: int = LEEWAY_SECONDS

    @classmethod
    def from_settings(
        cls,
        *,
        secret: str | None,
        public_key: str | None,
        audience: str | None = None,
        issuer: str | None = None,
    ) -> JwtVerifier:
        if secret and public_key:
            raise ConfigError(
                "set DATAPLANE_JWT_SECRET or DATAPLANE_JWT_PUBLIC_KEY, not both: "
                "exactly one algorithm family is accepted"
            )
        if secret:
            if len(secret.encode()) < 32:
                raise ConfigError("DATAPLANE_JWT_SECRET must be at least 32 bytes")
            return cls(secret, "HS256", audience, issuer)
        if public_key:
            try:
                key = load_pem_public_key(public_key.encode())
            except ValueError as exc:
                raise ConfigError(
                    f"DATAPLANE_JWT_PUBLIC_KEY is not a PEM public key: {exc}"
                ) from None
            if isinstance(key, rsa.RSAPublicKey):
                return cls(key, "RS256", audience, issuer)
            if isinstance(key, ec.EllipticCurvePublicKey):
                return cls(key, "ES256", audience, issuer)
            raise ConfigError("DATAPLANE_JWT_PUBLIC_KEY must be an RSA or EC (P-256) key")
        raise ConfigError("no JWT key: set DATAPLANE_JWT_SECRET or DATAPLANE_JWT_PUBLIC_KEY")

    def verify(self, token: str) -> Auth:
        """Verify a bearer token and turn its claims into an :class:`Auth`."""
        if not token or len(token) > MAX_TOKEN_BYTES:
            raise AuthError("missing or oversized token")
        try:
            claims = jwt.decode(
                token,
                self.key,
                algorithms=[self.algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={
                    "require": ["exp", "sub"],
                    "verify_aud": self.audience is not None,
                    "verify_iss": self.issuer is not None,
                },
            )
        except jwt.ExpiredSignatureError:
            raise AuthError("token expired") from None
        except jwt.InvalidAudienceError:
            raise AuthError("token audience not accepted") from None
        except jwt.InvalidIssuerError:
            raise AuthError("token issuer not accepted") from None
        except jwt.MissingRequiredClaimError as exc:
            raise AuthError(f"token lacks the {exc.claim!r} claim") from None
        except jwt.InvalidAlgorithmError:
            raise AuthError(f"token algorithm not accepted (expected {self.algorithm})") from None
        except jwt.PyJWTError as exc:
            raise AuthError(f"invalid token: {exc}") from None
        return auth_from_claims(claims)


def auth_from_claims(claims: Mapping[str, Any]) -> Auth:
    client, staff, branches = claims.get("client"), claims.get("staff"), claims.get("branches")
    if not isinstance(client, str) or not client or "|" in client:
        raise AuthError("token lacks a valid 'client' claim")
    if not isinstance(staff, bool):
        raise AuthError("token lacks a boolean 'staff' claim")
    if not isinstance(branches, list) or not all(isinstance(b, str) and b for b in branches):
        raise AuthError("token lacks a 'branches' claim (a list of branch ids)")
    if "*" in branches and not staff:
        raise AuthError("only staff tokens may carry the '*' branch scope")
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise AuthError("token lacks a valid 'sub' claim")
    email = claims.get("email", "")
    if not isinstance(email, str):
        raise AuthError("token 'email' claim must be a string")
    try:
        return Auth(
            client=client, user_id=sub, actor_email=email, staff=staff, branches=tuple(branches)
        )
    except InvalidArgument as exc:
        raise AuthError(str(exc)) from None


def mint_token(
    secret: str,
    *,
    client: str,
    sub: str,
    staff: bool = False,
    branches: list[str] | None = None,
    email: str | None = None,
    ttl: int = 3600,
    audience: str | None = None,
    issuer: str | None = None,
) -> str:
    """An HS256 token for development and tests (``dataplane token``)."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "sub": sub,
        "client": client,
        "staff": staff,
        "branches": branches if branches is not None else ["*"] if staff else [],
        "email": email or f"{sub}@{client}.example",
        "iat": now,
        "exp": now + ttl,
    }
    if audience:
        claims["aud"] = audience
    if issuer:
        claims["iss"] = issuer
    return jwt.encode(claims, secret, algorithm="HS256")


@dataclass(frozen=True, slots=True)
class StreamGrant:
    job_id: str
    surface: str
    client: str
    scope_key: str
    coalesced: bool
    tier: str = ""  # the BFF's queue suffix: a live token never reads a dev job


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
        if len(parts) != 8 or parts[0] != STREAM_TOKEN_VERSION:
            raise AuthError("invalid stream token: unknown format")
        _v, job_id, surface, client, scope, coalesced, tier, expires = parts
        try:
            expired = int(expires) + LEEWAY_SECONDS < time.time()
        except ValueError:
            raise AuthError("invalid stream token: bad expiry") from None
        if expired:
            raise AuthError("stream token expired")
        return StreamGrant(job_id, surface, client, scope, coalesced == "1", tier)

    def _sign(self, body: bytes) -> bytes:
        return hmac.new(self._key, STREAM_AUDIENCE.encode() + b"|" + body, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not text or not all(c.isalnum() or c in "-_" for c in text):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
