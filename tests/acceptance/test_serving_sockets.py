"""No connection-level fault on a serving socket ends more than that connection.

Against real processes — a worker's health/metrics port, a BFF and capcom, each
served on loopback — a client resets its connection mid-request (``SO_LINGER(1, 0)``
and close: the kernel sends RST, the server's next read fails) again and again; then
Hypothesis sends bytes (request-shaped or not) and half-closes or resets. Every
process stays up and answers its probe, and no answer is a 5xx but a probe's 503
or the 505 that refuses an HTTP version other than 1.0 and 1.1.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dataplane.dev.embedded import free_port
from tests.helpers import BffProcess, WorkerProcess, capcom_process

DATAPLANE_CAPCOM_TOKEN = "capcom-token-for-the-socket-tests"
RESETS = 25  # per server
READ_SECONDS = 3.0  # an answer (or the close) comes within this

Served = WorkerProcess | BffProcess


@pytest.fixture
def servers(bff_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, tuple[int, Served]]]:
    """name -> (port, process): worker health, BFF, capcom."""
    health_port = free_port()
    worker = WorkerProcess(
        {
            **bff_env,
            "SURFACE_QUEUE_TYPE": "surface-probe",
            "DATAPLANE_METRICS": "1",
            "DATAPLANE_METRICS_PORT": str(health_port),
            "DATAPLANE_METRICS_HOST": "127.0.0.1",
        },
        str(tmp_path / "worker.log"),
    )
    bff = BffProcess(bff_env, str(tmp_path / "bff.log"), port=free_port(), args=("-k", "trio"))
    capcom = capcom_process(bff_env, str(tmp_path / "capcom.log"), DATAPLANE_CAPCOM_TOKEN)
    try:
        worker.wait_ready_blocking()
        trio.run(bff.wait_ready)
        trio.run(capcom.wait_ready)
        yield {
            "worker": (health_port, worker),
            "bff": (bff.port, bff),
            "capcom": (capcom.port, capcom),
        }
    finally:
        worker.stop()
        bff.stop()
        capcom.stop()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_SECONDS)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _reset(sock: socket.socket) -> None:
    """Close with RST, not FIN: the peer's next read or write fails."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _answer(sock: socket.socket) -> bytes:
    """What the server sends until it closes (or READ_SECONDS pass)."""
    got = b""
    deadline = time.monotonic() + READ_SECONDS
    try:
        while time.monotonic() < deadline and len(got) < 1 << 20:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    except (TimeoutError, ConnectionError):
        pass
    return got


def _probe_answers(name: str, port: int) -> None:
    path = "/healthz" if name == "worker" else "/readyz"
    resp = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=10)
    assert resp.status_code == 200, (name, resp.status_code, resp.text[:200])


def _assert_running(name: str, proc: Served, after: bytes = b"") -> None:
    assert proc.proc.poll() is None, (
        f"{name} exited after {after[:200]!r}:\n{proc.output()[-4000:]}"
    )


def _assert_well(servers: dict[str, tuple[int, Served]]) -> None:
    for name, (port, proc) in servers.items():
        _assert_running(name, proc)
        _probe_answers(name, port)


@pytest.mark.parametrize(
    "partial",
    [
        b"GET /healthz HTTP/1.1\r\n",
        b"GET /readyz HTT",
        b"",
        b"POST / HTTP/1.1\r\nContent-Length: 9",
    ],
)
def test_a_reset_mid_request_ends_only_that_connection(
    servers: dict[str, tuple[int, Served]], partial: bytes
) -> None:
    for _ in range(RESETS):
        for port, _proc in servers.values():
            sock = _connect(port)
            if partial:
                sock.sendall(partial)
            time.sleep(0.005)  # let the server start reading
            _reset(sock)
    time.sleep(0.3)  # the servers' reads fail now, after the last reset
    _assert_well(servers)


methods = st.sampled_from([b"GET", b"HEAD", b"POST", b"PUT", b"OPTIONS", b"PRI", b"G\x00T", b""])
paths = st.sampled_from([b"/healthz", b"/readyz", b"/metrics", b"*", b"/%2e%2e/"]) | st.binary(
    max_size=40
)
versions = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/9", b""])
headers = st.lists(
    st.sampled_from(
        [
            b"Host: x",
            b"Content-Length: 5",
            b"Content-Length: -1",
            b"Transfer-Encoding: chunked",
            b"Expect: 100-continue",
            b"Connection: keep-alive",
            b"Upgrade: h2c",
            b"X: " + b"y" * 9000,
        ]
    )
    | st.binary(max_size=60),
    max_size=6,
)
requests = st.builds(
    lambda m, p, v, hs, end, body: (
        m + b" " + p + b" " + v + b"\r\n" + b"\r\n".join(hs) + end + body
    ),
    methods,
    paths,
    versions,
    headers,
    st.sampled_from([b"\r\n\r\n", b"\r\n", b"\n\n", b""]),
    st.binary(max_size=40),
)


@settings(
    max_examples=90,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# a HEAD of another version: the 505's body overran h11's length for a HEAD's answer
@example(name="bff", data=b"HEAD / HTTP/2.0\r\nHost: x\r\n\r\n", reset=False)
@example(name="worker", data=b"HEAD / HTTP/2.0\r\n\r\n", reset=False)
@example(name="capcom", data=b"HEAD * HTTP/9\r\n\r\n", reset=False)
@given(
    name=st.sampled_from(["worker", "bff", "capcom"]),
    data=requests | st.binary(max_size=300),
    reset=st.booleans(),
)
def test_no_bytes_end_a_serving_process_or_answer_5xx(
    servers: dict[str, tuple[int, Served]], name: str, data: bytes, reset: bool
) -> None:
    port, proc = servers[name]
    try:
        sock = _connect(port)
    except ConnectionRefusedError:
        raise AssertionError(f"{name} does not listen:\n{proc.output()[-4000:]}") from None
    try:
        sock.sendall(data)
        if reset:
            _reset(sock)
            answer = b""
        else:
            sock.shutdown(socket.SHUT_WR)
            answer = _answer(sock)
    except ConnectionError:
        answer = b""  # the server closed first (an answer, then the rest of our bytes)
    finally:
        sock.close()
    if answer:
        assert answer.startswith(b"HTTP/1."), answer[:80]
        status = int(answer.split(b" ", 2)[1])
        refused_version = status == 505 and b" 505 HTTP Version Not Supported\r\n" in answer
        assert status < 500 or refused_version or (status == 503 and b"unavailable" in answer), (
            answer[:300]
        )
    _assert_running(name, proc, data)
    _probe_answers(name, port)  # and still serves
