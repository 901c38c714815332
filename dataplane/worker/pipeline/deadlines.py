"""Handler timeouts: one task keeps every held claim's deadline.

A job's execution runs in its claim's cancel scope (:attr:`Running.scope`); its
operation's ``timeout_seconds`` (capped by ``max_handler_seconds``) is a deadline
on :attr:`Running.deadline`, not a Trio deadline of its own. :class:`HandlerDeadlines`
wakes at the earliest deadline of the claims it was given, marks the overdue ones
``timed_out`` and cancels their scopes; the executor turns that into the attempt's
``TIMEOUT`` failure.

Why not ``trio.move_on_after`` per job: entering and leaving a cancel scope with a
deadline registers and retires a Trio deadline, about twice a plain scope's cost
(``docs/perf/worker-drain.md``), paid by
every job although almost none times out. Here a job costs one comparison; the
keeper wakes about once per timeout period and then looks at the held claims only
(at most ``PIPELINE_DEPTH * concurrency``).

The precision is Trio's: the keeper wakes at the earliest deadline, as the job's own
scope would have, and the job sees the cancellation at its next checkpoint.
"""

from __future__ import annotations

import math

import trio

from dataplane.worker.claims.held import HeldJobs, Running


class HandlerDeadlines:
    """The handler deadlines of ``held``'s claims; :meth:`run` enforces them."""

    def __init__(self, held: HeldJobs) -> None:
        self.held = held
        self.timeouts = 0  # executions cancelled at their deadline
        self._next = math.inf  # the earliest deadline the keeper knows of
        self._wait: trio.CancelScope | None = None  # the keeper's sleep, while it lasts

    def start(self, running: Running, seconds: float) -> None:
        """``running``'s execution may take ``seconds`` from now."""
        running.deadline = deadline = trio.current_time() + seconds
        if deadline < self._next:  # rare: deadlines mostly come in increasing order
            self._next = deadline
            if self._wait is not None:
                self._wait.deadline = deadline

    async def run(self) -> None:
        """Cancel each execution at its deadline, until cancelled."""
        while True:
            with trio.move_on_at(self._next) as self._wait:
                await trio.sleep_forever()
            self._wait = None
            now = trio.current_time()
            earliest = math.inf
            for running in self.held.running():
                if running.deadline <= now:
                    if not running.timed_out:
                        running.timed_out = True
                        self.timeouts += 1
                        running.scope.cancel()
                elif running.deadline < earliest:
                    earliest = running.deadline
            self._next = earliest
