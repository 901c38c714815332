"""Who may do what: JWT attacks, cross-client/scope reads, envelope integrity (bad
input and bad authorization: tests/smoke/test_bff_security.py)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from dataplane.db import Database
from tests.acceptance.test_bff import poll_until_done, post
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
