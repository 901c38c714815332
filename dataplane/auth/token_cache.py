"""Verified bearer tokens, remembered until they expire.

Verifying a JWT (base64, JSON, an HMAC or a signature, the claim checks, the
envelope's ``Auth`` with its scope key) is the largest piece of a POST's own CPU;
a browser sends the same token on every request. :class:`VerifiedTokens` keeps
the :class:`~dataplane.queue.envelope.Auth` of a token that passed every check, under a
keyed BLAKE2b digest of the *whole* token (a per-process random key: digests are
not predictable from outside, so a lookup's timing says nothing about any stored
token), until the token's ``exp`` (plus the verifier's leeway). Invariants:

* only a token that passed full verification is stored; a failure is never cached;
* a hit past ``exp + leeway`` is refused as expired and forgotten;
* at most ``size`` tokens: the oldest stored goes first;
* with a JWKS, an entry remembers the key that verified it and holds only while the
  identity provider's key set still has that key (a retired key stops being accepted).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dataplane.queue.envelope import Auth

CACHE_SIZE = 4096  # verified tokens one BFF process remembers


@dataclass(frozen=True, slots=True)
class TokenCacheStatistics:
    size: int
    hits: int
    misses: int
    expired: int
    evicted: int


@dataclass(frozen=True, slots=True)
class _Entry:
    auth: Auth
    valid_until: float  # epoch seconds: exp + leeway
    key: Any  # the key that verified it (JWKS: must still be current)


class VerifiedTokens:
    """A bounded map token digest -> verified ``Auth`` (see module doc)."""

    def __init__(self, size: int = CACHE_SIZE, *, clock: Callable[[], float] = time.time) -> None:
        if size < 1:
            raise ValueError(f"the token cache needs room for at least one token, got {size}")
        self.size = size
        self.clock = clock
        self._digest_key = secrets.token_bytes(32)
        self._entries: dict[bytes, _Entry] = {}
        self._hits = self._misses = self._expired = self._evicted = 0

    def digest(self, token: str) -> bytes:
        return hashlib.blake2b(
            token.encode("utf-8", "surrogatepass"), key=self._digest_key, digest_size=32
        ).digest()

    def get(self, digest: bytes, key: Any = None) -> Auth | None:
        """The remembered ``Auth``; None when unknown, verified by another key, or expired
        (:meth:`expired_hit` tells the last two apart for the caller's message)."""
        entry = self._entries.get(digest)
        if entry is None or entry.key is not key:
            self._misses += 1
            return None
        if self.clock() >= entry.valid_until:
            del self._entries[digest]
            self._expired += 1
            raise TokenExpired
        self._hits += 1
        return entry.auth

    def put(self, digest: bytes, auth: Auth, valid_until: float, key: Any = None) -> None:
        entries = self._entries
        entries.pop(digest, None)
        while len(entries) >= self.size:
            del entries[next(iter(entries))]  # the oldest stored
            self._evicted += 1
        entries[digest] = _Entry(auth, valid_until, key)

    def __len__(self) -> int:
        return len(self._entries)

    def statistics(self) -> TokenCacheStatistics:
        return TokenCacheStatistics(
            len(self._entries), self._hits, self._misses, self._expired, self._evicted
        )


class TokenExpired(Exception):
    """A remembered token is past its ``exp`` (plus leeway)."""
