"""The handler-deadline keeper, on Trio's virtual clock (``autojump_clock``)."""

from __future__ import annotations

import datetime as dt
import math
import uuid

import trio
import trio.testing

from dataplane.queue import ClaimedJob
from dataplane.worker.claims.held import HeldJobs, Running
from dataplane.worker.pipeline.deadlines import HandlerDeadlines


def _job() -> ClaimedJob:
    now = dt.datetime.now(dt.UTC)
    return ClaimedJob(uuid.uuid4(), "surface-probe", "k", {}, 1, 5, now, now, now, now, "w")


async def _run_until_cancelled(running: Running) -> float:
    """Sleep in ``running``'s scope (as an execution would); when it was cancelled."""
    with running.scope:
        await trio.sleep(1000)
    return trio.current_time()


async def test_each_execution_is_cancelled_at_its_own_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    held = HeldJobs()
    keeper = HandlerDeadlines(held)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keeper.run)
        await trio.sleep(1)  # the keeper sleeps, knowing no deadline
        t0 = trio.current_time()
        slow, fast, done = held.add(_job()), held.add(_job()), held.add(_job())
        keeper.start(slow, 30)
        keeper.start(done, 5)
        await trio.sleep(1)  # the keeper now sleeps until t0 + 5
        keeper.start(fast, 0.5)  # earlier than what it sleeps until: it must wake sooner
        done.deadline = math.inf  # finished before its deadline (the executor resets it)
        assert await _run_until_cancelled(fast) - t0 == 1.5
        assert fast.timed_out and not slow.timed_out and not done.timed_out
        assert await _run_until_cancelled(slow) - t0 == 30
        assert slow.timed_out and not done.timed_out and keeper.timeouts == 2
        nursery.cancel_scope.cancel()


async def test_a_deadline_given_before_the_keeper_runs_is_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    held = HeldJobs()
    keeper = HandlerDeadlines(held)
    running = held.add(_job())
    t0 = trio.current_time()
    keeper.start(running, 2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keeper.run)
        assert await _run_until_cancelled(running) - t0 == 2
        assert running.timed_out
        nursery.cancel_scope.cancel()
