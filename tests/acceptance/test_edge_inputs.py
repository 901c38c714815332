"""``POST /api/<surface>/invalidate`` and ``GET /static/<name>`` never answer 5xx.

A tag that cannot travel (a lone surrogate, NUL, too long), a body that is not
``{"tags": [...]}``, a file name that is no static file (NUL, 300 characters, not
UTF-8): each is a 4xx with the JSON error body. Examples first, then Hypothesis
properties against a real ``hypercorn -k trio dataplane.app:app`` process (driven
synchronously, one real HTTP request per example).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import trio
from hypothesis import example, given
from hypothesis import strategies as st

from dataplane.dev.embedded import free_port
from tests.acceptance.test_edge_claims import PROPERTY, anything, json_values, texts
from tests.helpers import BffProcess, bearer, token

SERVICE = "a-service-token-for-invalidation"
STAFF = token("acme", staff=True, sub="ops")
NOT_STAFF = token("acme", sub="u1")


@pytest.fixture
def bff_process(bff_env: dict[str, str], tmp_path: Path) -> Iterator[httpx.Client]:
    """A real BFF process (with the service token set) and a synchronous client of it."""
    env = {**bff_env, "DATAPLANE_INVALIDATE_TOKEN": SERVICE}
    proc = BffProcess(env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    try:
        trio.run(proc.wait_ready)
        with httpx.Client(base_url=proc.base, timeout=10) as client:
            yield client
    finally:
        proc.stop()


def invalidate(http: httpx.Client, body: Any, tok: str = STAFF) -> httpx.Response:
    content = json.dumps(body, ensure_ascii=True).encode()  # lone surrogates as \ud800
    headers = {**bearer(tok), "Content-Type": "application/json"}
    return http.post("/api/probe/invalidate", content=content, headers=headers)


def error_of(resp: httpx.Response) -> dict[str, Any]:
    assert resp.headers["content-type"] == "application/json", resp.text[:200]
    error: dict[str, Any] = resp.json()["error"]
    assert error["status"] == resp.status_code and error["code"] and error["message"]
    return error


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"tags": ["u:\ud800"]}, 400, "unpaired surrogate"),
        ({"tags": ["u:42", "c:acme\udfff"]}, 400, "tags[1]"),
        ({"tags": ["u:\x00"]}, 400, "NUL"),
        ({"tags": ["u:" + "x" * 300]}, 400, "at most 200"),
        ({"tags": [""]}, 400, "non-empty"),
        ({"tags": [42]}, 400, "non-empty string"),
        ({"tags": []}, 400, "1 to 100"),
        ({"tags": ["u:1"] * 101}, 400, "1 to 100"),
        ({"tags": "u:1"}, 400, "1 to 100"),
        ({"tags": ["u:1"], "more": 1}, 400, '{"tags": [...]}'),
        (["u:1"], 400, '{"tags": [...]}'),
        ({"tags": ["c:globex"]}, 403, "your own client"),
        ({"tags": ["x:1"]}, 403, "c:<own client> and u:<user>"),
    ],
)
def test_a_bad_invalidation_is_a_4xx_saying_what_is_wrong(
    bff_process: httpx.Client, body: Any, status: int, says: str
) -> None:
    resp = invalidate(bff_process, body)
    assert resp.status_code == status, resp.text
    assert says in error_of(resp)["message"]


def test_who_may_invalidate_what(bff_process: httpx.Client) -> None:
    ok = invalidate(bff_process, {"tags": ["u:42", "c:acme", "u:\u00e9\U0001f680"]})
    assert ok.status_code == 202 and ok.json() == {"invalidated": ["u:42", "c:acme", "u:é🚀"]}
    assert invalidate(bff_process, {"tags": ["u:42"]}, NOT_STAFF).status_code == 403
    assert invalidate(bff_process, {"tags": ["u:42"]}, "not-a-token").status_code == 401
    anything_goes = invalidate(bff_process, {"tags": ["c:globex", "x:1"]}, SERVICE)
    assert anything_goes.status_code == 202
    # A staff token of a client id over 1 KiB (a token may carry one): its scoped tag is
    # too long to send, a 400 (not the notify's own refusal, a 500).
    huge = token("c" * 1100, staff=True, sub="ops")
    resp = invalidate(bff_process, {"tags": ["u:42"]}, huge)
    assert resp.status_code == 400 and "scoped to your client" in error_of(resp)["message"]


@PROPERTY
@given(
    body=st.dictionaries(
        st.just("tags") | texts,
        st.lists(texts | json_values, max_size=4) | json_values,
        max_size=2,
    )
    | json_values,
    who=st.sampled_from(["staff", "service"]),
)
@example(body={"tags": ["u:\ud800"]}, who="staff")
@example(body={"tags": ["u:\ud800"]}, who="service")
@example(body={"tags": ["\udfff"]}, who="service")
@example(body={"tags": ["c:acme\x00"]}, who="staff")
def test_no_invalidation_body_answers_5xx(bff_process: httpx.Client, body: Any, who: str) -> None:
    resp = invalidate(bff_process, body, STAFF if who == "staff" else SERVICE)
    assert resp.status_code < 500, (body, resp.status_code, resp.text)
    if resp.status_code != 202:
        error_of(resp)


@PROPERTY
@given(
    name=st.text(anything, min_size=1, max_size=300)
    | st.builds(lambda stem, ext: stem + ext, st.text(anything, max_size=300), st.just(".js"))
)
@example(name="index.html\x00.js")
@example(name="x" * 300 + ".js")
@example(name="\udcff.js")
@example(name="../app.py")
def test_no_static_name_answers_5xx(bff_process: httpx.Client, name: str) -> None:
    path = "/static/" + quote(name.encode("utf-8", "surrogatepass"), safe="")
    resp = bff_process.get(path)
    # 400: the name held a slash or backslash, whose escapes the path may not carry.
    slashed = resp.status_code == 400 and bool(set(name) & {"/", "\\"})
    assert resp.status_code in (200, 404) or slashed, (name, resp.status_code, resp.text[:200])
    if resp.status_code in (400, 404):
        error_of(resp)
    else:
        assert name in ("dataClient.js", "dataClient.d.ts", "demo.js", "demo.css", "index.html")
