"""Hypercorn's connections, HTTP/1.1 only and closed on time: the correctness and
security workarounds of the HTTP edge, on whatever else of the serving stack the
edge replaces for speed (``docs/known-issues.md`` 4 and 6).

* **HTTP/1.1 only.** Hypercorn 0.18 switches a connection to its HTTP/2 protocol on
  the prior-knowledge preface (``PRI * HTTP/2.0``), on ``Upgrade: h2c`` (answered
  ``101``) and on a TLS ALPN of ``h2``; there one DATA frame on a stream whose answer
  has gone raises ``KeyError`` out of the connection and ends the process, every other
  connection with it. Here a connection's protocol is :class:`HTTP11OnlyProtocolWrapper`,
  which never builds Hypercorn's ``H2Protocol``: :class:`HTTP11OnlyProtocol` answers a
  request of any version but 1.0 and 1.1 (the preface among them) ``505`` and closes,
  and serves an ``Upgrade: h2c`` request as HTTP/1.1; TLS offers ``http/1.1`` alone.
* **A peer's FIN closes our side at once.** Hypercorn's trio server runs a
  connection's keep-alive timer in the connection's task group, so when the read loop
  ends (the peer closed) the connection waits for the timer, ``keep_alive_timeout``,
  in CLOSE-WAIT. :class:`HTTP11OnlyProtocolWrapper` stops the timer when the
  connection is closed.
* **A write to a client that does not read ends with the connection.** Hypercorn
  writes a response shielded from cancellation (half a response must never be left
  on a connection), so at shutdown a write blocked on a full send buffer outlasts the
  graceful timeout, forever. :func:`send_until_connection_ends` is still shielded from
  the app's cancellations, but ends (and closes the connection) when the connection's
  own tasks are cancelled: at the end of the shutdown's grace.

* **A request refused before it is parsed says why, as every error of ours does.**
  h11 refuses a head over ``h11_max_incomplete_size`` (Hypercorn's default: 16 KiB; a
  100 KB ``Authorization``) with ``431``, and a malformed one with ``400``; Hypercorn
  answered those with an empty body. :meth:`HTTP11OnlyProtocol._send_error_response`
  answers the JSON error body (``{"error": {"status", "code", "message"}}``) and
  closes. The head was not read, so no ``Accept`` chooses another form (the console's
  HTML error page): every client gets the JSON.

* **A connection's failure ends that connection.** An exception out of the protocol
  (a defect of ours or of h11/Hypercorn, found by a byte no test sent) would end the
  server's nursery, and the process with it; :class:`HTTP11OnlyProtocolWrapper` logs
  it and closes that connection only.

:func:`guard_connections` installs them (idempotent).
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

import h11
import hypercorn.config
import hypercorn.protocol
import hypercorn.trio.tcp_server as hypercorn_tcp_server
import trio
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.protocol import ProtocolWrapper
from hypercorn.protocol.h11 import H2CProtocolRequiredError, H2ProtocolAssumedError, H11Protocol

log = logging.getLogger(__name__)

HTTP1_VERSIONS = frozenset((b"1.0", b"1.1"))  # h11's request-line versions we serve
ALPN = ("http/1.1",)  # what TLS offers


def error_body(status: int, message: str) -> bytes:
    """Our JSON error body, for an answer sent below the app (no ``ApiError`` there)."""
    try:
        code = HTTPStatus(status).name
    except ValueError:
        code = "ERROR"
    error = {"status": status, "code": code, "message": message}
    return json.dumps({"error": error}, separators=(",", ":")).encode()


REFUSAL = error_body(505, "this server speaks HTTP/1.1 only")


def _refusal_message(status: int, head_limit: int) -> str:
    if status == HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE:
        return f"the request's head (its request line and header fields) is over {head_limit} bytes"
    return "a malformed HTTP/1.1 request: it could not be parsed"


class VersionRefused(Exception):
    """A request of an HTTP version we do not serve was answered 505 (no stream)."""


class HTTP11OnlyProtocol(H11Protocol):
    """Hypercorn's HTTP/1.1 protocol, never switching to HTTP/2.

    Stock Hypercorn raises its way into HTTP/2 from ``_check_protocol`` (run for every
    request head): on ``Upgrade: h2c`` after writing ``101``, and on the preface. Here
    the ``Upgrade`` header is left to the app (the request is served as HTTP/1.1,
    RFC 9110 §7.8 lets a server ignore it), and a request line of another version is
    answered ``505`` and the connection closed, before any stream is made for it."""

    async def _check_protocol(self, event: h11.Request) -> None:
        if event.http_version not in HTTP1_VERSIONS:
            await self.refuse_version(head=event.method == b"HEAD")
            raise VersionRefused(event.http_version)

    async def _send_error_response(self, status_code: int) -> None:
        """What h11 refused (``431``: a head too large; ``400``: a malformed one),
        answered with our JSON error body; the caller closes the connection."""
        body = error_body(
            status_code, _refusal_message(status_code, self.config.h11_max_incomplete_size)
        )
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *self.config.response_headers("h11"),
        ]
        await self._send_h11_event(h11.Response(status_code=status_code, headers=headers))
        await self._send_h11_event(h11.Data(data=body))
        await self._send_h11_event(h11.EndOfMessage())

    async def refuse_version(self, *, head: bool = False) -> None:
        """Answer ``505`` with the JSON error body (its length only, to a ``HEAD``:
        RFC 9110 §9.3.2), then close the connection."""
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(REFUSAL)).encode()),
            (b"connection", b"close"),
            *self.config.response_headers("h11"),
        ]
        try:
            await self._send_h11_event(
                h11.Response(status_code=505, headers=headers, reason=b"HTTP Version Not Supported")
            )
            if not head:
                await self._send_h11_event(h11.Data(data=REFUSAL))
            await self._send_h11_event(h11.EndOfMessage())
        finally:
            await self.send(Closed())


class HTTP11OnlyProtocolWrapper(ProtocolWrapper):
    """Hypercorn's per-connection protocol holder, which never holds its HTTP/2 protocol,
    and which stops the keep-alive timer of a connection that is closed.

    It serves with ``hypercorn.protocol.H11Protocol`` when that is an
    :class:`HTTP11OnlyProtocol` (the edge installs its own subclass there), else with
    :class:`HTTP11OnlyProtocol`; whatever TLS negotiated (the preface that follows an
    ALPN of ``h2`` is refused like any). A stock protocol's switch to HTTP/2, should
    one ever be served, closes the connection instead.

    Closed, the connection's keep-alive timer is stopped: when the peer's FIN or a reset
    ends Hypercorn's read loop, the loop hands the protocol :class:`Closed` and the
    connection's task group then waits for its remaining tasks, the timer among them
    (``keep_alive_timeout``, in CLOSE-WAIT). Stopped, the group ends with the
    requests in flight (each is told ``http.disconnect``), and the socket is closed."""

    def __init__(
        self,
        app: Any,
        config: hypercorn.config.Config,
        context: Any,
        task_group: Any,
        state: Any,
        ssl: bool,
        client: tuple[str, int] | None,
        server: tuple[str, int] | None,
        send: Callable[[Event], Awaitable[None]],
        alpn_protocol: str | None = None,
    ) -> None:
        # Not ProtocolWrapper.__init__: on an ALPN of "h2" it builds the H2Protocol.
        self.app = app
        self.config = config
        self.context = context
        self.task_group = task_group
        self.ssl = ssl
        self.client = client
        self.server = server
        self.send = send
        self.state = state
        protocol: Any = getattr(hypercorn.protocol, "H11Protocol", None)
        if not (isinstance(protocol, type) and issubclass(protocol, HTTP11OnlyProtocol)):
            protocol = HTTP11OnlyProtocol
        self.protocol = protocol(app, config, context, task_group, state, ssl, client, server, send)
        self._failed = False  # the protocol raised: the connection is being closed

    async def handle(self, event: Event) -> None:
        try:
            await self.protocol.handle(event)
        except VersionRefused:
            pass  # answered 505 and closed
        except (H2ProtocolAssumedError, H2CProtocolRequiredError):
            await self.send(Closed())  # a stock protocol's switch (a 101 may be out)
        except Exception:
            # Raised out of here it ends the server's nursery: the process, and every
            # other connection with it. A defect of ours or of h11/Hypercorn costs
            # this connection only, and is logged with its traceback.
            if self._failed:
                return  # the close below, handed back to the protocol, failed again
            self._failed = True
            log.exception("connection from %s: the HTTP protocol failed; closed", self.client)
            await self.send(Closed())
        if type(event) is Closed:
            await self.send(Updated(idle=False))  # the keep-alive timer stops


# -- a write that ends with the connection -------------------------------------------------

_stock_protocol_send: Callable[[Any, Event], Awaitable[None]] | None = None


async def send_until_connection_ends(server: Any, event: Event) -> None:
    """Hypercorn's ``TCPServer.protocol_send``, whose write of bytes ends when the
    connection's tasks are cancelled.

    As stock: bytes are written under the connection's send lock, shielded from the
    cancellation of the task writing them (an app's timeout, a request cancelled on
    ``http.disconnect``), and a broken connection is reported to the protocol as
    :class:`Closed`. But the shield is lifted by a watcher task in the connection's
    task group, which is not shielded: when that group is cancelled, which Hypercorn
    does to every connection when a shutdown's ``graceful_timeout`` is over, the
    watcher cancels the write, and the connection, left with half a response, is
    closed. A watcher is started per write. Every other event takes the stock path. A
    server without a task group (not serving yet) writes as stock does."""
    stock = _stock_protocol_send
    assert stock is not None
    if type(event) is not RawData:
        await stock(server, event)
        return
    async with server.send_lock:
        broken = False
        with trio.CancelScope(shield=True) as write:
            watch = _watch_connection(server, write)
            try:
                await server.stream.send_all(event.data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                broken = True
            finally:
                if watch is not None:
                    watch.cancel()
        if write.cancelled_caught:  # the connection is ending: it cannot be used again
            with trio.CancelScope(shield=True):  # a TLS goodbye would block: none
                await trio.aclose_forcefully(server.stream)
            broken = True
        if broken:
            await server.protocol.handle(Closed())


def _watch_connection(server: Any, write: trio.CancelScope) -> trio.CancelScope | None:
    """Start the task that cancels ``write`` when the connection's task group is
    cancelled; returns the scope that ends that task (None: no group to watch from)."""
    nursery = getattr(getattr(server, "_task_group", None), "_nursery", None)
    if not isinstance(nursery, trio.Nursery):
        return None
    watch = trio.CancelScope()
    try:
        nursery.start_soon(_cancel_when_cancelled, watch, write)
    except RuntimeError:  # the group is closing to new tasks: write as stock
        return None
    return watch


async def _cancel_when_cancelled(watch: trio.CancelScope, write: trio.CancelScope) -> None:
    with watch:
        try:
            await trio.sleep_forever()
        finally:
            if not watch.cancel_called:  # cancelled from outside: the connection ends
                write.cancel()


# -- installing ------------------------------------------------------------------------------

_stock_ssl_context: Callable[[hypercorn.config.Config], ssl.SSLContext | None] | None = None


def _http11_ssl_context(config: hypercorn.config.Config) -> ssl.SSLContext | None:
    """Hypercorn's TLS context, offering ``http/1.1`` alone in ALPN."""
    assert _stock_ssl_context is not None
    context = _stock_ssl_context(config)
    if context is not None:
        context.set_alpn_protocols(list(ALPN))
    return context


def guard_connections() -> None:
    """Make Hypercorn's trio connections HTTP/1.1 only, closed on a peer's FIN, with
    writes that end at the shutdown's grace, and its TLS offer ``http/1.1`` alone
    (idempotent; in effect for connections accepted and TLS contexts made from then
    on). Installed before the edge's speed patches, which take it as the stock path."""
    global _stock_protocol_send, _stock_ssl_context
    tcp_server: Any = hypercorn_tcp_server
    config: Any = hypercorn.config.Config
    tcp_server.ProtocolWrapper = HTTP11OnlyProtocolWrapper
    if _stock_protocol_send is None:
        _stock_protocol_send = tcp_server.TCPServer.protocol_send
        tcp_server.TCPServer.protocol_send = send_until_connection_ends
    if _stock_ssl_context is None:
        _stock_ssl_context = config.create_ssl_context
        config.create_ssl_context = _http11_ssl_context
