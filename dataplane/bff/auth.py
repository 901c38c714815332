"""Caller authentication: verified JWTs (the URL tokens are :mod:`dataplane.bff.tokens`).

:class:`JwtVerifier` accepts exactly one algorithm family, pinned by the
configuration: HS256 with ``DATAPLANE_JWT_SECRET``, or RS256 / ES256 with the PEM
``DATAPLANE_JWT_PUBLIC_KEY`` (the key's type picks which), or the public keys of
an identity provider's JWKS (``DATAPLANE_JWT_JWKS_URL``, :class:`JwksKeys`: each key
with its own asymmetric algorithm, ``kid`` required). ``none`` is never
accepted, ``exp`` is required (30 s leeway), ``aud``/``iss`` are checked when
configured, and the claims the envelope needs must be present and well typed;
no claim may hold NUL or an unpaired surrogate (one 401 message for all).
Every failure is an :class:`AuthError` (HTTP 401) that says what was wrong.
A token that passed every check is remembered until its ``exp``
(:class:`~dataplane.bff.token_cache.VerifiedTokens`): the browser's next request
with it costs a keyed hash and a dict lookup, not a second verification.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt
import trio
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from dataplane.bff.config import JWKS_MAX_AGE_SECONDS, JWKS_REFRESH_SECONDS, JWKS_TIMEOUT_SECONDS
from dataplane.bff.token_cache import TokenExpired, VerifiedTokens
from dataplane.envelope import Auth
from dataplane.errors import ConfigError, DataPlaneError, InvalidArgument

LEEWAY_SECONDS = 30  # clock skew tolerated on exp/nbf/iat
MAX_TOKEN_BYTES = 8192
MAX_JWKS_BYTES = 1024 * 1024  # a key set larger than this is refused (kept: the old one)
MAX_SKIPS_LOGGED = 10  # unusable JWKS entries named in the one log line per document
# The asymmetric signature algorithms a JWKS key may carry (or have inferred from its
# type); anything else — "none", HS*, a list — makes that entry unusable, not the set.
JWKS_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)

log = logging.getLogger(__name__)


class AuthError(DataPlaneError):
    """The caller could not be authenticated (HTTP 401)."""


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
        try:
            claims = jwt.decode(
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
        auth = auth_from_claims(claims)
        if cache is not None:  # exp is a verified number here (required, checked)
            cache.put(digest, auth, float(claims["exp"]) + self.leeway, key)
        return auth


class JwksKeys:
    """The signing keys of an identity provider, from its JWKS URL, cached.

    * A token must name its key (``kid`` header); each key is used only with its own
      asymmetric algorithm (symmetric ``oct`` keys and ``enc`` keys are ignored).
    * Verification reads the cache only (:meth:`key_for`, no I/O). :meth:`prepare`,
      awaited before it, fetches the set when a token names a ``kid`` not in the cache
      — at most once per ``refresh_seconds``, concurrent requests sharing one fetch —
      or when the cache is older than ``max_age_seconds`` (so a key the provider
      retired stops being accepted).
    * The fetched set replaces the cache: during a rotation the provider publishes
      both keys, and both are accepted. A failed fetch (``timeout_seconds`` per try,
      a document of at most ``MAX_JWKS_BYTES``) keeps the cache as it was and counts
      toward the refresh interval.
    * One bad entry costs only itself: an entry that is not a usable signing key of
      :data:`JWKS_ALGORITHMS` (an ``alg`` that is not one of them — ``none``, ``HS256``,
      a list —, no ``kid``, a key that does not parse or does not fit its ``alg``) is
      skipped and the others are kept. What was skipped, and why, is logged once per
      document (a fetch of the same document again logs nothing).
    """

    def __init__(
        self,
        url: str,
        *,
        refresh_seconds: float = JWKS_REFRESH_SECONDS,
        max_age_seconds: float = JWKS_MAX_AGE_SECONDS,
        timeout_seconds: float = JWKS_TIMEOUT_SECONDS,
    ) -> None:
        if not url.startswith(("https://", "http://")):
            raise ConfigError("DATAPLANE_JWT_JWKS_URL must be an http(s) URL")
        self.url = url
        self.refresh_seconds = refresh_seconds
        self.max_age_seconds = max_age_seconds
        self.timeout_seconds = timeout_seconds
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None  # trio clock, successful fetch
        self._tried_at: float | None = None  # trio clock, any attempt
        self._lock = trio.Lock()
        self._reported: bytes | None = None  # digest of the last document logged about
        self.fetches = 0  # attempts, for operators and tests
        self.skipped = 0  # entries of the current document that were not usable

    def key_for(self, token: str) -> tuple[Any, str]:
        """The cached key and algorithm for ``token`` (AuthError if there is none)."""
        kid = _kid_of(token)
        jwk = self._keys.get(kid)
        if jwk is None:
            raise AuthError("token key id (kid) is not one of the identity provider's keys")
        return jwk.key, str(jwk.algorithm_name)

    async def prepare(self, token: str) -> None:
        """Fetch the key set if ``token``'s ``kid`` is unknown or the cache is stale,
        within the refresh interval's allowance; never raises for a bad token."""
        try:
            kid = _kid_of(token)
        except AuthError:
            return  # verify() says what is wrong with it
        if kid in self._keys and not self._stale():
            return
        async with self._lock:  # one fetch at a time; the others re-check after it
            if kid in self._keys and not self._stale():
                return
            now = trio.current_time()
            if self._tried_at is not None and now - self._tried_at < self.refresh_seconds:
                return  # refreshed moments ago: an unknown kid stays unknown until later
            self._tried_at = now
            await self.refresh()

    async def refresh(self) -> None:
        """Fetch the key set now (bounded by ``timeout_seconds``); keep the old on failure."""
        self.fetches += 1
        try:
            with trio.fail_after(self.timeout_seconds):
                body = await self._fetch()
            keys, skipped = usable_keys(json.loads(body))
        except (httpx.HTTPError, trio.TooSlowError, ValueError, RecursionError) as exc:
            log.warning(
                "JWKS fetch from %s failed (keeping %d key(s)): %r", self.url, len(self._keys), exc
            )
            return
        self._keys = keys
        self._fetched_at = trio.current_time()
        self.skipped = len(skipped)
        digest = hashlib.sha256(body).digest()
        if skipped and digest != self._reported:
            named = skipped[:MAX_SKIPS_LOGGED]
            if len(skipped) > len(named):
                named.append(f"and {len(skipped) - len(named)} more")
            log.warning(
                "JWKS from %s: skipped %d unusable entr%s, kept %d key(s): %s",
                self.url,
                len(skipped),
                "y" if len(skipped) == 1 else "ies",
                len(keys),
                "; ".join(named),
            )
        self._reported = digest

    async def _fetch(self) -> bytes:
        """The document's bytes: a 2xx answer of at most ``MAX_JWKS_BYTES``."""
        async with (
            httpx.AsyncClient(timeout=self.timeout_seconds) as client,
            client.stream("GET", self.url, headers={"Accept": "application/json"}) as resp,
        ):
            resp.raise_for_status()
            body = bytearray()
            async for chunk in resp.aiter_bytes():
                body += chunk
                if len(body) > MAX_JWKS_BYTES:
                    raise ValueError(f"the JWKS document is over {MAX_JWKS_BYTES} bytes")
            return bytes(body)

    def _stale(self) -> bool:
        return (
            self._fetched_at is None
            or trio.current_time() - self._fetched_at > self.max_age_seconds
        )


def _kid_of(token: str) -> str:
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise AuthError(f"invalid token: {exc}") from None
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise AuthError("token lacks a 'kid' header (the identity provider's key id)")
    return kid


def usable_keys(document: Any) -> tuple[dict[str, jwt.PyJWK], list[str]]:
    """The signing keys of a JWKS document by ``kid``, and why each other entry was
    skipped (one short line each). ``ValueError`` only when it is no JWKS at all."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError("not a JWKS document (no 'keys' list)")
    keys: dict[str, jwt.PyJWK] = {}
    skipped: list[str] = []
    for index, data in enumerate(document["keys"]):
        if isinstance(data, dict) and (data.get("kty") == "oct" or data.get("use") == "enc"):
            continue  # a shared secret or an encryption key: not ours to verify with
        try:
            kid, key = _signing_key(data)
        except _BadEntry as exc:
            skipped.append(f"keys[{index}]{_kid_label(data)}: {exc}")
            continue
        keys[kid] = key
    return keys, skipped


class _BadEntry(Exception):
    """A JWKS entry that is not a usable signing key (why, in one short line)."""


def _kid_label(data: Any) -> str:
    kid = data.get("kid") if isinstance(data, dict) else None
    return f" (kid {kid[:40]!r})" if isinstance(kid, str) else ""


def _signing_key(data: Any) -> tuple[str, jwt.PyJWK]:
    if not isinstance(data, dict):
        raise _BadEntry(f"an entry must be a JSON object, not {type(data).__name__}")
    kid = data.get("kid")
    if not isinstance(kid, str) or not kid:
        raise _BadEntry("no 'kid' (a token names its key by it)")
    alg = data.get("alg")
    if alg is not None and (not isinstance(alg, str) or alg not in JWKS_ALGORITHMS):
        raise _BadEntry(f"'alg' {_short(alg)} is not one of {', '.join(sorted(JWKS_ALGORITHMS))}")
    if not isinstance(data.get("kty"), str):
        raise _BadEntry(f"'kty' {_short(data.get('kty'))} is not a key type")
    try:
        key = jwt.PyJWK(data)
    except (jwt.PyJWTError, ValueError, TypeError) as exc:
        raise _BadEntry(f"not a usable key: {_short(str(exc))}") from None
    if key.algorithm_name not in JWKS_ALGORITHMS:  # inferred from the key type
        raise _BadEntry(f"its algorithm {key.algorithm_name!r} is not accepted")
    return kid, key


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


NOT_TEXT = "token claims must be text: no NUL characters, no unpaired surrogates"


def claims_are_text(value: Any) -> bool:
    """Whether every string in ``value`` (keys included) is storable text: valid
    UTF-8 (no unpaired surrogate) without NUL. Iterative: claims come from a token
    of at most ``MAX_TOKEN_BYTES``, so this is cheap."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return False
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return True


def auth_from_claims(claims: Mapping[str, Any]) -> Auth:
    # Claims end up in the envelope (jsonb), the dedupe and scope keys (UTF-8 hashes)
    # and answers: text that cannot be all three is refused here, one way for all.
    if not claims_are_text(claims):
        raise AuthError(NOT_TEXT)
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
