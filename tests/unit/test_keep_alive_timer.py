"""``edge.KeepAliveTimer``: Hypercorn's keep-alive timer without a lock or a start
handshake. It still runs the timer in the connection's task group, cancels it on
``stop``/``restart``, and (having no checkpoint) starts it from a cancelled scope.
The real server's keep-alive behaviour is pinned by
``tests/acceptance/test_edge_connections.py``."""

from __future__ import annotations

import hypercorn.trio.tcp_server as tcp_server
import trio
import trio.testing
from hypercorn.trio.task_group import TaskGroup

from dataplane.compat.hypercorn import KeepAliveTimer, lean_keep_alive_timer


class Timers:
    """Actions that record how each ended: ``fired`` or ``cancelled``."""

    def __init__(self) -> None:
        self.ended: dict[str, str] = {}

    def action(self, name: str, seconds: float = 5.0):  # type: ignore[no-untyped-def]
        async def timer() -> None:
            try:
                await trio.sleep(seconds)
            except trio.Cancelled:
                self.ended[name] = "cancelled"
                raise
            self.ended[name] = "fired"

        return timer


async def test_a_restart_cancels_the_running_timer_and_a_stop_the_last(
    autojump_clock: trio.testing.MockClock,
) -> None:
    timers = Timers()
    async with TaskGroup() as group:
        keep_alive = KeepAliveTimer()
        await keep_alive.restart(group, timers.action("first"))
        await trio.sleep(1)
        await keep_alive.restart(group, timers.action("second"))
        await trio.sleep(1)
        assert timers.ended == {"first": "cancelled"}
        await keep_alive.stop()
        await keep_alive.stop()  # a second stop does nothing
        await trio.sleep(1)
        assert timers.ended == {"first": "cancelled", "second": "cancelled"}
        await keep_alive.restart(group, timers.action("third", 2.0))
    # The task group waited for the timer, which fired: it runs in the connection's group.
    assert timers.ended["third"] == "fired"


async def test_restart_and_stop_have_no_checkpoint(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Hypercorn calls them inside a response's final send, which may run in a
    cancelled scope (docs/known-issues.md, 1): the timer must start all the same."""
    timers = Timers()
    async with TaskGroup() as group:
        keep_alive = KeepAliveTimer()
        with trio.CancelScope() as cancelled:
            cancelled.cancel()
            await keep_alive.restart(group, timers.action("from a cancelled scope", 1.0))
            await keep_alive.stop()
            await keep_alive.restart(group, timers.action("again", 1.0))
        assert not cancelled.cancelled_caught  # nothing in there was a checkpoint
    assert timers.ended == {"from a cancelled scope": "cancelled", "again": "fired"}


def test_the_patch_makes_hypercorn_trio_connections_use_it() -> None:
    lean_keep_alive_timer()
    lean_keep_alive_timer()  # idempotent
    assert tcp_server.TrioSingleTask is KeepAliveTimer  # type: ignore[attr-defined]
