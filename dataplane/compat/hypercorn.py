"""Hypercorn 0.18: what we replace in its HTTP/1.1 trio server, and why.

* ``deferred_continue`` (correctness, always on): :class:`DeferredContinueH11Protocol`
  replaces ``hypercorn.protocol.H11Protocol`` so ``100 Continue`` goes out only once
  the app reads the body (``docs/known-issues.md`` 2).
* ``corking`` (speed): the same protocol joins a sized response's head to its body in
  one socket write, and holds a part a route corked
  (:func:`~dataplane.http.exchange.cork_next_write`: a hint that the next part follows
  at once) for the write of the next; left out, every part is written as it comes.
* ``keep_alive_timer`` (speed): :class:`KeepAliveTimer` replaces
  ``hypercorn.trio.tcp_server.TrioSingleTask`` (reads the task group's ``_nursery``).
* ``edge_logger`` (ours, always on): :class:`~dataplane.http.serve.EdgeLogger` as
  ``hypercorn.config.Config.logger_class``.

* ``shielded_final_send`` (correctness, always on, even outside the tested versions):
  :func:`shield_final_send` wraps every request's ``send`` (through
  :func:`dataplane.http.guard.use_final_send`) so the message that ends a response is
  sent shielded and the connection closes (``docs/known-issues.md`` 1).

What each speed name measured against the stock path: ``docs/perf/compat-ab.md``.

Connections are HTTP/1.1 only and closed on time whatever is installed
(:func:`dataplane.compat.http11.guard_connections`, a correctness workaround).

Tested with hypercorn 0.18.0 (requirements.lock; pyproject.toml caps it below 0.19).
Installed by :func:`install` from the entry points (:mod:`dataplane.compat`), never
at import.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any

import h11
import hypercorn.protocol
import hypercorn.trio.tcp_server as hypercorn_tcp_server
import trio
from hypercorn.events import RawData
from hypercorn.protocol.events import StreamClosed

from dataplane.compat.http11 import HTTP11OnlyProtocol, guard_connections
from dataplane.http.exchange import Send, current_exchange, ends_response
from dataplane.http.guard import use_final_send
from dataplane.http.serve import route_hypercorn_logs

DISTRIBUTION = "hypercorn"
TESTED = ((0, 18),)  # minor versions; requirements.lock pins 0.18.0
CORRECTNESS = ("deferred_continue", "edge_logger", "shielded_final_send")
SPEED = ("keep_alive_timer", "corking")
# The private names of Hypercorn this module reads or replaces (tests/unit/test_compat.py).
REACHES = (
    "hypercorn.protocol.H11Protocol",
    "hypercorn.protocol.h11.H11Protocol._send_h11_event",
    "hypercorn.protocol.h11.H11Protocol.stream_send",
    "hypercorn.trio.tcp_server.TrioSingleTask",
    "hypercorn.trio.tcp_server.TCPServer.protocol_send",
)

_H11: Any = h11  # the HTTP/1.1 state machine Hypercorn speaks


class _DeferredContinueConnection:
    """Hypercorn's h11 server connection, reporting a client that waits for ``100
    Continue`` only once the app asked for the body (Hypercorn then sends the 100)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.continue_wanted = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def they_are_waiting_for_100_continue(self) -> bool:
        return self.continue_wanted and bool(self._inner.they_are_waiting_for_100_continue)

    def start_next_cycle(self) -> None:
        self._inner.start_next_cycle()
        self.continue_wanted = False


class DeferredContinueH11Protocol(HTTP11OnlyProtocol):
    """Hypercorn's HTTP/1.1 protocol (HTTP/1.1 only: :mod:`dataplane.compat.http11`), but
    ``100 Continue`` waits for the app.

    Stock Hypercorn sends ``100 Continue`` as soon as it has parsed the headers of a
    request carrying ``Expect: 100-continue``, before the app has even seen it: a
    client is invited to send its body to be refused (401) anyway. Here the 100 goes
    out when the app first reads the body (:meth:`send_continue`), and never when it
    answers first (a response ends the client's wait, RFC 9110 §10.1.1). And, with
    :attr:`corking`, a sized response's head is written together with its body (one
    socket write fewer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connection = _DeferredContinueConnection(self.connection)  # type: ignore[assignment]
        self._held = b""  # bytes of a response not written yet (they lead the next write)

    corking = True  # the ``corking`` replacement (speed): off, every part goes at once

    async def _send_h11_event(self, event: Any) -> None:
        # A sized response's head leaves with its body (or its end): one socket write
        # instead of two. A stream's head (no Content-Length: its first event may be
        # minutes away) or body part is held only when the route corked it
        # (cork_next_write): the part that follows is known to come at once.
        kind = type(event)
        if self.corking and (kind is _H11.Response or kind is _H11.Data):
            exchange = current_exchange()
            corked = exchange is not None and exchange.corked
            if corked or (
                kind is _H11.Response and any(n == b"content-length" for n, _ in event.headers)
            ):
                if corked:
                    exchange.corked = False  # type: ignore[union-attr]
                try:
                    self._held += self.connection.send(event) or b""
                except _H11.LocalProtocolError:
                    if self.connection.their_state != _H11.ERROR:
                        raise
                return
        held, self._held = self._held, b""
        try:
            data = held + (self.connection.send(event) or b"")
        except _H11.LocalProtocolError:
            if self.connection.their_state != _H11.ERROR:
                raise
            data = held
        if data:
            await self.send(RawData(data=data))

    async def stream_send(self, event: Any) -> None:
        if isinstance(event, StreamClosed) and self._held:  # never lose held bytes
            held, self._held = self._held, b""
            await self.send(RawData(data=held))
        await super().stream_send(event)

    async def send_continue(self) -> None:
        connection: Any = self.connection
        if not isinstance(connection, _DeferredContinueConnection):
            return  # upgraded to a WebSocket meanwhile
        connection.continue_wanted = True
        if connection.they_are_waiting_for_100_continue:
            await self._send_h11_event(
                _H11.InformationalResponse(
                    status_code=100, headers=self.config.response_headers("h11")
                )
            )


def shield_final_send(send: Send) -> Send:
    """``send``, with the message that ends a response shielded from cancellation.

    Hypercorn's trio server finishes a response *inside* that ``send``: it hands the
    app ``http.disconnect``, then either closes the socket (``Connection: close``,
    HTTP/1.0, a close-delimited body such as an SSE stream) or arms the keep-alive
    timer. Quart-Trio cancels the request's nursery as soon as it receives that
    ``http.disconnect`` — so, unshielded, the close (or the timer) is cancelled half
    way and the connection is never closed (docs/known-issues.md). Sending bytes is
    already shielded by Hypercorn; this adds only the bookkeeping that follows the
    last one, which does not wait on the peer (``send_eof``/``aclose``, starting a
    timer, one message to the app's receive channel).
    """

    async def send_shielded_at_end(message: dict[str, Any]) -> None:
        if ends_response(message):
            with trio.CancelScope(shield=True):
                await send(message)
        else:
            await send(message)

    return send_shielded_at_end


def shield_final_sends() -> None:
    """Send the message that ends every response shielded (idempotent)."""
    use_final_send(shield_final_send)


def defer_100_continue() -> None:
    """Make Hypercorn serve HTTP/1.1 with :class:`DeferredContinueH11Protocol`
    (idempotent; in effect for connections accepted from then on)."""
    hypercorn.protocol.H11Protocol = DeferredContinueH11Protocol  # type: ignore[attr-defined]


class KeepAliveTimer:
    """Hypercorn's per-connection keep-alive timer (the ``TrioSingleTask`` of
    ``hypercorn.trio.tcp_server``) without its lock and its start handshake.

    Hypercorn stops the timer when a request arrives and restarts it when the
    connection goes idle, on every keep-alive request. Its own version takes a
    ``trio.Lock`` both times and restarts through ``nursery.start``: three scheduler
    passes and a start handshake per request (its cost: ``docs/perf/compat-ab.md``).
    Here neither call has a checkpoint (both are atomic under Trio without a lock);
    the timer task is still spawned in the connection's task group, so it ends with
    the connection, and it runs in a cancel scope of its own that the next
    :meth:`stop` or :meth:`restart` cancels. With no checkpoint, a restart from a
    cancelled scope (the final send of a response, ``docs/known-issues.md`` 1) still
    starts the timer."""

    __slots__ = ("_scope",)

    def __init__(self) -> None:
        self._scope: trio.CancelScope | None = None

    async def restart(self, task_group: Any, action: Callable[[], Awaitable[None]]) -> None:
        if self._scope is not None:
            self._scope.cancel()
        self._scope = scope = trio.CancelScope()
        task_group._nursery.start_soon(_keep_alive, scope, action)

    async def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None


async def _keep_alive(scope: trio.CancelScope, action: Callable[[], Awaitable[None]]) -> None:
    with scope:
        await action()


def lean_keep_alive_timer() -> None:
    """Make Hypercorn's trio connections use :class:`KeepAliveTimer` (idempotent; in
    effect for connections accepted from then on). Left alone when this Hypercorn's
    trio server has no ``TrioSingleTask`` to replace (its layout changed)."""
    if isinstance(getattr(hypercorn_tcp_server, "TrioSingleTask", None), type):
        setattr(hypercorn_tcp_server, "TrioSingleTask", KeepAliveTimer)  # noqa: B010


STOCK_H11_PROTOCOL = hypercorn.protocol.H11Protocol  # type: ignore[attr-defined]
STOCK_SINGLE_TASK = getattr(hypercorn_tcp_server, "TrioSingleTask", None)


def install(stock: Collection[str]) -> list[str]:
    """Install this module's replacements except the speed ones named in ``stock``
    (the correctness ones always); return the names installed."""
    guard_connections()  # HTTP/1.1 only and connections closed on time: always on
    shield_final_sends()
    defer_100_continue()
    route_hypercorn_logs()
    installed = ["deferred_continue", "edge_logger", "shielded_final_send"]
    DeferredContinueH11Protocol.corking = "corking" not in stock
    if DeferredContinueH11Protocol.corking:
        installed.append("corking")
    if "keep_alive_timer" not in stock:
        lean_keep_alive_timer()
        installed.append("keep_alive_timer")
    return installed
