"""The Trio <-> asyncio bridge that psycopg 3 runs on.

:func:`open_bridge` opens the one asyncio loop of a process (trio-asyncio); the
process's root nursery enters it once, and from then on every Trio task can use
a :class:`~dataplane.db.pool.Database` or :class:`~dataplane.db.listener.Listener`
made from it: they keep a reference to the loop, so request handlers need no
loop context of their own. :func:`run_on_loop` is one bridge crossing.

A crossing costs Trio scheduler passes, and on a 2-core host at idle each pass
is tens of microseconds (an ``epoll_wait`` and the scheduler's bookkeeping, with
cold caches). Two of trio-asyncio's generic steps are not needed here, so the
bridge does without them (``docs/perf/bridge.md``):

* the way back: trio-asyncio's ``run_aio_coroutine`` wakes the Trio caller from a
  done callback of the asyncio task, which asyncio schedules as one more handle
  through the loop's queue (one more pass of the loop's Trio task). Here the
  coroutine's last step wakes the caller itself (:class:`_Crossing`);
* socket waits: trio-asyncio's ``add_reader`` spawns a Trio task that, once the
  socket is ready, runs the callback, then queues one more handle and waits for
  the loop to reach it (``synchronize``), and is cancelled (an exception unwound)
  by ``remove_reader``. :func:`wait_fd` spawns one plain waiter in a nursery the
  bridge owns (:func:`open_bridge`), which resolves the asyncio future and ends.

Both use trio-asyncio's and asyncio's public API only (``trio_asyncio.open_loop``,
``trio_asyncio.current_loop``, the loop's ``create_task`` / ``create_future``), and
rely on trio-asyncio running the loop's handles in a Trio task of this thread, its
design (``tests/unit/test_compat.py`` pins it). psycopg is made to find this loop by
:mod:`dataplane.compat.psycopg` (``running_loop``), installed by the entry points.

The coroutine still runs as an asyncio task on trio-asyncio's loop, and a Trio
cancellation still cancels that task (psycopg then cancels the statement on the
server, :mod:`dataplane.compat.psycopg`). A ``KeyboardInterrupt`` or ``SystemExit`` on
the asyncio side reaches the loop as well as the caller, as from an asyncio task.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import outcome
import trio
import trio_asyncio

T = TypeVar("T")


# The nursery of each open bridge's socket waiters (see wait_fd), by loop.
_WAITERS: weakref.WeakKeyDictionary[Any, trio.Nursery] = weakref.WeakKeyDictionary()


@asynccontextmanager
async def open_bridge() -> AsyncIterator[Any]:
    """Open the process's asyncio loop inside Trio; yields the loop.

    It owns a nursery for the socket waiters of :func:`wait_fd`; a waiter lives
    only while a statement waits, and those left when the bridge closes (their
    statements cancelled with the loop) are cancelled with it."""
    async with trio_asyncio.open_loop() as loop, trio.open_nursery() as waiters:
        _WAITERS[loop] = waiters
        try:
            yield loop
        finally:
            _WAITERS.pop(loop, None)
            waiters.cancel_scope.cancel()


def has_waiters(loop: Any) -> bool:
    """Whether ``loop`` is an open bridge's, so :func:`wait_fd` can wait on it."""
    return loop in _WAITERS


async def wait_fd(loop: Any, fileno: int, *, write: bool, within: float | None = None) -> bool:
    """Wait until ``fileno`` is readable (or writable), from an asyncio coroutine on
    ``loop`` (an open bridge's: :func:`has_waiters`): one Trio waiter resolves one
    asyncio future. True once ready; False if ``within`` seconds passed first (an asyncio
    coroutine has no Trio cancel scope to bound it with)."""
    ready: asyncio.Future[bool] = loop.create_future()
    scope = trio.CancelScope()
    if within is not None:
        scope.deadline = trio.current_time() + within
    _WAITERS[loop].start_soon(_wait_fd, fileno, write, ready, scope)
    try:
        return await ready
    finally:
        scope.cancel()  # the statement was cancelled: stop waiting (a no-op once ready)


async def _wait_fd(
    fileno: int, write: bool, ready: asyncio.Future[bool], scope: trio.CancelScope
) -> None:
    """The waiter: resolves ``ready`` however it ends, so no statement waits forever."""
    result: bool | BaseException = OSError("the socket wait was cancelled")
    try:
        with scope:
            if write:
                await trio.lowlevel.wait_writable(fileno)
            else:
                await trio.lowlevel.wait_readable(fileno)
            result = True
        if result is not True:  # its own scope was cancelled: the deadline, or the caller
            result = False
    except Exception as exc:  # a closed or broken socket: the statement sees it
        result = exc
    finally:  # on Cancelled from outside (the bridge closing) too, which goes on up
        if not ready.done():
            if isinstance(result, BaseException):
                ready.set_exception(result)
            else:
                ready.set_result(result)


def _enter_loop(loop: Any) -> None:
    """Make ``loop`` this Trio task's asyncio loop.

    trio-asyncio resolves ``asyncio.get_running_loop()`` through a context
    variable of the calling Trio task; tasks that did not open the loop (request
    handlers, fixtures' siblings) get it set here, once per task.
    """
    if trio_asyncio.current_loop.get() is not loop:
        trio_asyncio.current_loop.set(loop)


async def run_on_loop(loop: Any, coro: Awaitable[T]) -> T:
    """Run an asyncio coroutine on ``loop`` from any Trio task (one bridge crossing).

    As trio-asyncio's ``run_aio_coroutine``: the coroutine runs as an asyncio task
    on the loop; its result or exception comes back here; cancelling the calling
    Trio scope cancels the task, and if the coroutine then ends with
    ``asyncio.CancelledError`` this raises ``trio.Cancelled``. The task's last step
    wakes this one (see the module docstring)."""
    _enter_loop(loop)
    crossing = _Crossing(trio.lowlevel.current_task())
    driven = crossing.drive(coro)
    try:
        task = loop.create_task(driven)
    except BaseException:
        driven.close()
        close = getattr(coro, "close", None)
        if close is not None:
            close()
        raise

    def abort(raise_cancel: Callable[[], Any]) -> trio.lowlevel.Abort:
        crossing.raise_cancel = raise_cancel
        task.cancel()
        # A task cancelled before its first step never runs drive(): this wakes us then.
        task.add_done_callback(crossing.on_done)
        return trio.lowlevel.Abort.FAILED  # the task's end reschedules us

    try:
        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
    except asyncio.CancelledError as exc:
        if crossing.raise_cancel is None:  # cancelled on the asyncio side, not by us
            raise
        try:
            crossing.raise_cancel()
        except trio.Cancelled as cancelled:
            raise cancelled from exc
        raise
    return result


class _Crossing:
    """One :func:`run_on_loop` call: wakes its Trio task once, with the outcome."""

    __slots__ = ("coro", "delivered", "raise_cancel", "task")

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.delivered = False
        self.raise_cancel: Callable[[], Any] | None = None
        self.coro: Awaitable[Any] | None = None  # until drive() starts it

    def deliver(self, result: outcome.Outcome[Any]) -> None:
        if not self.delivered:
            self.delivered = True
            trio.lowlevel.reschedule(self.task, result)

    def drive(self, coro: Awaitable[Any]) -> Coroutine[Any, Any, None]:
        self.coro = coro
        return self._drive(coro)

    async def _drive(self, coro: Awaitable[Any]) -> None:
        self.coro = None
        try:
            result: outcome.Outcome[Any] = outcome.Value(await coro)
        except (KeyboardInterrupt, SystemExit) as exc:
            # As an asyncio task does, the loop gets it too (it ends the loop, and the
            # process with it): handed only to the caller, a request's task, it could be
            # logged and dropped there (Hypercorn does so with an app's exceptions).
            self.deliver(outcome.Error(exc))
            raise
        except BaseException as exc:  # asyncio.CancelledError included: the caller maps it
            result = outcome.Error(exc)
        self.deliver(result)

    def on_done(self, _task: asyncio.Task[None]) -> None:
        """After a cancel request: wake the caller if drive() never ran (a no-op if it
        did), and close the coroutine it never started."""
        close = getattr(self.coro, "close", None)
        self.coro = None
        if close is not None:
            close()
        self.deliver(outcome.Error(asyncio.CancelledError()))


def current_loop() -> Any:
    """The asyncio loop opened by :func:`open_bridge` in this task's context."""
    loop = trio_asyncio.current_loop.get()
    if loop is None:
        raise RuntimeError("no trio-asyncio loop: enter dataplane.db.open_bridge() first")
    return loop
