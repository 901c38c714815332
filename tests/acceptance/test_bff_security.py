"""Who may do what: JWT attacks, cross-client/scope reads, envelope integrity,
and bad input answered with the right status and a JSON error."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import jwt
import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from dataplane.db import Database
from tests.acceptance.conftest import start_bff
from tests.acceptance.test_bff import STAFF, poll_until_done, post
from tests.helpers import JWT_SECRET, bearer, token


def assert_error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    err = resp.json()["error"]
    assert err["status"] == status and err["code"] and err["message"]
    return err  # type: ignore[no-any-return]


def _claims(**over: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {
        "sub": "u1",
        "client": "acme",
        "staff": False,
        "branches": ["acme-north"],
        "email": "u1@acme.test",
        "iat": now,
        "exp": now + 600,
    }
    claims.update(over)
    return {k: v for k, v in claims.items() if v is not None}


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
RSA_PUBLIC_PEM = (
    RSA_KEY.public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode()
)


def bad_tokens() -> dict[str, str]:
    good = jwt.encode(_claims(), JWT_SECRET, algorithm="HS256")
    head, _payload, sig = good.split(".")
    tampered = ".".join([head, _b64(_claims(client="globex")), sig])
    return {
        "alg none": _b64({"alg": "none", "typ": "JWT"}) + "." + _b64(_claims()) + ".",
        "wrong key": jwt.encode(_claims(), "another-secret-that-is-long-enough!!", "HS256"),
        "expired": jwt.encode(_claims(exp=int(time.time()) - 3600), JWT_SECRET, "HS256"),
        "tampered payload": tampered,
        "RS256 where HS256 is pinned": jwt.encode(_claims(), RSA_KEY, algorithm="RS256"),
        "no client": jwt.encode(_claims(client=None), JWT_SECRET, "HS256"),
        "no staff": jwt.encode(_claims(staff=None), JWT_SECRET, "HS256"),
        "staff not bool": jwt.encode(_claims(staff="yes"), JWT_SECRET, "HS256"),
        "no branches": jwt.encode(_claims(branches=None), JWT_SECRET, "HS256"),
        "no sub": jwt.encode(_claims(sub=None), JWT_SECRET, "HS256"),
        "no exp": jwt.encode(_claims(exp=None), JWT_SECRET, "HS256"),
        "star scope without staff": jwt.encode(_claims(branches=["*"]), JWT_SECRET, "HS256"),
        "garbage": "not.a.jwt",
    }


@pytest.mark.parametrize("case", sorted(bad_tokens()))
async def test_bad_tokens_get_401(http: httpx.AsyncClient, case: str) -> None:
    resp = await post(http, "probe", "echo", {}, bad_tokens()[case])
    err = assert_error(resp, 401)
    assert resp.headers["www-authenticate"].startswith("Bearer")
    assert err["code"] == "UNAUTHORIZED"


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


async def test_nobody_reads_what_is_not_theirs(
    http: httpx.AsyncClient, spawn_worker: Callable[..., Any]
) -> None:
    await spawn_worker()
    owner = token(sub="owner", branches=["acme-north"])
    body = (await post(http, "probe", "large", {"bytes": 300_000}, owner)).json()
    answer = await poll_until_done(http, body["pollUrl"])
    job = body["jobId"]
    paths = [f"/api/probe/q/{job}", f"/api/probe/q/{job}/stream", f"/api/probe/q/{job}/blob"]
    for path in paths:
        assert (await http.get(path, headers=bearer(owner))).status_code == 200, path
        for intruder in (
            token("globex", sub="owner", branches=["acme-north"]),  # another client
            token(sub="owner", branches=["acme-south"]),  # same client, another scope
            token(sub="owner", branches=["acme-north"], staff=True),  # staff flag changes scope
        ):
            assert_error(await http.get(path, headers=bearer(intruder)), 404)
    # A stream token for job A cannot read job B.
    other = (await post(http, "probe", "echo", {"value": "b"}, owner)).json()
    token_a = body["streamUrl"].split("token=")[1]
    for suffix in ("", "/stream", "/blob"):
        url = f"/api/probe/q/{other['jobId']}{suffix}?token={token_a}"
        assert_error(await http.get(url), 404)
    # ...nor the same job under another surface, nor with a forged signature.
    assert_error(await http.get(f"/api/users/q/{job}?token={token_a}"), 404)
    assert_error(await http.get(f"/api/probe/q/{job}?token={token_a[:-4]}AAAA"), 401)
    # Unknown and malformed job ids look the same as other people's.
    assert_error(await http.get("/api/probe/q/not-a-uuid", headers=bearer(owner)), 404)
    blob = await http.get(answer["blobRef"]["url"])
    assert blob.status_code == 200


async def test_the_body_cannot_change_the_envelope(
    http: httpx.AsyncClient, db: Database, spawn_worker: Callable[..., Any]
) -> None:
    tok = token("acme", sub="u7", branches=["acme-north"])
    for field in ("client", "staff", "branches", "auth"):
        resp = await http.post(
            "/api/probe/q",
            json={"operation": "echo", "params": {}, field: "evil"},
            headers=bearer(tok),
        )
        err = assert_error(resp, 400)
        assert field in err["message"]
    resp = await post(http, "probe", "echo", {"value": {"client": "globex", "staff": True}}, tok)
    assert resp.status_code == 202
    row = await db.fetchone(
        "SELECT payload FROM maestro_queues WHERE id = %(id)s", {"id": resp.json()["jobId"]}
    )
    assert row is not None
    auth = row["payload"]["auth"]
    assert auth["client"] == "acme" and auth["staff"] is False
    assert auth["branches"] == ["acme-north"] and auth["userId"] == "u7"
    await spawn_worker()
    answer = await poll_until_done(http, resp.json()["pollUrl"])
    assert answer["result"]["client"] == "acme"


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
