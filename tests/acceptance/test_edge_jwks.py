"""Keys from an identity provider (``DATAPLANE_JWT_JWKS_URL``), against a local JWKS
server (Hypercorn on 127.0.0.1, in the test's nursery) that rotates its keys.

``kid`` is required; keys are cached (verifying with a cached key fetches nothing);
an unknown ``kid`` fetches the set at most once per refresh interval; during a
rotation both keys are valid, and a retired key stops being accepted once the cache
ages out; a JWKS server that never answers costs a bounded wait, not a hang; an
entry with an odd ``alg`` (a list, ``none``, ``HS256``) is skipped, and logged once
per document, while the document's other keys serve.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt
import pytest
import trio
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypercorn.config import Config
from hypercorn.trio import serve
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.conftest import wait_until
from tests.helpers import JWT_SECRET, bearer
from tests.real_plane import start_bff

REFRESH = 1.0  # DATAPLANE_JWT_JWKS_REFRESH_SECONDS in these tests
MAX_AGE = 4.0  # DATAPLANE_JWT_JWKS_MAX_AGE_SECONDS in these tests
BODY = {"operation": "echo", "params": {"value": 1}}


@dataclass
class JwksServer:
    """A JWKS endpoint whose key set the test changes; counts the fetches it serves."""

    keys: list[dict[str, Any]] = field(default_factory=list)
    fetches: int = 0
    hang: bool = False
    url: str = ""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        if self.hang:
            await trio.sleep_forever()
        self.fetches += 1
        body = json.dumps({"keys": self.keys}).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def jwks(nursery: trio.Nursery) -> AsyncIterator[JwksServer]:
    server = JwksServer()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    shutdown = trio.Event()
    binds = await nursery.start(
        functools.partial(serve, server, config, shutdown_trigger=shutdown.wait)
    )
    server.url = f"{binds[0]}/.well-known/jwks.json"
    yield server
    shutdown.set()


@pytest.fixture
def jwks_env(
    bff_env: dict[str, str], jwks: JwksServer, monkeypatch: pytest.MonkeyPatch
) -> JwksServer:
    monkeypatch.delenv("DATAPLANE_JWT_SECRET")
    monkeypatch.setenv("DATAPLANE_STREAM_SECRET", "a-stream-secret-of-at-least-32-bytes!")
    monkeypatch.setenv("DATAPLANE_JWT_JWKS_URL", jwks.url)
    monkeypatch.setenv("DATAPLANE_JWT_JWKS_REFRESH_SECONDS", str(REFRESH))
    monkeypatch.setenv("DATAPLANE_JWT_JWKS_MAX_AGE_SECONDS", str(MAX_AGE))
    monkeypatch.setenv("DATAPLANE_JWT_JWKS_TIMEOUT_SECONDS", "1")
    return jwks


def rsa_key(kid: str) -> tuple[Any, dict[str, Any]]:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(RSAAlgorithm.to_jwk(private.public_key()))
    return private, {**public, "kid": kid, "use": "sig", "alg": "RS256"}


def ec_key(kid: str) -> tuple[Any, dict[str, Any]]:
    private = ec.generate_private_key(ec.SECP256R1())
    public = json.loads(ECAlgorithm.to_jwk(private.public_key()))
    return private, {**public, "kid": kid, "use": "sig", "alg": "ES256"}


def signed(private: Any, kid: str | None, algorithm: str = "RS256") -> str:
    claims = {
        "sub": "u1",
        "client": "acme",
        "staff": True,
        "branches": ["*"],
        "exp": int(time.time()) + 3600,
    }
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(claims, private, algorithm=algorithm, headers=headers)


async def status(http: httpx.AsyncClient, tok: str) -> tuple[int, str]:
    resp = await http.post("/api/probe/q", json=BODY, headers=bearer(tok))
    return resp.status_code, resp.json().get("error", {}).get("message", "")


async def test_keys_rotate_through_the_identity_providers_jwks(
    jwks_env: JwksServer, nursery: trio.Nursery
) -> None:
    server = jwks_env
    key_a, jwk_a = rsa_key("a")
    key_b, jwk_b = rsa_key("b")
    key_c, jwk_c = ec_key("c")
    server.keys = [jwk_a]
    base, _app, shutdown = await start_bff(nursery)
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        assert server.fetches == 1  # at startup
        token_a, token_b, token_c = (
            signed(key_a, "a"),
            signed(key_b, "b"),
            signed(key_c, "c", "ES256"),
        )

        # Cached: verifying with a known key fetches nothing.
        for _ in range(10):
            assert (await status(http, token_a))[0] == 202
        assert server.fetches == 1

        # Rotation: the provider publishes b beside a; b's first token fetches once.
        server.keys = [jwk_a, jwk_b, jwk_c]
        assert (await status(http, token_b))[0] == 202
        assert server.fetches == 2
        for tok in (token_a, token_b, token_c, token_a):
            assert (await status(http, tok))[0] == 202
        assert server.fetches == 2

        # An unknown kid: refused, and at most one fetch per refresh interval.
        started, before = trio.current_time(), server.fetches
        for _ in range(30):
            code, message = await status(http, signed(key_a, "unknown"))
            assert code == 401 and "kid" in message
        elapsed = trio.current_time() - started
        assert server.fetches - before <= 1 + elapsed // REFRESH, (server.fetches, elapsed)

        # No kid, or a symmetric algorithm under a JWKS kid: refused, nothing fetched.
        before = server.fetches
        code, message = await status(http, signed(key_a, None))
        assert code == 401 and "'kid'" in message
        hs = jwt.encode(
            {"sub": "u1", "client": "acme", "staff": True, "branches": ["*"], "exp": 2**31},
            JWT_SECRET,
            algorithm="HS256",
            headers={"kid": "a"},
        )
        code, message = await status(http, hs)
        assert code == 401 and "algorithm" in message
        assert server.fetches == before

        # The provider retires a: once the cache ages out, a is refused and b still works.
        server.keys = [jwk_b, jwk_c]

        async def a_retired() -> bool:
            return (await status(http, token_a))[0] == 401

        await wait_until(a_retired, within=MAX_AGE + 2 * REFRESH + 5, interval=0.2)
        assert (await status(http, token_b))[0] == 202
    shutdown.set()


async def test_a_jwks_server_that_never_answers_costs_a_bounded_wait(
    jwks_env: JwksServer, nursery: trio.Nursery
) -> None:
    server = jwks_env
    key_a, jwk_a = rsa_key("a")
    server.keys = [jwk_a]
    server.hang = True
    with trio.fail_after(15):
        base, _app, shutdown = await start_bff(nursery)  # the startup fetch times out
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        started = trio.current_time()
        code, message = await status(http, signed(key_a, "a"))
        assert code == 401 and "kid" in message
        assert trio.current_time() - started < 3  # one timeout (1 s) at most
        server.hang = False

        async def accepted() -> bool:
            return (await status(http, signed(key_a, "a")))[0] == 202

        await wait_until(accepted, within=5 * REFRESH + 5, interval=0.2)
    shutdown.set()


async def test_one_odd_entry_costs_only_itself_and_is_logged_once_per_document(
    jwks_env: JwksServer, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    server = jwks_env
    key_a, jwk_a = rsa_key("a")
    key_c, jwk_c = ec_key("c")
    key_odd, jwk_odd = rsa_key("listed")
    server.keys = [
        {**jwk_odd, "alg": ["RS256"]},  # a list
        {**rsa_key("none")[1], "alg": "none"},
        {**rsa_key("hs")[1], "alg": "HS256"},  # outside the accepted family
        jwk_a,
        jwk_c,
    ]
    caplog.set_level(logging.WARNING, logger="dataplane.auth.jwks")
    base, _app, shutdown = await start_bff(nursery)  # boots: the startup fetch keeps a, c
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        assert (await status(http, signed(key_a, "a")))[0] == 202
        assert (await status(http, signed(key_c, "c", "ES256")))[0] == 202
        code, message = await status(http, signed(key_odd, "listed"))
        assert code == 401 and "kid" in message
        unsigned = jwt.encode(
            {"sub": "u1", "client": "acme", "staff": True, "branches": ["*"], "exp": 2**31},
            None,
            algorithm="none",
            headers={"kid": "none"},
        )
        code, message = await status(http, unsigned)
        assert code == 401 and "kid" in message

        # The same document, fetched again (unknown kids, past the refresh interval):
        # logged once, not once per fetch.
        fetched = server.fetches
        with trio.fail_after(10 * REFRESH + 10):
            while server.fetches < fetched + 2:
                await status(http, signed(key_a, "unknown"))
                await trio.sleep(0.1)
        skipped = [r for r in caplog.records if "unusable entr" in r.getMessage()]
        assert len(skipped) == 1, [r.getMessage() for r in skipped]
        line = skipped[0].getMessage()
        assert "skipped 3 unusable entries, kept 2 key(s)" in line
        assert "'listed'" in line and "'none'" in line and "'HS256'" in line

        # A changed document is logged again, and its good keys still serve.
        server.keys = [{**jwk_a, "alg": "none"}, jwk_c]

        async def a_dropped() -> bool:
            return (await status(http, signed(key_a, "a")))[0] == 401

        await wait_until(a_dropped, within=MAX_AGE + 2 * REFRESH + 5, interval=0.2)
        assert (await status(http, signed(key_c, "c", "ES256")))[0] == 202
        skipped = [r for r in caplog.records if "unusable entr" in r.getMessage()]
        assert len(skipped) == 2 and "skipped 1 unusable entry, kept 1 key(s)" in (
            skipped[1].getMessage()
        )
    shutdown.set()
