"""The bridge's crossing and socket waits (dataplane.db.bridge), on a real trio-asyncio
loop and real sockets (a socketpair stands in for a database connection)."""

from __future__ import annotations

import asyncio
import gc
import socket
import warnings
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from dataplane.db import open_bridge, run_on_loop
from dataplane.db.bridge import _WAITERS, _wait_fd, has_waiters, wait_fd


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


async def test_a_crossing_returns_the_result_and_raises_the_error() -> None:
    async def answer(value: int) -> int:
        await asyncio.sleep(0)
        return value * 2

    async def refuse() -> None:
        raise KeyError("refused on the asyncio side")

    async with open_bridge() as loop:
        assert await run_on_loop(loop, answer(21)) == 42
        with pytest.raises(KeyError, match="refused"):
            await run_on_loop(loop, refuse())


@pytest.mark.timeout(20)  # a caller nobody wakes cannot be cancelled: it hangs
async def test_a_keyboard_interrupt_or_exit_on_the_asyncio_side_reaches_the_loop_too() -> None:
    """As from an asyncio task: the caller gets it, and so does the loop, which ends
    (and the process with it). Handed to the caller alone, a request's task, Hypercorn
    logs and drops an app's exception: a Ctrl-C would be lost and the server go on."""

    async def leave() -> None:
        raise SystemExit(3)

    caught: list[BaseException] = []
    with pytest.raises(BaseException) as raised:  # a group of both, checked below
        async with open_bridge() as loop:
            try:
                await run_on_loop(loop, leave())
            except SystemExit as exc:
                caught.append(exc)
                raise
    exits = _leaves(raised.value)
    assert caught and all(isinstance(e, SystemExit) for e in exits)
    assert len(exits) == 2  # the caller's, and the loop task's


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


@pytest.mark.timeout(20)  # a caller nobody wakes cannot be cancelled: it hangs
async def test_a_crossing_cancelled_before_its_task_ran_ends_and_closes_the_coroutine() -> None:
    """The asyncio task is cancelled before its first step, so the coroutine that would
    wake the caller never runs: the caller must still wake (not hang), as Cancelled, and
    the coroutine it never started is closed (no "never awaited" warning)."""
    started: list[bool] = []

    async def work() -> None:
        started.append(True)

    async with open_bridge() as loop:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            with trio.CancelScope() as scope:
                scope.cancel()
                await run_on_loop(loop, work())
            assert scope.cancelled_caught
            gc.collect()  # an unclosed coroutine warns when it is collected
        assert started == []
        assert await run_on_loop(loop, asyncio.sleep(0, "still usable")) == "still usable"


async def test_a_cancelled_crossing_cancels_the_asyncio_side(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, _b = pair
    seen: list[str] = []

    async def wait_forever() -> None:
        try:
            await wait_fd(asyncio.get_running_loop(), a.fileno(), write=False)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async with open_bridge() as loop:
        with trio.fail_after(5), trio.move_on_after(0.05) as scope:
            await run_on_loop(loop, wait_forever())
        assert scope.cancelled_caught
        assert seen == ["cancelled"]
        await trio.testing.wait_all_tasks_blocked()
        assert not _WAITERS[loop].child_tasks  # the socket waiter went with it


async def test_a_socket_wait_wakes_on_readiness_and_times_out_at_its_bound(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair

    async def wait(within: float | None) -> bool:
        return await wait_fd(asyncio.get_running_loop(), a.fileno(), write=False, within=within)

    async with open_bridge() as loop:
        assert has_waiters(loop)
        assert await run_on_loop(loop, wait(0.05)) is False  # nothing to read
        async with trio.open_nursery() as nursery:
            got: list[bool] = []

            async def waiter() -> None:
                got.append(await run_on_loop(loop, wait(None)))

            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []
            b.send(b"x")
        assert got == [True]
        assert await run_on_loop(loop, wait_fd(asyncio.get_running_loop(), a.fileno(), write=True))
    assert not has_waiters(loop)  # a closed bridge's loop waits its own way


async def test_a_socket_waiter_cancelled_from_outside_still_resolves_its_future(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """A waiter cancelled by its nursery (the bridge closing under it), not by its own
    scope, must not leave its statement waiting on a future nobody resolves."""
    a, _b = pair
    async with open_bridge() as loop:
        ready: asyncio.Future[bool] = loop.create_future()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_wait_fd, a.fileno(), False, ready, trio.CancelScope())
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        assert ready.done()
        with pytest.raises(OSError, match="cancelled"):
            ready.result()


class _LoopSteps(trio.abc.Instrument):
    """Counts the task steps of trio-asyncio's loop task."""

    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("_main_loop"):
            self.steps += 1


async def test_a_callback_chain_does_not_starve_the_trio_tasks() -> None:
    """A callback that schedules itself again keeps the loop's queue never empty; the
    Trio tasks still run meanwhile."""
    chain = 1280
    calls = 0
    trio_turns_during_chain = 0

    async with open_bridge() as loop:
        done = trio.Event()

        def link() -> None:
            nonlocal calls
            calls += 1
            if calls < chain:
                loop.call_soon(link)
            else:
                done.set()

        async def other_task() -> None:
            nonlocal trio_turns_during_chain
            while not done.is_set():
                await trio.lowlevel.checkpoint()
                if 0 < calls < chain:
                    trio_turns_during_chain += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(other_task)
            loop.call_soon(link)
            with trio.fail_after(10):
                await done.wait()
    assert calls == chain
    assert trio_turns_during_chain >= 10


async def test_an_asyncio_timer_still_fires_on_time() -> None:
    """An asyncio timer fires on time on the bridge's loop."""
    async with open_bridge() as loop:
        fired = trio.Event()
        start = trio.current_time()
        loop.call_later(0.05, fired.set)
        with trio.fail_after(5):
            await fired.wait()
        assert trio.current_time() - start >= 0.04
