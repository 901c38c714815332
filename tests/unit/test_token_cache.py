"""The verified-token cache: a remembered token is still refused once expired, the
cache is bounded, and nothing but a fully verified token is ever remembered."""

from __future__ import annotations

import time

import jwt
import pytest

from dataplane.auth.token_cache import VerifiedTokens
from dataplane.auth.verifier import LEEWAY_SECONDS, AuthError, JwtVerifier, mint_token

SECRET = "a-test-secret-that-is-at-least-32-bytes-long"


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def verifier(cache: VerifiedTokens, **kwargs: str) -> JwtVerifier:
    return JwtVerifier(SECRET, "HS256", cache=cache, **kwargs)  # type: ignore[arg-type]


def test_a_cached_token_past_its_exp_is_refused_and_forgotten() -> None:
    clock = Clock()
    cache = VerifiedTokens(clock=clock)
    v = verifier(cache)
    token = mint_token(SECRET, client="acme", sub="u1", ttl=100)
    first = v.verify(token)
    assert v.verify(token) == first
    assert cache.statistics().hits == 1  # the second verification was the cache's
    clock.now += 100 + LEEWAY_SECONDS - 5
    assert v.verify(token) == first  # within exp + leeway, as jwt.decode allows
    clock.now += 10
    with pytest.raises(AuthError, match="token expired"):
        v.verify(token)
    assert len(cache) == 0 and cache.statistics().expired == 1


def test_the_cache_is_bounded_oldest_first() -> None:
    cache = VerifiedTokens(size=3)
    v = verifier(cache)
    tokens = [mint_token(SECRET, client="acme", sub=f"u{i}") for i in range(5)]
    for token in tokens:
        v.verify(token)
    assert len(cache) == 3 and cache.statistics().evicted == 2
    v.verify(tokens[-1])
    assert cache.statistics().hits == 1
    v.verify(tokens[0])  # evicted: verified afresh (a miss), and remembered again
    assert cache.statistics().hits == 1 and len(cache) == 3


def test_only_verified_tokens_are_remembered() -> None:
    cache = VerifiedTokens()
    v = verifier(cache)
    token = mint_token(SECRET, client="acme", sub="u1")
    v.verify(token)
    head, payload, sig = token.split(".")
    forged = f"{head}.{payload}.{sig[:-2]}{'AA' if sig[-2:] != 'AA' else 'BB'}"
    other_key = mint_token("another-secret-that-is-also-32-bytes-long", client="acme", sub="u1")
    for bad in (forged, other_key, forged):
        with pytest.raises(AuthError):
            v.verify(bad)
    assert len(cache) == 1  # the good one; no failure was stored


def test_audience_and_issuer_are_still_checked_by_each_verifier() -> None:
    shared = VerifiedTokens()  # even one cache shared by two verifiers (never done)
    loose = verifier(shared)
    strict = JwtVerifier(SECRET, "HS256", audience="dp", issuer="idp", cache=VerifiedTokens())
    wrong = mint_token(SECRET, client="acme", sub="u1", audience="other", issuer="idp")
    loose.verify(wrong)  # no audience configured: accepted, and remembered by its cache
    with pytest.raises(AuthError, match="audience"):
        strict.verify(wrong)
    with pytest.raises(AuthError, match="audience"):
        strict.verify(wrong)  # refused again: a failure is never cached
    right = mint_token(SECRET, client="acme", sub="u1", audience="dp", issuer="idp")
    assert strict.verify(right).client == "acme"


def test_an_entry_holds_only_for_the_key_that_verified_it() -> None:
    cache = VerifiedTokens()
    v = verifier(cache)
    token = mint_token(SECRET, client="acme", sub="u1")
    auth = v.verify(token)
    digest = cache.digest(token)
    assert cache.get(digest, SECRET) is auth
    assert cache.get(digest, object()) is None  # a JWKS key retired or replaced


def test_an_expired_token_is_refused_before_any_caching() -> None:
    cache = VerifiedTokens()
    v = verifier(cache)
    claims = {"sub": "u", "client": "c", "staff": False, "branches": [], "exp": 1}
    with pytest.raises(AuthError, match="token expired"):
        v.verify(jwt.encode(claims, SECRET, algorithm="HS256"))
    assert len(cache) == 0
