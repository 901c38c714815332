"""The wallboard's live part: one loop reads the cards and renders them, every stream
sends what it renders.

:meth:`Board.run` is a task of the app's nursery (its lifetime is the process's): every
``refresh`` seconds it reads :func:`~dataplane.console.reads.overview`, renders the
cards' HTML once, and :meth:`publish` es it. Subscribers (the ``/events`` streams, each
in its own request's task, which Hypercorn owns) wait for a newer version than the one
they sent (:meth:`wait_newer`): the buffer is the latest rendering only, so a slow
stream skips to the newest cards and never holds more than one, and there is no task
per client. At most :data:`MAX_SUBSCRIBERS` streams at once (the next is 503).

Failure handling: a read that fails is logged and the board marked stale (the streams
keep the last cards, with a note); the loop goes on. Cancellation ends it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import trio

from dataplane.core.errors import DatabaseError

log = logging.getLogger(__name__)

REFRESH = 2.0  # seconds between two readings of the wallboard
MAX_SUBSCRIBERS = 64  # live wallboard streams at once


class BoardFull(Exception):
    """No room for one more stream."""


class Board:
    def __init__(self, *, max_subscribers: int = MAX_SUBSCRIBERS) -> None:
        self.html = ""
        self.version = 0
        self.read_at = 0.0  # time.time() of the last good reading
        self.error: str | None = None
        self.subscribers = 0
        self.max_subscribers = max_subscribers
        self._changed = trio.Event()

    def publish(self, html: str) -> None:
        self.html, self.version = html, self.version + 1
        self._changed.set()
        self._changed = trio.Event()

    async def wait_newer(self, seen: int) -> tuple[int, str]:
        """The newest rendering once it is newer than version ``seen``."""
        while self.version <= seen:
            await self._changed.wait()
        return self.version, self.html

    @contextmanager
    def subscribed(self) -> Iterator[None]:
        if self.subscribers >= self.max_subscribers:
            raise BoardFull
        self.subscribers += 1
        try:
            yield
        finally:
            self.subscribers -= 1

    async def run(
        self,
        render: Callable[[], Awaitable[str]],
        *,
        refresh: float = REFRESH,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Read and publish every ``refresh`` seconds until cancelled; started after
        the first attempt (whether it read or not)."""
        started = False
        while True:
            try:
                self.publish(await render())
                self.read_at, self.error = time.time(), None
            except DatabaseError as exc:
                self.error = str(exc)
                log.warning("console: the wallboard could not be read: %s", exc)
            if not started:
                task_status.started()
                started = True
            await trio.sleep(refresh)
