"""``dataplane dev`` prints a failing handler's error in its own terminal, as it happens.

Each worker's output reaches ``.dataplane/logs/<child>.log`` through a pipe the
supervisor reads (:func:`dataplane.dev.children.copy_output`): every byte is appended
to the log file as it came, and every whole line is shown to :class:`FailureEcho`,
which keeps the first line of a failed attempt's record (the worker's logger
``dataplane.worker.failures``, in the text or the JSON log format) and prints it::

    dataplane dev: worker-shop: job 0b5c… (shop.quote, attempt 1/5) failed at
    shopsurface/handlers.py:12 in price_of: KeyError: 'oops'

(one line: surface, operation, job id, the innermost frame of the surface's code, the
exception; the traceback stays in the log file, the console's job page and ``dataplane
jobs show``).

Bounded and never in a child's way: a line is handed over with ``send_nowait`` to a
channel of :data:`ECHO_BACKLOG` lines; one task prints them, each write in a thread of
Trio's, so a terminal that does not read (a paused pager, Ctrl-S) holds up only that
task, never the pipes' readers (so never a child's writes). Lines past the backlog are
dropped and counted, and the count is printed with the next line that goes out.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import Final

import trio

from dataplane.worker.pipeline.failures import LOGGER

ECHO_BACKLOG: Final = 100  # failure lines waiting for the terminal, at most
LINE_MAX_CHARS: Final = 1000  # of a line printed
_TEXT = re.compile(rb"^\S+ \S+ ERROR " + re.escape(LOGGER.encode()) + rb": (?P<message>.+)$")


def failure_line(raw: bytes) -> str | None:
    """The first line of a failed attempt's record, from one line of a worker's log in
    either format; None for any other line."""
    line = raw.rstrip(b"\r\n")
    if line.startswith(b"{"):
        try:
            record = json.loads(line)
        except ValueError:
            return None
        if not isinstance(record, dict) or record.get("logger") != LOGGER:
            return None
        message = str(record.get("message") or "")
        return message.split("\n", 1)[0] or None
    found = _TEXT.match(line)
    return None if found is None else found["message"].decode(errors="replace")


class FailureEcho:
    """The failure lines of every worker, printed to the terminal (see the module
    docstring). :meth:`watch` makes each worker's line callback; :meth:`run` prints."""

    def __init__(self, backlog: int = ECHO_BACKLOG) -> None:
        self._send, self._receive = trio.open_memory_channel[str](backlog)
        self.dropped = 0  # failure lines the terminal was too slow for

    def watch(self, child: str) -> Callable[[bytes], None]:
        """A callback for each whole line of ``child``'s output."""

        def seen(line: bytes) -> None:
            text = failure_line(line)
            if text is None:
                return
            try:
                self._send.send_nowait(f"{child}: {text[:LINE_MAX_CHARS]}")
            except trio.WouldBlock:
                self.dropped += 1

        return seen

    async def run(self) -> None:
        """Print each failure line as it comes, until cancelled."""
        async for text in self._receive:
            if self.dropped:
                text += f" ({self.dropped} earlier failure line(s) not shown: see the logs)"
                self.dropped = 0
            await trio.to_thread.run_sync(_print, text, abandon_on_cancel=True)


def _print(text: str) -> None:
    print(f"dataplane dev: {text}", file=sys.stderr, flush=True)
