"""Caller authentication: verified JWTs (the URL tokens are :mod:`dataplane.bff.auth.tokens`).

:class:`JwtVerifier` accepts exactly one algorithm family, pinned by the
configuration: HS256 with ``DATAPLANE_JWT_SECRET``, or RS256 / ES256 with the PEM
``DATAPLANE_JWT_PUBLIC_KEY`` (the key's type picks which), or the public keys of
an identity provider's JWKS (``DATAPLANE_JWT_JWKS_URL``,
:class:`~dataplane.auth.jwks.JwksKeys`: each key with its own asymmetric algorithm,
``kid`` required). ``none`` is never
accepted, ``exp`` is required (30 s leeway) and at most :data:`MAX_EXP` (a time a
cookie's expiry and a float can hold), ``aud``/``iss`` are checked when
configured, and the claims the envelope needs must be present and well typed;
no claim may hold NUL or an unpaired surrogate (one 401 message for all:
:mod:`dataplane.auth.claims`).
Every failure is an :class:`AuthError` (HTTP 401) that says what was wrong.
A token that passed every check is remembered until its ``exp``
(:class:`~dataplane.auth.token_cache.VerifiedTokens`): the browser's next request
with it costs a keyed hash and a dict lookup, not a second verification.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from dataplane.auth.claims import NOT_TEXT, auth_from_claims, claims_are_text
from dataplane.auth.claims import AuthError as AuthError  # re-exported: imported from here
from dataplane.auth.claims import mint_token as mint_token  # re-exported: imported from here
from dataplane.auth.config import JWKS_MAX_AGE_SECONDS, JWKS_REFRESH_SECONDS, JWKS_TIMEOUT_SECONDS
from dataplane.auth.jwks import JwksKeys
from dataplane.auth.token_cache import TokenExpired, VerifiedTokens
from dataplane.core.errors import ConfigError
from dataplane.queue.envelope import Auth

LEEWAY_SECONDS = 30  # clock skew tolerated on exp/nbf/iat
MAX_EXP = 253_402_300_799  # epoch seconds of 9999-12-31T23:59:59Z: the last time we hold
MAX_TOKEN_BYTES = 8192


@dataclass(frozen=True, slots=True)
class JwtVerifier:
    key: Any
    algorithm: str
    audience: str | None = None
    issuer: str | None = None
    leeway: int = LEEWAY_SECONDS
    jwks: JwksKeys | None = None  # keys of an identity provider, instead of ``key``
    cache: VerifiedTokens | None = field(default_factory=VerifiedTokens, compare=False)

    @classmethod
    def from_settings(
        cls,
        *,
        secret: str | None,
        public_key: str | None,
        audience: str | None = None,
        issuer: str | None = None,
        jwks_url: str | None = None,
        jwks_refresh_seconds: float = JWKS_REFRESH_SECONDS,
        jwks_max_age_seconds: float = JWKS_MAX_AGE_SECONDS,
        jwks_timeout_seconds: float = JWKS_TIMEOUT_SECONDS,
    ) -> JwtVerifier:
        if sum(bool(k) for k in (secret, public_key, jwks_url)) > 1:
            raise ConfigError(
                "set one of DATAPLANE_JWT_SECRET, DATAPLANE_JWT_PUBLIC_KEY and "
                "DATAPLANE_JWT_JWKS_URL: exactly one source of keys is accepted"
            )
        if jwks_url:
            keys = JwksKeys(
                jwks_url,
                refresh_seconds=jwks_refresh_seconds,
                max_age_seconds=jwks_max_age_seconds,
                timeout_seconds=jwks_timeout_seconds,
            )
            return cls(None, "JWKS", audience, issuer, jwks=keys)
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
        raise ConfigError(
            "no JWT key: set DATAPLANE_JWT_SECRET, DATAPLANE_JWT_PUBLIC_KEY "
            "or DATAPLANE_JWT_JWKS_URL"
        )

    async def prepare(self, authorization: str) -> None:
        """Before :meth:`verify` (which never does I/O): with a JWKS, make sure the
        key a bearer token names is fetched if it can be (see :class:`JwksKeys`)."""
        if self.jwks is None:
            return
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and 0 < len(token.strip()) <= MAX_TOKEN_BYTES:
            await self.jwks.prepare(token.strip())

    def verify(self, token: str) -> Auth:
        """Verify a bearer token and turn its claims into an :class:`Auth`."""
        if not token or len(token) > MAX_TOKEN_BYTES:
            raise AuthError("missing or oversized token")
        key, algorithm = self.key, self.algorithm
        if self.jwks is not None:
            key, algorithm = self.jwks.key_for(token)
        cache = self.cache
        if cache is not None:
            digest = cache.digest(token)
            try:
                remembered = cache.get(digest, key)
            except TokenExpired:
                raise AuthError("token expired") from None
            if remembered is not None:
                return remembered
        claims = self._decode(token, key, algorithm)
        auth = auth_from_claims(claims)
        if cache is not None:  # exp is a verified number here (required, checked)
            cache.put(digest, auth, float(claims["exp"]) + self.leeway, key)
        return auth

    def claims(self, token: str) -> dict[str, Any]:
        """Verify a bearer token as :meth:`verify` does (signature, ``exp``, ``sub``,
        audience and issuer) and return its claims, every string in them storable text,
        without requiring the envelope's claims: the console's operators need none of
        them (it reads ``roles``). Not remembered: each call verifies again."""
        if not token or len(token) > MAX_TOKEN_BYTES:
            raise AuthError("missing or oversized token")
        key, algorithm = self.key, self.algorithm
        if self.jwks is not None:
            key, algorithm = self.jwks.key_for(token)
        claims = self._decode(token, key, algorithm)
        if not claims_are_text(claims):
            raise AuthError(NOT_TEXT)
        return claims

    def _decode(self, token: str, key: Any, algorithm: str) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
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
            raise AuthError(f"token algorithm not accepted (expected {algorithm})") from None
        except jwt.PyJWTError as exc:
            raise AuthError(f"invalid token: {exc}") from None
        if not claims["exp"] <= MAX_EXP:  # a number here: PyJWT checked it is one
            raise AuthError("invalid token: its exp is after the year 9999")
        return claims
