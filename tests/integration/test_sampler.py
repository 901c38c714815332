"""The queue sampler: its numbers, and its gauges withdrawn when it stops."""

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


async def test_a_sampler_withdraws_its_gauges_when_its_leader_stops_it(
    db: Database, nursery: trio.Nursery
) -> None:
    sampler = QueueSampler(db, interval=INTERVAL, types=["surface-probe"])
    scope = trio.CancelScope()

    async def run() -> None:
        with scope:
            await sampler.run()

    nursery.start_soon(run)
    with trio.fail_after(10):
        await sampler.wait_sampled()
    assert sampler.sampling and current_queue_sample()[0]
    scope.cancel()
    await wait_until(lambda: not sampler.sampling, within=10)
    assert not current_queue_sample()[0]  # a leader that stepped down exports nothing


async def test_a_paused_type_is_a_gauge_of_its_own(
    db: Database, queue: QueueClient, nursery: trio.Nursery
) -> None:
    """dataplane.queue.paused: 1 for a paused type, 0 for the other sampled ones (issue 41)."""
    from dataplane.operator import Operator, pause
    from telemetry.observed import observe_paused

    await submit(queue, "probe", "echo", {"value": 1})
    await pause.pause(db, Operator.cli(), "surface-users")  # paused with no rows at all
    sampler = QueueSampler(db, interval=INTERVAL)
    nursery.start_soon(sampler.run)
    with trio.fail_after(10):
        await sampler.wait_sampled()
    seen = {o.attributes["messaging.destination.name"]: o.value for o in observe_paused(None)}  # type: ignore[arg-type,index]
    assert seen == {"surface-probe": 0, "surface-users": 1}
    assert ("surface-users", "ready") in current_queue_sample()[0]  # reported, at zero
