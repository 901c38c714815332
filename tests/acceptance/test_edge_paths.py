"""A path that percent-encodes what needs no encoding (or a slash) is a 400, through
real Hypercorn: ``/%6detrics`` and ``/%2fmetrics`` were served as ``/metrics``, past a
proxy rule on the raw path (compose's HAProxy denies ``path_beg /metrics``)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from dataplane.dev.embedded import free_port
from dataplane.http.paths import needless_escape
from tests.helpers import BffProcess, capcom_process

METRICS_TOKEN = "a-metrics-token-for-the-path-tests"


@pytest.fixture
def ports(bff_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, int]]:
    env = {**bff_env, "DATAPLANE_METRICS": "1", "DATAPLANE_METRICS_TOKEN": METRICS_TOKEN}
    bff = BffProcess(env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    capcom = capcom_process(env, str(tmp_path / "capcom.log"), "capcom-token-for-path-tests")
    try:
        trio.run(bff.wait_ready)
        trio.run(capcom.wait_ready)
        yield {"bff": bff.port, "capcom": capcom.port}
    finally:
        bff.stop()
        capcom.stop()


def _get(port: int, target: str) -> tuple[int, bytes]:
    """One raw GET of ``target`` as sent (no client normalising it), Connection: close."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        request = (
            f"GET {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {METRICS_TOKEN}\r\n"
            "Connection: close\r\n\r\n"
        )
        sock.sendall(request.encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


NEEDLESS = ["/%6detrics", "/%6Detrics", "/%2fmetrics", "/%2Fmetrics", "/api/%70robe/q", "/a%5cb"]


@pytest.mark.parametrize("name", ["bff", "capcom"])
def test_a_needless_escape_is_a_400_and_the_normal_form_is_served(
    ports: dict[str, int], name: str
) -> None:
    for target in NEEDLESS:
        status, body = _get(ports[name], target)
        assert status == 400, (target, body[:200])
        error = json.loads(body)["error"]
        assert error["code"] == "BAD_REQUEST" and "percent-encodes" in error["message"]
    assert _get(ports[name], "/metrics")[0] == 200
    assert _get(ports[name], "/metrics?x=%6d")[0] == 200  # the query is not the path
    assert _get(ports[name], "/static/a%20b.js")[0] == 404  # a space needs its escape


def test_which_escapes_are_needless() -> None:
    assert needless_escape(b"/%6detrics") == "%6d"
    assert needless_escape(b"/a/%2F") == "%2F"
    assert needless_escape(b"/a%20b/%C3%A9/%25") is None
