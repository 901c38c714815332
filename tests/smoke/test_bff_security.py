"""Who may do what: bad input and bad authorization answered with the right status
and a JSON error, key confusion refused, an unconfigured plane alive."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import httpx
import jwt
import pytest
import trio
from cryptography.hazmat.primitives import serialization

from tests.acceptance.test_bff import STAFF, post
from tests.acceptance.test_bff_security import RSA_KEY, _b64, _claims, assert_error
from tests.helpers import bearer
from tests.real_plane import start_bff

RSA_PUBLIC_PEM = (
    RSA_KEY.public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode()
)


async def test_missing_or_malformed_authorization_gets_401(http: httpx.AsyncClient) -> None:
    for headers in ({}, {"Authorization": "Basic dXNlcjpwdw=="}, {"Authorization": "Bearer"}):
        resp = await http.post(
            "/api/probe/q", json={"operation": "echo", "params": {}}, headers=headers
        )
        assert_error(resp, 401)


async def test_public_key_mode_rejects_hs_rs_confusion_and_checks_audience(
    bff_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery
) -> None:
    monkeypatch.delenv("DATAPLANE_JWT_SECRET")
    monkeypatch.setenv("DATAPLANE_JWT_PUBLIC_KEY", RSA_PUBLIC_PEM)
    monkeypatch.setenv("DATAPLANE_STREAM_SECRET", "stream-secret-that-is-long-enough!!")
    monkeypatch.setenv("DATAPLANE_JWT_AUDIENCE", "surfaces")
    base, _app, shutdown = await start_bff(nursery)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        good = jwt.encode(_claims(aud="surfaces"), RSA_KEY, algorithm="RS256")
        assert (await post(http, "probe", "echo", {}, good)).status_code == 202
        # The classic confusion: HS256 signed with the public key as the secret.
        signing_input = _b64({"alg": "HS256", "typ": "JWT"}) + "." + _b64(_claims(aud="surfaces"))
        mac = hmac.new(RSA_PUBLIC_PEM.encode(), signing_input.encode(), hashlib.sha256).digest()
        confused = signing_input + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
        assert_error(await post(http, "probe", "echo", {}, confused), 401)
        wrong_aud = jwt.encode(_claims(aud="elsewhere"), RSA_KEY, algorithm="RS256")
        err = assert_error(await post(http, "probe", "echo", {}, wrong_aud), 401)
        assert "audience" in err["message"]
        no_aud = jwt.encode(_claims(), RSA_KEY, algorithm="RS256")
        assert_error(await post(http, "probe", "echo", {}, no_aud), 401)
    shutdown.set()


async def test_bad_input_gets_the_right_status_and_a_json_error(http: httpx.AsyncClient) -> None:
    h = bearer(STAFF)
    cases: list[tuple[int, dict[str, Any]]] = [
        (400, {"content": b"{not json", "headers": {**h, "Content-Type": "application/json"}}),
        (400, {"json": ["a", "list"], "headers": h}),
        (400, {"json": {"operation": "echo", "params": [1, 2]}, "headers": h}),
        (400, {"json": {"operation": 42}, "headers": h}),
        (400, {"json": {"operation": "sleep", "params": {"ms": "soon"}}, "headers": h}),
        (400, {"json": {"operation": "sleep", "params": {"ms": -1}}, "headers": h}),
        (400, {"json": {"operation": "sleep", "params": {}}, "headers": h}),
        (400, {"json": {"operation": "echo", "params": {"extra": 1}}, "headers": h}),
        (404, {"json": {"operation": "nope", "params": {}}, "headers": h}),
        (415, {"content": b"operation=echo", "headers": {**h, "Content-Type": "text/plain"}}),
        (
            413,
            {
                "content": b'{"operation":"echo","params":{"value":"' + b"x" * 70_000 + b'"}}',
                "headers": {**h, "Content-Type": "application/json"},
            },
        ),
    ]
    for status, kwargs in cases:
        assert_error(await http.post("/api/probe/q", **kwargs), status)
    assert_error(
        await http.post("/api/nosuch/q", json={"operation": "x", "params": {}}, headers=h), 404
    )
    assert_error(await http.get("/api/probe/nothing-here", headers=h), 404)
    assert_error(await http.delete("/api/probe/q", headers=h), 405)
    for text in ("nul \\u0000 byte", "lone \\ud939 surrogate"):  # Postgres cannot store them
        resp = await http.post(
            "/api/probe/q",
            content=('{"operation":"echo","params":{"value":"' + text + '"}}').encode(),
            headers={**h, "Content-Type": "application/json"},
        )
        assert_error(resp, 400)
    for depth in (40, 5000):  # deeper than allowed; deeper than Python's JSON parser goes
        deep = "[" * depth + "0" + "]" * depth
        resp = await http.post(
            "/api/probe/q",
            content=('{"operation":"echo","params":{"value":' + deep + "}}").encode(),
            headers={**h, "Content-Type": "application/json"},
        )
        assert_error(resp, 400)


async def test_unconfigured_plane_answers_503_but_lives(
    bff_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, nursery: trio.Nursery
) -> None:
    monkeypatch.delenv("MAESTRO_QUEUES_URL")
    base, _app, shutdown = await start_bff(nursery)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/readyz")).status_code == 503
        err = assert_error(await post(http, "probe", "echo", {}), 503)
        assert "MAESTRO_QUEUES_URL" in err["message"]
        assert_error(await http.get(f"/api/probe/q/{'0' * 32}"), 503)
    shutdown.set()


async def test_a_refused_body_does_not_stall_the_connection(http: httpx.AsyncClient) -> None:
    # Answered before the body is read (405 here): the connection must not hang.
    h = {**bearer(STAFF), "Content-Type": "application/json"}
    with trio.fail_after(10):
        for method, size in (("PUT", 100_000), ("POST", 100_000), ("PUT", 1000)):
            resp = await http.request(method, "/api/probe/q", content=b"x" * size, headers=h)
            assert resp.status_code in (405, 413)
            assert (await http.get("/healthz")).status_code == 200
