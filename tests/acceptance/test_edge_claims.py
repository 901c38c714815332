"""Claims and bodies that are not text: never a 5xx, one 401 for bad claims.

A validly signed JWT whose claims hold NUL or an unpaired surrogate is refused with
401 and one message, whichever claim it is in (tests/smoke/test_edge_claims.py);
property-based tests (hypothesis) post arbitrary claims and bodies to a running BFF
and assert it never answers 5xx.
The properties run synchronously (hypothesis drives each example) against a real
``hypercorn -k trio dataplane.app:app`` process.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dataplane.auth.claims import NOT_TEXT
from dataplane.dev.embedded import free_port
from tests.helpers import JWT_SECRET, BffProcess, bearer, token

EXAMPLES = 60  # per property: each is one real HTTP request (well under a minute)
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
BAD_TEXT = ["\ud800", "a\udfffb", "\x00", "acme\x00", "\udbff\udc00x\ud800"]

# Every code point, surrogates and NUL included (hypothesis leaves them out by default).
anything = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
texts = st.text(anything, max_size=12) | st.sampled_from(["acme", "*", "acme-north", *BAD_TEXT])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


def claims_text(value: Any) -> bool:
    """Whether ``value`` (keys included) holds only UTF-8 text without NUL."""
    if isinstance(value, str):
        return "\x00" not in value and value.encode("utf-8", "replace") == value.encode(
            "utf-8", "surrogatepass"
        )
    if isinstance(value, dict):
        return all(claims_text(k) and claims_text(v) for k, v in value.items())
    if isinstance(value, list):
        return all(claims_text(v) for v in value)
    return True


def signed(claims: dict[str, Any]) -> str:
    return jwt.encode(claims, JWT_SECRET, algorithm="HS256")


def base_claims(**overrides: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "sub": "u1",
        "client": "acme",
        "staff": False,
        "branches": ["acme-north"],
        "email": "u1@acme.example",
        "exp": int(time.time()) + 3600,
    }
    claims.update(overrides)
    return claims


def request_of(tok: str, body: Any = None) -> dict[str, Any]:
    content = json.dumps(body if body is not None else {"operation": "echo", "params": {}})
    return {
        "content": content.encode(),
        "headers": {**bearer(tok), "Content-Type": "application/json"},
    }


@pytest.fixture
def bff_process(bff_env: dict[str, str], tmp_path: Path) -> Iterator[httpx.Client]:
    """A real BFF process and a synchronous client of it (hypothesis drives the loop)."""
    proc = BffProcess(bff_env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    try:
        trio.run(proc.wait_ready)
        with httpx.Client(base_url=proc.base, timeout=10) as client:
            yield client
    finally:
        proc.stop()


@PROPERTY
@given(
    client=texts,
    sub=texts,
    email=texts,
    branches=st.lists(texts, max_size=3),
    staff=st.booleans(),
    extra=st.dictionaries(texts, json_values, max_size=2),
)
@example(client="\ud800", sub="u1", email="", branches=[], staff=True, extra={})
@example(client="acme", sub="u\x00", email="", branches=["\udfff"], staff=False, extra={})
def test_arbitrary_claims_never_answer_5xx(
    bff_process: httpx.Client,
    client: str,
    sub: str,
    email: str,
    branches: list[str],
    staff: bool,
    extra: dict[str, Any],
) -> None:
    claims = {**extra, **base_claims(client=client, sub=sub, email=email, branches=branches)}
    claims["staff"] = staff
    resp = bff_process.post("/api/probe/q", **request_of(signed(claims)))
    assert resp.status_code < 500, (claims, resp.status_code, resp.text)
    assert resp.status_code in (202, 400, 401, 403), resp.text
    if resp.status_code == 401 and not claims_text(claims):
        assert resp.json()["error"]["message"] == NOT_TEXT


def test_a_time_claim_out_of_range_is_a_401(bff_process: httpx.Client) -> None:
    """An ``exp`` past what a float or a date holds was a 500 (OverflowError)."""
    for claim, value in (("exp", 10**400), ("exp", 2**63), ("exp", 1e300), ("nbf", 10**400)):
        resp = bff_process.post("/api/probe/q", **request_of(signed(base_claims(**{claim: value}))))
        assert resp.status_code == 401, (claim, resp.text)
        assert resp.json()["error"]["code"] == "UNAUTHORIZED"
    last = int(time.time()) + 10 * 365 * 86400  # a long-lived token is still one
    resp = bff_process.post("/api/probe/q", **request_of(signed(base_claims(exp=last))))
    assert resp.status_code == 202, resp.text


STAFF = token(staff=True, sub="fuzz")


@PROPERTY
@given(
    body=st.dictionaries(
        st.sampled_from(["operation", "params"]) | texts,
        json_values | st.sampled_from(["echo", "large", "sleep"]),
        max_size=3,
    )
    | json_values
)
@example(body={"operation": "echo", "params": {"value": "\ud800"}})
@example(body={"operation": "\ud800", "params": {}})
@example(body={"operation": "echo", "params": {"\x00": 1}})
@example(body={"\udfff": 1})
def test_arbitrary_bodies_never_answer_5xx(bff_process: httpx.Client, body: Any) -> None:
    resp = bff_process.post("/api/probe/q", **request_of(STAFF, body))
    assert resp.status_code < 500, (body, resp.status_code, resp.text)
    if resp.status_code != 202:
        error = resp.json()["error"]
        assert error["status"] == resp.status_code and error["code"] and error["message"]
