"""The ASGI guard in front of every app we serve (:class:`RequireTrio`).

Under anything but Trio it fails at startup, naming ``-k trio``. Under Trio, each HTTP
request is observed (:class:`~dataplane.http.exchange.Exchange`), its ``send`` goes
through what :func:`use_final_send` installed (the shielded final send of
:mod:`dataplane.compat.hypercorn`: a Hypercorn/Quart-Trio defect,
``docs/known-issues.md`` 1), and a request that expects ``100 Continue`` carries the
hook that sends it (:data:`CONTINUE_EXTENSION`, when :mod:`dataplane.compat.hypercorn`'s
protocol serves the connection). The guard installs nothing: the process's entry point
does (:mod:`dataplane.compat`).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import sniffio
from quart_trio import QuartTrio

from dataplane.http.exchange import _EXCHANGE, Exchange, Receive, Send

CONTINUE_EXTENSION = "dataplane.send_continue"  # ASGI scope extension: await it for a 100
SendContinue = Callable[[], Awaitable[None]]


def continue_hook(scope: dict[str, Any], send: Send) -> SendContinue | None:
    """For a request that expects ``100 Continue`` over our HTTP/1.1 protocol: the
    coroutine function that sends it. ``send`` is Hypercorn's ``HTTPStream.app_send``,
    whose stream sends through the connection's protocol."""
    if not any(
        name == b"expect" and value.strip().lower() == b"100-continue"
        for name, value in scope.get("headers", ())
    ):
        return None
    stream = getattr(send, "__self__", None)
    protocol = getattr(getattr(stream, "send", None), "__self__", None)
    send_continue = getattr(protocol, "send_continue", None)  # only our HTTP/1.1 protocol's
    return send_continue if callable(send_continue) else None


def _as_is(send: Send) -> Send:
    return send


# How the message that ends a response is sent: as the app sends it, unless
# dataplane.compat installs its workaround (shielded from cancellation: known issue 1).
_final_send: Callable[[Send], Send] = _as_is


def use_final_send(wrap: Callable[[Send], Send] | None) -> None:
    """Wrap every request's ``send`` with ``wrap`` (None: send as the app does)."""
    global _final_send
    _final_send = wrap or _as_is


def end_hypercorn_parent() -> None:
    """In a worker process of Hypercorn's CLI (``hypercorn app``, any ``-w``): SIGKILL
    its parent, so the command exits non-zero.

    Hypercorn's parent (0.18, ``hypercorn.run.run``) reads a dead worker's status, then
    overwrites it with that of a final join over the workers still running — none — and
    exits 0 (docs/known-issues.md 5): a worker's own status cannot reach a supervisor.
    Killing the parent is the one channel left without patching Hypercorn. SIGKILL,
    because the parent handles SIGTERM, SIGINT and SIGHUP as a clean stop or a reload.
    Only the parent that spawned this worker (``multiprocessing``, target in
    ``hypercorn``, still our parent) is ended; with ``-w 0`` (no parent) nothing is.
    """
    parent = multiprocessing.parent_process()
    target = getattr(multiprocessing.current_process(), "_target", None)
    if parent is None or parent.pid is None or os.getppid() != parent.pid:
        return
    if not getattr(target, "__module__", "").startswith("hypercorn."):
        return
    print(
        f"error: ending Hypercorn's parent process {parent.pid} with SIGKILL: "
        "its CLI reports a failed worker as exit 0",
        file=sys.stderr,
        flush=True,
    )
    os.kill(parent.pid, signal.SIGKILL)


# -- http.server.request.duration ---------------------------------------------------------


class RequireTrio:
    """ASGI guard: served under anything but Trio, fail at startup with ``message``."""

    def __init__(self, inner: QuartTrio, message: str) -> None:
        self.inner = inner
        self.message = message

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        try:
            library = sniffio.current_async_library()
        except sniffio.AsyncLibraryNotFoundError:
            library = "unknown"
        if library == "trio":
            if scope["type"] != "http":
                await self.inner(scope, receive, send)  # type: ignore[arg-type]
                return
            hook = continue_hook(scope, send)
            if hook is not None:
                extensions = {**(scope.get("extensions") or {}), CONTINUE_EXTENSION: hook}
                scope = {**scope, "extensions": extensions}
            exchange = Exchange(scope)
            token = _EXCHANGE.set(exchange)
            try:
                observed = _final_send(exchange.observe(send))
                await self.inner(scope, receive, observed)  # type: ignore[arg-type]
            except Exception as exc:
                exchange.failed(exc)
                raise
            finally:
                exchange.finish()
                _EXCHANGE.reset(token)
            return
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    # Say why, then end the worker process with a failure status: under
                    # asyncio, Hypercorn would log a failed lifespan and exit 0.
                    print(f"error: {self.message}", file=sys.stderr, flush=True)
                    end_hypercorn_parent()
                    os._exit(3)
                if message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        raise RuntimeError(self.message)
