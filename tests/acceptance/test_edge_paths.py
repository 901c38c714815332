"""What the edge refuses before a route sees it, through real Hypercorn processes (the
BFF, capcom, the console), each with our JSON error body:

* a path that percent-encodes what needs no encoding (or a slash) is a 400:
  ``/%6detrics`` and ``/%2fmetrics`` were served as ``/metrics``, past a proxy rule on
  the raw path (compose's HAProxy denies ``path_beg /metrics``);
* a head over Hypercorn's 16 KiB (a 100 KB ``Authorization``) is a 431, and a request
  line h11 cannot parse a 400: Hypercorn answered both with an empty body."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from dataplane.dev.embedded import free_port
from dataplane.http.paths import needless_escape
from tests.console import console_env, console_process
from tests.helpers import BffProcess, capcom_process

METRICS_TOKEN = "a-metrics-token-for-the-path-tests"


@pytest.fixture
def ports(bff_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, int]]:
    env = {**bff_env, "DATAPLANE_METRICS": "1", "DATAPLANE_METRICS_TOKEN": METRICS_TOKEN}
    bff = BffProcess(env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    capcom = capcom_process(env, str(tmp_path / "capcom.log"), "capcom-token-for-path-tests")
    console_env_ = {**console_env(env["MAESTRO_QUEUES_URL"]), "DATAPLANE_ALLOW_OWNER": "1"}
    console = console_process(console_env_, tmp_path / "console.log")
    try:
        for proc in (bff, capcom, console):
            trio.run(proc.wait_ready)
        yield {"bff": bff.port, "capcom": capcom.port, "console": console.port}
    finally:
        for proc in (bff, capcom, console):
            proc.stop()


def _get(
    port: int, target: str, bearer: str = METRICS_TOKEN, line: str | None = None
) -> tuple[int, bytes]:
    """One raw GET of ``target`` as sent (no client normalising it), Connection: close;
    ``line``: another request line."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        request = (
            f"{line or f'GET {target} HTTP/1.1'}\r\nHost: x\r\n"
            f"Authorization: Bearer {bearer}\r\nConnection: close\r\n\r\n"
        )
        try:
            sock.sendall(request.encode())
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before it was all read: its answer is in our buffer
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head + b"\r\n\r\n" + body


NEEDLESS = ["/%6detrics", "/%6Detrics", "/%2fmetrics", "/%2Fmetrics", "/api/%70robe/q", "/a%5cb"]


@pytest.mark.parametrize("name", ["bff", "capcom", "console"])
def test_a_head_too_large_or_unparsable_is_refused_with_the_json_error(
    ports: dict[str, int], name: str
) -> None:
    big, bad_line = "a" * 100_000, "GET /healthz HTTP/1.1 extra"
    for bearer, line, status, code, says in (
        (big, None, 431, "REQUEST_HEADER_FIELDS_TOO_LARGE", "over 16384 bytes"),
        (METRICS_TOKEN, bad_line, 400, "BAD_REQUEST", "could not be parsed"),
    ):
        got, answer = _get(ports[name], "/healthz", bearer, line)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert got == status, answer[:300]
        assert b"content-type: application/json" in head.lower(), head
        error = json.loads(body)["error"]
        assert (error["status"], error["code"]) == (status, code), error
        assert says in error["message"], error
    assert _get(ports[name], "/healthz")[0] == 200  # and the server serves on


@pytest.mark.parametrize("name", ["bff", "capcom"])
def test_a_needless_escape_is_a_400_and_the_normal_form_is_served(
    ports: dict[str, int], name: str
) -> None:
    for target in NEEDLESS:
        status, answer = _get(ports[name], target)
        assert status == 400, (target, answer[:200])
        error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
        assert error["code"] == "BAD_REQUEST" and "percent-encodes" in error["message"]
    assert _get(ports[name], "/metrics")[0] == 200
    assert _get(ports[name], "/metrics?x=%6d")[0] == 200  # the query is not the path
    assert _get(ports[name], "/static/a%20b.js")[0] == 404  # a space needs its escape


def test_which_escapes_are_needless() -> None:
    assert needless_escape(b"/%6detrics") == "%6d"
    assert needless_escape(b"/a/%2F") == "%2F"
    assert needless_escape(b"/a%20b/%C3%A9/%25") is None
