"""Serving an app in this process (``dataplane bff``, ``dataplane capcom``), and
Hypercorn's logs through ours (:class:`EdgeLogger`)."""

from __future__ import annotations

import importlib
import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import hypercorn.config
import hypercorn.logging
import hypercorn.trio
import trio

from dataplane.core.settings import setting

log = logging.getLogger(__name__)


class EdgeLogger(hypercorn.logging.Logger):
    """Hypercorn's logger, with its error log (on stderr, the default) going through
    the process's own handler (:func:`telemetry.logs.configure_logging`:
    same format, JSON included) and its access log replaced by ``dataplane.access``:
    Hypercorn's request line would carry the query string, hence stream tokens."""

    def __init__(self, config: hypercorn.config.Config) -> None:
        super().__init__(config)
        if self.error_logger is not None and config.errorlog == "-":
            self.error_logger.handlers = []
            self.error_logger.propagate = True
        if self.access_logger is not None:
            self.access_logger = None
            log.warning(
                "Hypercorn's access log is off: dataplane.access logs every request "
                "(without query strings, which carry stream tokens)"
            )


def route_hypercorn_logs() -> None:
    """Make Hypercorn log through :class:`EdgeLogger` (idempotent; in effect for a
    server whose logger is created from then on: Hypercorn creates it after the app's
    startup)."""
    hypercorn.config.Config.logger_class = EdgeLogger


BFF_BIND = "127.0.0.1:8000"
CAPCOM_BIND = "127.0.0.1:8001"
CONSOLE_BIND = "127.0.0.1:8002"  # the operator console: loopback unless told otherwise
KEEP_ALIVE = 75.0  # seconds an idle keep-alive connection is kept (Hypercorn's default: 5)
SHUTDOWN_GRACE = 5.0  # seconds requests in flight may take after SIGTERM, then they are cut
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Stop:
    """This process's server got its stop signal; the scopes to cancel when it does."""

    def __init__(self) -> None:
        self.stopped = False
        self.scopes: set[trio.CancelScope] = set()

    def begin(self) -> None:
        self.stopped = True
        for scope in list(self.scopes):
            scope.cancel()


_STOP = _Stop()


@contextmanager
def cancelled_on_stop() -> Iterator[trio.CancelScope]:
    """A cancel scope cancelled when the server gets its stop signal (SIGTERM, SIGINT)
    and the shutdown grace begins (at once if it already has): a request that waits
    for something (``Prefer: wait``) answers then instead of being cut at the grace's
    end. A set entry, not a task per request: waiting costs nothing until the signal."""
    with trio.CancelScope() as scope:
        if _STOP.stopped:
            scope.cancel()
        _STOP.scopes.add(scope)
        try:
            yield scope
        finally:
            _STOP.scopes.discard(scope)


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """How ``dataplane bff``, ``capcom`` and ``console`` serve (their flags override it)."""

    bff_bind: str = setting("DATAPLANE_BIND", BFF_BIND)
    capcom_bind: str = setting("DATAPLANE_CAPCOM_BIND", CAPCOM_BIND, old=("CAPCOM_BIND",))
    console_bind: str = setting("DATAPLANE_CONSOLE_BIND", CONSOLE_BIND)
    keep_alive_seconds: float = setting("DATAPLANE_KEEP_ALIVE_SECONDS", KEEP_ALIVE, minimum=0)
    shutdown_grace_seconds: float = setting(
        "DATAPLANE_SHUTDOWN_GRACE_SECONDS", SHUTDOWN_GRACE, minimum=0
    )


async def serve_app(
    target: str, *, bind: list[str], keep_alive_seconds: float, shutdown_grace_seconds: float
) -> None:
    """Serve the ASGI app ``module:attribute`` with Hypercorn's trio worker in this
    process, until SIGINT or SIGTERM; then stop taking connections, give the requests
    in flight ``shutdown_grace_seconds``, close what is left (writes to clients that
    do not read included), run the app's shutdown and return.

    An exception that escapes the server propagates: the process exits non-zero.
    (Hypercorn's CLI serves from a worker process and its parent exits 0 whatever
    ended the worker: ``docs/known-issues.md`` 5.) Bind errors and an app that fails
    its startup raise too."""
    module, _, attribute = target.partition(":")
    app = getattr(importlib.import_module(module), attribute)
    config = hypercorn.config.Config()
    config.bind = list(bind)
    config.keep_alive_timeout = keep_alive_seconds
    config.graceful_timeout = shutdown_grace_seconds
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:  # before startup: none lost

        async def wait_for_stop() -> None:
            async for signum in signals:
                log.info(
                    "%s: stopping; requests in flight have %g s",
                    signal.Signals(signum).name,
                    shutdown_grace_seconds,
                )
                _STOP.begin()
                return

        await hypercorn.trio.serve(app, config, shutdown_trigger=wait_for_stop)
