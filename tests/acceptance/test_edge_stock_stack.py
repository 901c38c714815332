"""The connection guards alone, on Hypercorn's own serving stack.

``dataplane.compat.http11.guard_connections`` is what stays on when none of the edge's
speed patches is installed (no lean send, no keep-alive timer of ours, Hypercorn's own
HTTP/1.1 protocol). Here it guards a bare ASGI app served by ``hypercorn -k trio``:
HTTP/2 is refused and ``Upgrade: h2c`` served as HTTP/1.1, the process serves on; a
connection the peer closes is closed at once; and SIGTERM stops the server within its
grace while clients that never read keep its (stock, shielded) writes blocked.
"""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import httpx
import trio

from dataplane.dev.embedded import free_port
from tests.acceptance.test_edge_connections import close_waits, unread
from tests.acceptance.test_edge_http2 import (
    DATA_ON_1,
    H2C_UPGRADE,
    OPENING,
    PROMPT,
    assert_refused,
    talk,
)
from tests.conftest import wait_until
from tests.helpers import BffProcess

BIG = 2_000_000  # bytes of /big
GRACE = 2  # seconds

APP = f'''
"""A bare ASGI app, served with the connection guards and nothing else of the edge."""
from dataplane.compat.http11 import guard_connections

guard_connections()


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].rsplit(".", 1)[-1]
            await send({{"type": f"lifespan.{{kind}}.complete"}})
            if kind == "shutdown":
                return
    body = b"x" * {BIG} if scope["path"] == "/big" else b"ok"
    headers = [(b"content-length", str(len(body)).encode())]
    await send({{"type": "http.response.start", "status": 200, "headers": headers}})
    await send({{"type": "http.response.body", "body": body}})
'''


async def test_the_guards_alone_on_hypercorns_own_stack(tmp_path: Path) -> None:
    (tmp_path / "guarded_stock_app.py").write_text(APP)
    app = f"{tmp_path / 'guarded_stock_app'}:app"
    args = ("-k", "trio", "--keep-alive", "75", "--graceful-timeout", str(GRACE))
    proc = BffProcess({}, str(tmp_path / "app.log"), port=free_port(), args=args, app=app)
    clients: list[socket.socket] = []
    try:
        async with httpx.AsyncClient(base_url=proc.base, timeout=PROMPT) as http:

            async def serving() -> bool:
                assert proc.proc.poll() is None, proc.output()
                try:
                    return (await http.get("/")).status_code == 200
                except httpx.HTTPError:
                    return False

            await wait_until(serving, within=30, interval=0.1)
            # HTTP/1.1 only.
            answer, closed = await talk(proc.base, OPENING, DATA_ON_1)
            assert_refused(answer, closed)
            answer, _ = await talk(proc.base, H2C_UPGRADE)
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
            assert (await http.get("/")).status_code == 200
        # A peer's FIN closes our side at once.
        for _ in range(100):
            stream = await trio.open_tcp_stream("127.0.0.1", proc.port)
            await stream.aclose()
        await wait_until(lambda: close_waits(proc) == 0, within=PROMPT, interval=0.1)
        # SIGTERM with writes blocked on clients that never read: within the grace.
        for _ in range(3):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", proc.port))
            sock.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
            clients.append(sock)
        await wait_until(lambda: all(unread(s) > 0 for s in clients), within=PROMPT)
        started = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        await wait_until(lambda: proc.proc.poll() is not None, within=GRACE + 20, interval=0.05)
        took = time.monotonic() - started
        assert proc.proc.returncode == 0, proc.output()[-3000:]
        assert took <= GRACE + 3, f"stopped {took:.1f} s after SIGTERM (grace {GRACE} s)"
        assert "Traceback" not in proc.output(), proc.output()[-3000:]
    finally:
        for sock in clients:
            sock.close()
        proc.stop()
