"""The signing keys of an identity provider, fetched from its JWKS URL and cached
(``DATAPLANE_JWT_JWKS_URL``): see :class:`JwksKeys` for when it fetches, what it
keeps on a failure and which entries it skips. Verification itself (one algorithm
per key, ``exp`` and the claims) is :class:`~dataplane.auth.verifier.JwtVerifier`'s.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import httpx
import jwt
import trio

from dataplane.auth.claims import AuthError
from dataplane.auth.config import JWKS_MAX_AGE_SECONDS, JWKS_REFRESH_SECONDS, JWKS_TIMEOUT_SECONDS
from dataplane.core.errors import ConfigError

MAX_JWKS_BYTES = 1024 * 1024  # a key set larger than this is refused (kept: the old one)
MAX_SKIPS_LOGGED = 10  # unusable JWKS entries named in the one log line per document
# The asymmetric signature algorithms a JWKS key may carry (or have inferred from its
# type); anything else — "none", HS*, a list — makes that entry unusable, not the set.
JWKS_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)

log = logging.getLogger(__name__)


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
