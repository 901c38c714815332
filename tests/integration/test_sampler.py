"""The queue sampler: one elected sampler of several, its numbers, and the hand-over."""

from __future__ import annotations

import trio

from dataplane.db import Database
from dataplane.maintenance.sampler import QueueSampler
from dataplane.queue import ClaimedJob, QueueClient
from telemetry.metrics import QUEUE_STATES, current_queue_sample
from tests.conftest import wait_until
from tests.helpers import submit

INTERVAL = 0.05  # seconds


async def test_the_sample_counts_every_state_and_the_oldest_ready_age(
    db: Database, queue: QueueClient, nursery: trio.Nursery
) -> None:
    async def claim(value: str, lease: float = 60, **kw: int) -> ClaimedJob:
        await submit(queue, "probe", "echo", {"value": value}, **kw)
        (job,) = await queue.claim("surface-probe", "w1", limit=10, lease_seconds=lease)
        return job

    await claim("running")
    await queue.fail(await claim("backing off"), "boom", backoff_seconds=3600)
    await queue.fail(await claim("poison", max_dequeues=1), "boom")  # at the cutoff
    for value in ("lapsed 1", "lapsed 2"):
        await submit(queue, "probe", "echo", {"value": value})
    lapsing = await queue.claim("surface-probe", "w1", limit=10, lease_seconds=0.01)
    assert len(lapsing) == 2
    await trio.sleep(0.05)  # their 10 ms leases lapse
    await submit(queue, "probe", "echo", {"value": "ready"})
    await submit(queue, "users", "list", {})

    sampler = QueueSampler(db, interval=INTERVAL, types=["surface-learnerviews"])
    nursery.start_soon(sampler.run)
    with trio.fail_after(10):
        await sampler.wait_sampled()
    depth, oldest = current_queue_sample()
    probe = {state: depth[("surface-probe", state)] for state in QUEUE_STATES}
    assert probe == {"ready": 1, "backing_off": 1, "running": 1, "lease_lapsed": 2, "poison": 1}
    assert depth[("surface-users", "ready")] == 1
    # A known type without rows reports zeros, every state.
    assert all(depth[("surface-learnerviews", s)] == 0 for s in QUEUE_STATES)
    assert oldest["surface-learnerviews"] == 0.0
    assert 0.04 <= oldest["surface-probe"] < 30  # the lapsed leases, 10 ms after the claim


async def test_one_sampler_leads_and_another_takes_over_when_it_stops(
    db: Database, nursery: trio.Nursery
) -> None:
    first, second = (QueueSampler(db, interval=INTERVAL, types=["surface-probe"]) for _ in "12")
    first_scope = trio.CancelScope()

    async def run_first() -> None:
        with first_scope:
            await first.run()

    nursery.start_soon(run_first)
    await wait_until(lambda: first.leading, within=10)
    nursery.start_soon(second.run)
    await wait_until(lambda: first.samples >= 5, within=10)
    assert not second.leading and second.samples == 0  # it only tried the lock
    first_scope.cancel()
    await wait_until(lambda: second.leading, within=10)
    with trio.fail_after(10):
        await second.wait_sampled()
    assert not first.leading
    assert current_queue_sample()[0]  # the new leader publishes
