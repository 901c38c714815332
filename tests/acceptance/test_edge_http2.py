"""The BFF and capcom speak HTTP/1.1 only, and a crash is never an exit status 0
(``docs/known-issues.md`` 4 and 5), through real processes.

Hypercorn 0.18 switches a connection to its HTTP/2 protocol on the prior-knowledge
preface or on ``Upgrade: h2c`` (answered 101); there, one DATA frame on a stream whose
answer has gone ends the whole process (``KeyError`` in ``hypercorn/protocol/h2.py``),
and Hypercorn's CLI parent then exits 0. Here the preface is answered ``505`` and the
connection closed, ``Upgrade: h2c`` is served as HTTP/1.1, TLS offers ``http/1.1``
alone, and the process serves on. Each is tried against ``dataplane bff``, the card's
``hypercorn -k trio dataplane.app:app``, ``dataplane capcom`` and capcom's Hypercorn
command; a real HTTP/2 client (httpx) gets no HTTP/2 either. A Hypothesis property
puts arbitrary bytes around the preface and the upgrade. ``dataplane bff`` serves in
its own process, so an exception that escapes the server (the same ``KeyError``, with
the HTTP/1.1-only guard taken out again) exits non-zero.
"""

from __future__ import annotations

import datetime
import json
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import hpack
import httpx
import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dataplane.dev.embedded import free_port
from tests.conftest import wait_until
from tests.helpers import BffProcess

DATAPLANE_CAPCOM_TOKEN = "capcom-token-for-the-http2-tests-0123456789"
PROMPT = 5.0  # seconds within which an answer (or the server's FIN) comes

# -- HTTP/2 on the wire (RFC 9113 §3.4, §4.1, §6) --------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS = 0x0, 0x1, 0x4
END_STREAM, END_HEADERS = 0x1, 0x4


def h2_frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame: 24-bit length, type, flags, 31-bit stream id, payload."""
    head = struct.pack(">I", len(payload))[1:] + bytes([kind, flags])
    return head + struct.pack(">I", stream) + payload


def h2_get(path: str = "/healthz", stream: int = 1) -> bytes:
    """A GET on ``stream``: HEADERS without END_STREAM (a body may follow)."""
    block = hpack.Encoder().encode(
        [(":method", "GET"), (":scheme", "http"), (":path", path), (":authority", "x")]
    )
    return h2_frame(HEADERS, END_HEADERS, stream, block)


OPENING = PREFACE + h2_frame(SETTINGS, 0, 0) + h2_get()  # prior knowledge, as curl sends it
DATA_ON_1 = h2_frame(DATA, END_STREAM, 1, b"x")  # the frame that ended Hypercorn's process
H2C_UPGRADE = (
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n"
    b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n"
)


async def talk(base: str, *parts: bytes, within: float = PROMPT) -> tuple[bytes, bool]:
    """Send ``parts`` on one connection, reading between them (until ``within`` seconds
    of quiet after the first bytes, or FIN). Returns (all received, server closed)."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    received = b""
    closed = False
    async with await trio.open_tcp_stream(host, int(port)) as stream:
        for part in parts:
            try:
                await stream.send_all(part)
            except trio.BrokenResourceError:
                break  # the server closed first (as it may, after a refusal)
            with trio.move_on_after(within) as wait:
                while not closed:
                    try:
                        chunk = await stream.receive_some(65536)
                    except trio.BrokenResourceError:
                        chunk = b""
                    if not chunk:
                        closed = True
                    received += chunk
                    wait.deadline = trio.current_time() + 0.3  # then the next part
            if closed:
                break
    return received, closed


def assert_refused(answer: bytes, closed: bool) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 505 "), answer[:300]
    assert json.loads(body)["error"]["status"] == 505, body
    assert closed, "the connection was left open after the 505"


async def assert_http2_refused(base: str, proc: BffProcess) -> None:
    """Prior knowledge, a real HTTP/2 client, and ``Upgrade: h2c``: none gets HTTP/2; the
    process serves HTTP/1.1 all along."""
    # Prior knowledge, then the DATA frame that ended the process.
    answer, closed = await talk(base, OPENING, DATA_ON_1)
    assert_refused(answer, closed)
    # The same with a real client: httpx speaking HTTP/2 only.
    async with httpx.AsyncClient(base_url=base, http1=False, http2=True, timeout=PROMPT) as h2:
        with pytest.raises(httpx.HTTPError):
            await h2.get("/healthz")
    # Upgrade: h2c is served as HTTP/1.1 (no 101), and the connection goes on in
    # HTTP/1.1; HTTP/2 sent on it after the answer is refused like prior knowledge.
    again = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    answer, closed = await talk(base, H2C_UPGRADE, again, OPENING, DATA_ON_1)
    assert b" 101 " not in answer, answer[:300]
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
    assert answer.count(b'{"status":"ok"}') == 2, answer
    assert_refused(answer[answer.index(b"HTTP/1.1 505 ") :], closed)
    # A HEAD of another version: the 505's head alone (its body would overrun the
    # length h11 declares for a HEAD's answer, 0: that raised and ended the process).
    answer, closed = await talk(base, b"HEAD /healthz HTTP/2.0\r\nHost: x\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 505 ") and body == b"" and closed, answer[:300]
    # Served on, over HTTP/1.1.
    assert proc.proc.poll() is None, f"the process ended:\n{proc.output()}"
    async with httpx.AsyncClient(base_url=base, timeout=PROMPT) as http:
        resp = await http.get("/healthz")
    assert resp.status_code == 200 and resp.http_version == "HTTP/1.1"
    assert "KeyError" not in proc.output()


SERVED = {
    "dataplane bff": {"command": ("-m", "dataplane", "bff")},
    "hypercorn -k trio dataplane.app:app": {"args": ("-k", "trio")},
    "dataplane capcom": {"command": ("-m", "dataplane", "capcom")},
    "hypercorn -k trio dataplane.capcom.app:app": {
        "args": ("-k", "trio"),
        "app": "dataplane.capcom.app:app",
    },
}


@pytest.mark.parametrize("served", list(SERVED))
async def test_http2_is_refused_and_the_process_serves_on(
    served: str, bff_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**bff_env, "DATAPLANE_CAPCOM_TOKEN": DATAPLANE_CAPCOM_TOKEN}
    proc = BffProcess(env, str(tmp_path / "served.log"), port=free_port(), **SERVED[served])  # type: ignore[arg-type]
    try:
        await proc.wait_ready()
        await assert_http2_refused(proc.base, proc)
    finally:
        proc.stop()


# -- a crash exits non-zero ------------------------------------------------------------

# `dataplane bff` with the HTTP/1.1-only guard taken out again after the app installed
# it (Hypercorn's own protocols back): Hypercorn's HTTP/2 protocol, and its KeyError,
# are reachable as on Hypercorn alone.
UNGUARDED_BFF = """
import sys
import hypercorn.protocol
import hypercorn.protocol.h11
import hypercorn.trio.tcp_server
import dataplane.bff.app
from dataplane.compat import install_edge

def install_then_unguard(app):
    installed = install_edge(app)  # the edge, the HTTP/1.1-only guard with it; then undone
    hypercorn.trio.tcp_server.ProtocolWrapper = hypercorn.protocol.ProtocolWrapper
    hypercorn.protocol.H11Protocol = hypercorn.protocol.h11.H11Protocol
    return installed

dataplane.bff.app.install_edge = install_then_unguard
from dataplane.cli import main
sys.exit(main(sys.argv[1:]))
"""


async def test_an_exception_that_ends_the_server_exits_non_zero(
    bff_env: dict[str, str], tmp_path: Path
) -> None:
    proc = BffProcess(
        bff_env, str(tmp_path / "bff.log"), port=free_port(), command=("-c", UNGUARDED_BFF, "bff")
    )
    try:
        await proc.wait_ready()
        host, port = "127.0.0.1", proc.port
        async with await trio.open_tcp_stream(host, port) as stream:
            await stream.send_all(OPENING)
            await stream.receive_some(65536)  # HTTP/2: SETTINGS, then the answer
            with trio.move_on_after(1):
                while await stream.receive_some(65536):
                    pass
            await stream.send_all(DATA_ON_1)
        await wait_until(lambda: proc.proc.poll() is not None, within=20, interval=0.05)
        assert "KeyError: 1" in proc.output(), proc.output()[-3000:]
        assert proc.proc.returncode != 0, "the server ended with an exception, and exit 0"
    finally:
        proc.stop()


# `dataplane bff` with a defect put into its HTTP protocol: a request for /defect raises
# out of the protocol's handling of the bytes, as a defect of ours or of h11 would.
DEFECTIVE_BFF = """
import sys
from dataplane.compat.http11 import HTTP11OnlyProtocol

checked = HTTP11OnlyProtocol._check_protocol

async def defective(self, event):
    if event.target == b"/defect":
        raise RuntimeError("a defect in the protocol")
    await checked(self, event)

HTTP11OnlyProtocol._check_protocol = defective
from dataplane.cli import main
sys.exit(main(sys.argv[1:]))
"""


async def test_an_exception_out_of_a_connection_ends_that_connection_only(
    bff_env: dict[str, str], tmp_path: Path
) -> None:
    proc = BffProcess(
        bff_env, str(tmp_path / "bff.log"), port=free_port(), command=("-c", DEFECTIVE_BFF, "bff")
    )
    try:
        await proc.wait_ready()
        async with httpx.AsyncClient(base_url=proc.base, timeout=PROMPT) as http:
            for _ in range(3):
                answer, closed = await talk(proc.base, b"GET /defect HTTP/1.1\r\nHost: x\r\n\r\n")
                assert closed and b" 5" not in answer[:12], answer[:300]
                assert proc.proc.poll() is None, proc.output()[-3000:]
                assert (await http.get("/healthz")).status_code == 200
        assert proc.output().count("the HTTP protocol failed; closed") == 3, proc.output()[-3000:]
        assert "RuntimeError: a defect in the protocol" in proc.output()
    finally:
        proc.stop()


# -- TLS: ALPN offers http/1.1 alone ---------------------------------------------------


def self_signed(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def tls_exchange(port: int, alpn: list[str], request: bytes) -> tuple[str | None, bytes]:
    """(the ALPN protocol the server chose, what it answered ``request``)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(alpn)
    with socket.create_connection(("127.0.0.1", port), timeout=PROMPT) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            chosen = tls.selected_alpn_protocol()
            tls.sendall(request)
            answer = b""
            try:
                while chunk := tls.recv(65536):
                    answer += chunk
            except (TimeoutError, ssl.SSLError, OSError):
                pass
    return chosen, answer


def test_tls_offers_http11_alone(bff_env: dict[str, str], tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    port = free_port()
    proc = BffProcess(
        bff_env,
        str(tmp_path / "bff.log"),
        port=port,
        args=("-k", "trio", "--certfile", str(cert), "--keyfile", str(key)),
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.proc.poll() is None, proc.output()
            try:
                if httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False).is_success:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, proc.output()
            time.sleep(0.1)
        close = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        chosen, answer = tls_exchange(port, ["h2", "http/1.1"], close)
        assert chosen == "http/1.1"
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
        # A client that insists on h2 gets no h2: its preface is refused.
        chosen, answer = tls_exchange(port, ["h2"], OPENING + DATA_ON_1)
        assert chosen != "h2"
        assert answer.startswith(b"HTTP/1.1 505 "), answer[:300]
        assert proc.proc.poll() is None, proc.output()
        assert httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False).status_code == 200
    finally:
        proc.stop()


# -- the property: whatever surrounds the preface or the upgrade ---------------------------

PROPERTY = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
OPENINGS = {
    "prior knowledge": OPENING + DATA_ON_1,
    "h2c": H2C_UPGRADE,
    "h2c, then prior knowledge": H2C_UPGRADE + OPENING + DATA_ON_1,
}


@pytest.fixture(scope="module")
def served_bff(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BffProcess]:
    """One `dataplane bff` for the property and the check after it (its plane need not
    be configured: /healthz answers all the same)."""
    log = tmp_path_factory.mktemp("property") / "bff.log"
    proc = BffProcess({}, str(log), port=free_port(), command=("-m", "dataplane", "bff"))
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.proc.poll() is None, proc.output()
            try:
                if httpx.get(f"{proc.base}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, proc.output()
            time.sleep(0.1)
        yield proc
    finally:
        proc.stop()


def exchange_blocking(port: int, data: bytes, split: int) -> bytes:
    """Send ``data`` in two writes; read until FIN, half-closing after a quiet moment."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=PROMPT) as sock:
        try:
            sock.sendall(data[:split])
            sock.sendall(data[split:])
        except OSError:
            return received  # refused and closed before all of it was sent
        sock.settimeout(0.3)
        half_closed = False
        deadline = time.monotonic() + PROMPT
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                if not half_closed:  # nothing more comes: say we are done
                    sock.shutdown(socket.SHUT_WR)
                    half_closed = True
                continue
            except OSError:
                break
            if not chunk:
                break
            received += chunk
    return received


@PROPERTY
@given(
    opening=st.sampled_from(sorted(OPENINGS)),
    before=st.binary(max_size=48) | st.sampled_from([b"", b"\r\n", b"GET / HTTP/1.1\r\n"]),
    after=st.binary(max_size=256),
    split=st.integers(min_value=0, max_value=400),
)
@example(opening="prior knowledge", before=b"", after=b"", split=0)
@example(opening="h2c", before=b"", after=OPENING + DATA_ON_1, split=24)
def test_no_bytes_around_an_http2_opening_get_http2_or_end_the_server(
    served_bff: BffProcess, opening: str, before: bytes, after: bytes, split: int
) -> None:
    data = before + OPENINGS[opening] + after
    answer = exchange_blocking(served_bff.port, data, min(split, len(data)))
    if answer:
        assert answer.startswith(b"HTTP/1.1 "), answer[:200]  # never an HTTP/2 frame
    assert b"HTTP/1.1 101" not in answer, answer[:400]
    assert served_bff.proc.poll() is None, served_bff.output()[-3000:]


def test_the_property_leaves_the_server_serving(served_bff: BffProcess) -> None:
    """The property's server, after the whole run of it (this test comes after it),
    still serves HTTP/1.1 and has logged no traceback."""
    for data in OPENINGS.values():
        exchange_blocking(served_bff.port, b"\x00" + data, 1)
    assert httpx.get(f"{served_bff.base}/healthz").status_code == 200
    assert served_bff.proc.poll() is None
    assert "Traceback" not in served_bff.output(), served_bff.output()[-3000:]
