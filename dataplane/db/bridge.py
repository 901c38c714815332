"""The Trio <-> asyncio bridge that psycopg 3 runs on.

:func:`open_bridge` opens the one asyncio loop of a process (trio-asyncio); the
process's root nursery enters it once, and from then on every Trio task can use
a :class:`~dataplane.db.pool.Database` or :class:`~dataplane.db.listener.Listener`
made from it: they keep a reference to the loop, so request handlers need no
loop context of their own. :func:`run_on_loop` is one bridge crossing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio_asyncio


def _bind_psycopg_to_bridge() -> None:
    """Make psycopg find trio-asyncio's loop.

    trio-asyncio replaces ``asyncio.get_running_loop`` with a version that knows
    its loop; ``psycopg.waiting`` binds the name at import, so when psycopg was
    imported before trio-asyncio it would hold the original and fail with "no
    running event loop". Rebinding it here makes import order irrelevant.
    """
    import asyncio

    import psycopg.waiting

    if getattr(psycopg.waiting, "get_running_loop", None) is not asyncio.get_running_loop:
        setattr(psycopg.waiting, "get_running_loop", asyncio.get_running_loop)  # noqa: B010


_bind_psycopg_to_bridge()

T = TypeVar("T")


@asynccontextmanager
async def open_bridge() -> AsyncIterator[Any]:
    """Open the process's asyncio loop inside Trio; yields the loop."""
    async with trio_asyncio.open_loop() as loop:
        yield loop


def _enter_loop(loop: Any) -> None:
    """Make ``loop`` this Trio task's asyncio loop.

    trio-asyncio resolves ``asyncio.get_running_loop()`` through a context
    variable of the calling Trio task; tasks that did not open the loop (request
    handlers, fixtures' siblings) get it set here, once per task.
    """
    if trio_asyncio.current_loop.get() is not loop:
        trio_asyncio.current_loop.set(loop)


async def run_on_loop(loop: Any, coro: Awaitable[T]) -> T:
    """Run an asyncio coroutine on ``loop`` from any Trio task (one bridge crossing)."""
    _enter_loop(loop)
    result: T = await loop.run_aio_coroutine(coro)
    return result


def current_loop() -> Any:
    """The asyncio loop opened by :func:`open_bridge` in this task's context."""
    loop = trio_asyncio.current_loop.get()
    if loop is None:
        raise RuntimeError("no trio-asyncio loop: enter dataplane.db.open_bridge() first")
    return loop
