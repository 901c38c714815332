"""psycopg 3.3 on trio-asyncio's loop: what we replace, and why.

* ``running_loop`` (correctness, always on): :func:`bind_running_loop` rebinds
  ``psycopg.waiting.get_running_loop``. trio-asyncio replaces
  ``asyncio.get_running_loop`` with a version that knows its loop; ``psycopg.waiting``
  binds the name at import, so a psycopg imported before trio-asyncio holds the
  original and fails with "no running event loop". The rebinding makes import order
  irrelevant.
* ``lean_wait`` (speed): :class:`LeanConnection`, an ``AsyncConnection`` whose ``wait``
  (psycopg's own, overridden) arms no loop timer, as every connection the plane opens
  (:func:`dataplane.db.connection.use_connection_class`); it raises psycopg's private
  ``psycopg.errors._WaitTimeout`` as psycopg's own wait does.

psycopg's stock ``AsyncConnection.wait`` arms a fresh ``call_later`` timer at
every wait (its polling interval) and cancels it afterwards. On trio-asyncio a
timer is not free: each one is a handle sent through the loop's queue, one more
pass of the loop's Trio task, a heap push, and the same again to cancel it. For
a statement that waits once for its answer that timer roughly doubles the
cost of the bridge crossing (``docs/perf/bff-cpu.md``; against the stock path:
``docs/perf/compat-ab.md``).

:class:`LeanConnection` waits without it: the socket is polled first (a
zero-timeout poll, as psycopg does for writing; an answer already there also
skips any waiting), otherwise one Trio waiter of the bridge's resolves one future
(:func:`~dataplane.db.bridge.wait_fd`; the loop's ``add_reader`` costs more, see
:mod:`dataplane.db.bridge`). Nothing else changes:

* a wait *with* a timeout (``notifies(timeout=...)``, the listener's) is the same
  wait with a deadline on the waiter, and ends with psycopg's ``_WaitTimeout`` as
  psycopg's own does. psycopg's own also woke every 0.1 s so that a blocked thread
  could see Ctrl-C, which under Trio arrives as a cancellation anyway: it woke an
  idle listening process at every interval;
* on a loop that is no bridge's (no waiter nursery), and for a wait on reading *and*
  writing at once, the loop's reader/writer callbacks resolve the future, and a timed
  wait arms one timer for its deadline;
* deadlines stay the caller's Trio cancel scopes (``Database.run``'s call timeout);
* a cancelled wait (the asyncio task cancelled from Trio) asks the server to cancel
  a running statement, as psycopg does, then closes the connection: its state is
  unknown, and the pool never reuses a connection cancelled mid-call anyway.

Tested with psycopg 3.3 (requirements.lock; pyproject.toml caps it below 3.4).
Installed by :func:`install` from the entry points (:func:`dataplane.compat.install_process`),
never at import.
"""

from __future__ import annotations

import asyncio
import logging
import select
import time
from collections.abc import Collection
from typing import Any

import psycopg
import psycopg.waiting
from psycopg.abc import PQGen
from psycopg.rows import Row
from psycopg.waiting import READY_R, READY_W, WAIT_R, WAIT_RW, WAIT_W

from dataplane.db.bridge import has_waiters, wait_fd
from dataplane.db.connection import use_connection_class

log = logging.getLogger(__name__)

DISTRIBUTION = "psycopg"
TESTED = ((3, 3),)  # minor versions; requirements.lock pins the patch release
CORRECTNESS = ("running_loop",)
SPEED = ("lean_wait",)
# The private (or undocumented) names of psycopg this module reads or replaces
# (tests/unit/test_compat.py checks each exists with the shape used).
REACHES = (
    "psycopg.waiting.get_running_loop",
    "psycopg.waiting.WAIT_R",
    "psycopg.waiting.WAIT_W",
    "psycopg.waiting.WAIT_RW",
    "psycopg.waiting.READY_R",
    "psycopg.waiting.READY_W",
    "psycopg.errors._WaitTimeout",
    "psycopg.AsyncConnection.wait",
    "psycopg.AsyncConnection.cancel_safe",
    "psycopg.abc.PQGen",
)

CANCEL_TIMEOUT = 5.0  # seconds a server-side cancel request may take

_ACTIVE = psycopg.pq.TransactionStatus.ACTIVE


class LeanConnection(psycopg.AsyncConnection[Row]):
    """A psycopg ``AsyncConnection`` whose waits arm no loop timer (see module doc)."""

    async def wait(
        self,
        gen: PQGen[Any],
        interval: float = 0.1,
        timeout: float | None = None,  # noqa: ASYNC109 (psycopg's signature, overridden)
    ) -> Any:
        if timeout is not None and not has_waiters(asyncio.get_running_loop()):
            # a loop that is no bridge's: psycopg's own timed wait, one wake-up at the
            # deadline rather than one per 0.1 s
            return await super().wait(gen, max(interval, timeout), timeout)
        try:
            return await wait_socket(gen, self.pgconn.socket, timeout)
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            if self.pgconn.transaction_status == _ACTIVE:
                try:
                    await self.cancel_safe(timeout=CANCEL_TIMEOUT)
                except Exception as exc:  # the close below is what matters
                    log.warning("query cancellation failed: %s", exc)
                self.pgconn.finish()
            raise


async def wait_socket(gen: PQGen[Any], fileno: int, within: float | None = None) -> Any:
    """Drive a psycopg generator to its end on the running (trio-asyncio) loop.

    With ``within`` (seconds: psycopg's ``timeout``), psycopg's ``_WaitTimeout`` once it
    has passed, as psycopg's own wait raises it (``notifies(timeout=...)`` ends on it);
    the socket is still polled once first, so 0 polls."""
    loop = asyncio.get_running_loop()
    deadline = None if within is None else time.monotonic() + within
    try:
        state = next(gen)
        while True:
            ready = _ready_now(fileno, state)
            if not ready:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise psycopg.errors._WaitTimeout("wait timeout expired")
                ready = await _readiness(loop, fileno, state, left)
                if not ready:
                    raise psycopg.errors._WaitTimeout("wait timeout expired")
            state = gen.send(ready)
    except StopIteration as done:
        return done.value
    except OSError as exc:
        raise psycopg.OperationalError("connection socket closed") from exc


async def _readiness(
    loop: asyncio.AbstractEventLoop, fileno: int, state: int, within: float | None
) -> int:
    """Wait for what ``state`` asks, ``within`` seconds at most (then 0): one Trio
    waiter of the bridge's for a read or a write (:func:`~dataplane.db.bridge.wait_fd`),
    else the first of the loop's reader/writer callbacks (both at once, or a loop that
    is no bridge's)."""
    if state != WAIT_RW and has_waiters(loop):
        write = state == WAIT_W
        if not await wait_fd(loop, fileno, write=write, within=within):
            return 0
        return READY_W if write else READY_R
    fut: asyncio.Future[int] = loop.create_future()

    def wakeup(ready: int) -> None:
        if not fut.done():
            fut.set_result(ready)

    reader, writer = state & WAIT_R, state & WAIT_W
    if reader:
        loop.add_reader(fileno, wakeup, READY_R)
    if writer:
        loop.add_writer(fileno, wakeup, READY_W)
    timer = loop.call_later(within, wakeup, 0) if within is not None else None
    try:
        return await fut
    finally:
        if timer is not None:
            timer.cancel()
        if reader:
            loop.remove_reader(fileno)
        if writer:
            loop.remove_writer(fileno)


def _ready_now(fileno: int, state: int) -> int:
    """The socket's readiness for what ``state`` asks, right now (a zero-timeout poll)."""
    poller = select.poll()
    poller.register(
        fileno, (select.POLLIN if state & WAIT_R else 0) | (select.POLLOUT if state & WAIT_W else 0)
    )
    ready = 0
    for _fd, events in poller.poll(0):
        if events & select.POLLIN:
            ready |= READY_R
        if events & select.POLLOUT:
            ready |= READY_W
    return ready


def bind_running_loop() -> None:
    """Make psycopg find trio-asyncio's loop whatever the import order (idempotent):
    ``psycopg.waiting`` gets the ``asyncio.get_running_loop`` that trio-asyncio
    installed when it was imported."""
    if getattr(psycopg.waiting, "get_running_loop", None) is not asyncio.get_running_loop:
        setattr(psycopg.waiting, "get_running_loop", asyncio.get_running_loop)  # noqa: B010


def install(stock: Collection[str]) -> list[str]:
    """Install this module's replacements except the speed ones named in ``stock``
    (the correctness one always); return the names installed."""
    bind_running_loop()
    if "lean_wait" in stock:
        use_connection_class(None)  # psycopg's own AsyncConnection
        return ["running_loop"]
    use_connection_class(LeanConnection)
    return ["running_loop", "lean_wait"]
