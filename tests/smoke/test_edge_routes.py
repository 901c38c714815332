"""Unknown routes, static names and ``Expect: 100-continue`` at the edge."""

from __future__ import annotations

import json

import httpx
import trio

from tests.acceptance.test_bff import STAFF, post
from tests.acceptance.test_edge_connections import exchange
from tests.helpers import bearer


async def test_a_doubled_slash_is_an_unknown_route_with_the_json_body(
    http: httpx.AsyncClient,
) -> None:
    job_id = (await post(http, "probe", "echo", {"value": 1})).json()["jobId"]
    for path in (
        f"/api/probe/q/{job_id}//stream",
        f"/api/probe//q/{job_id}",
        "/api//probe/q",
        "/static//dataClient.js",
        "/no/such/route",
    ):
        resp = await http.get(path, headers=bearer(STAFF))
        assert resp.status_code == 404, (path, resp.status_code, resp.text[:200])
        assert resp.headers["content-type"] == "application/json", path
        error = resp.json()["error"]
        assert error["status"] == 404 and error["code"] == "NOT_FOUND" and error["message"]
        assert "location" not in resp.headers
    # On the wire, exactly as the issue reports it.
    request = (
        f"GET /api/probe/q/{job_id}//stream HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {STAFF}\r\nConnection: close\r\n\r\n"
    ).encode()
    received, _ = await exchange(str(http.base_url).rstrip("/"), request, within=5)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404"), received[:300]
    assert b"content-type: application/json" in head.lower()
    assert json.loads(body)["error"]["code"] == "NOT_FOUND"


STATIC_NAMES = [
    "index.html%00.js",  # NUL
    "x" * 300 + ".js",  # longer than a file name may be
    "%ff%fe.js",  # not UTF-8
    "%ed%a0%80.js",  # an encoded lone surrogate
    "index.html%20",
    ".hidden.js",
    "index.html%0a.js",
    "no-such.js",
    "demo.css.py",
]


async def test_a_static_name_that_is_not_a_static_file_is_a_404(
    http: httpx.AsyncClient,
) -> None:
    for name in STATIC_NAMES:
        resp = await http.get(f"/static/{name}")
        assert resp.status_code == 404, (name, resp.status_code, resp.text[:200])
        assert resp.json()["error"]["code"] == "NOT_FOUND", name
        # The same bytes on the wire, with no client-side normalisation in between.
        request = f"GET /static/{name} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        received, _ = await exchange(str(http.base_url).rstrip("/"), request.encode(), within=5)
        assert received.startswith(b"HTTP/1.1 404"), (name, received[:200])
    # An escaped slash or backslash would change the path's segments: refused before
    # any route sees it (dataplane/http/paths.py), so it is a 400, not a 404.
    for name in ("..%2fapp.py", "..%5capp.py", "..%2Fapp.py"):
        resp = await http.get(f"/static/{name}")
        assert resp.status_code == 400, (name, resp.status_code, resp.text[:200])
        assert resp.json()["error"]["code"] == "BAD_REQUEST", name
    for name, kind in (("dataClient.js", "text/javascript"), ("demo.css", "text/css")):
        resp = await http.get(f"/static/{name}")
        assert resp.status_code == 200 and resp.headers["content-type"].startswith(kind)


async def read_head(stream: trio.SocketStream, within: float) -> bytes:
    """Bytes up to the end of the first response head (or what came within ``within``)."""
    received = b""
    with trio.move_on_after(within):
        while b"\r\n\r\n" not in received:
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            received += chunk
    return received


async def open_bff(base: str) -> trio.SocketStream:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    return await trio.open_tcp_stream(host, int(port))


def expect_continue_post(tok: str, body: bytes, content_type: str = "application/json") -> bytes:
    return (
        f"POST /api/probe/q HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Expect: 100-continue\r\n\r\n"
    ).encode()


async def test_a_refusal_is_not_preceded_by_100_continue(http: httpx.AsyncClient) -> None:
    base = str(http.base_url).rstrip("/")
    body = json.dumps({"operation": "echo", "params": {}}).encode()
    for tok, content_type, status in (
        ("not-a-token", "application/json", b"401"),
        (STAFF, "text/plain", b"415"),
    ):
        async with await open_bff(base) as stream:
            await stream.send_all(expect_continue_post(tok, body, content_type))
            head = await read_head(stream, within=5)
        assert head.startswith(b"HTTP/1.1 " + status), head
        assert b"100 Continue" not in head and b" 100 " not in head.split(b"\r\n")[0]


async def test_100_continue_comes_when_the_body_is_read(http: httpx.AsyncClient) -> None:
    base = str(http.base_url).rstrip("/")
    body = json.dumps({"operation": "echo", "params": {"value": 1}}).encode()
    async with await open_bff(base) as stream:
        await stream.send_all(expect_continue_post(STAFF, body))
        interim = await read_head(stream, within=5)
        assert interim.startswith(b"HTTP/1.1 100"), interim
        await stream.send_all(body)
        final = await read_head(stream, within=5)
    assert final.startswith(b"HTTP/1.1 202"), final
