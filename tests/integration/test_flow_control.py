"""Flow control against a real Postgres: ``maestro_claim`` with bounds (migration 0015)
keeps a bounded operation's running rows under its bound, fleet-wide and per client,
under concurrent claims, while the surface's other operations are still claimed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import psycopg
import trio

from dataplane.db import Database, DatabaseConfig, open_database
from dataplane.queue import ClaimedJob, FlowBound, QueueClient
from dataplane.worker.claims.liveness import Liveness, Rescue
from tests.conftest import wait_until
from tests.helpers import NORTH, STAFF, complete, liveness_lapsed, submit

T = "surface-probe"
BOUNDED = {"sleep": FlowBound(max=2)}


async def _running(db: Database, operation: str) -> list[dict[str, Any]]:
    rows = await db.fetchall(
        "SELECT id, client FROM maestro_queues WHERE type = %(t)s AND status = 'in_progress'"
        " AND lease_expires_at > now() AND payload ->> 'operation' = %(op)s",
        {"t": T, "op": operation},
    )
    return [dict(r) for r in rows]


async def _burst(queue: QueueClient, sleeps: int, echoes: int) -> None:
    for i in range(sleeps):
        await submit(queue, "probe", "sleep", {"ms": i})
    for i in range(echoes):
        await submit(queue, "probe", "echo", {"value": i})


async def test_concurrent_claims_never_take_more_than_the_bound(
    queue: QueueClient, queue_dsn: str, bridge: Any
) -> None:
    await _burst(queue, sleeps=40, echoes=40)  # the bounded rows are the oldest
    claimed: list[ClaimedJob] = []
    async with open_database(DatabaseConfig(queue_dsn, pool_size=8), loop=bridge) as db8:
        client = QueueClient(db8)
        go = trio.Event()

        async def claimer(n: int) -> None:
            await go.wait()
            for _ in range(5):
                batch = await client.claim_batch(T, f"w{n}", limit=7, bounds=BOUNDED)
                claimed.extend(batch.jobs)

        async with trio.open_nursery() as nursery:
            for n in range(8):
                nursery.start_soon(claimer, n)
            await trio.sleep(0.05)
            go.set()
    ops = [job.payload["operation"] for job in claimed]
    assert ops.count("sleep") == 2  # 8 claimers at once, 40 candidates: exactly the bound
    assert ops.count("echo") == 40  # and every cheap row behind them
    assert len(await _running(queue.db, "sleep")) == 2


async def test_a_finished_or_lapsed_attempt_frees_its_slot(
    queue: QueueClient, db: Database
) -> None:
    await _burst(queue, sleeps=5, echoes=0)
    first = await queue.claim_batch(T, "w1", limit=10, bounds=BOUNDED)
    assert len(first.jobs) == 2 and first.deferred == ["sleep"]
    again = await queue.claim_batch(T, "w2", limit=10, bounds=BOUNDED)
    assert again.jobs == [] and again.deferred == ["sleep"]
    await complete(queue, first.jobs[0], {"ok": True})
    third = await queue.claim_batch(T, "w2", limit=10, bounds=BOUNDED)
    assert len(third.jobs) == 1
    # A worker that died holding a slot: its lease lapses, and the slot with it.
    await db.execute(
        "UPDATE maestro_queues SET lease_expires_at = now() - interval '1 s',"
        " available_at = now() - interval '1 s' WHERE id = %(id)s",
        {"id": first.jobs[1].id},
    )
    fourth = await queue.claim_batch(T, "w3", limit=10, bounds=BOUNDED)
    assert len(fourth.jobs) == 1  # one slot free: the lapsed row or another, one only
    assert len(await _running(db, "sleep")) == 2


async def test_a_dead_worker_s_slots_free_when_its_liveness_lapses(
    queue: QueueClient, db: Database
) -> None:
    """A worker that died holding an operation's slots, with the seed's 120 s lease:
    another worker's beat rescues its claims once its liveness lapsed, and the slots
    are free at once (before, they stayed taken until the leases ended)."""
    await _burst(queue, sleeps=4, echoes=0)
    dead = Liveness(db, "w1", T, opens=None, beat=0.05, lapse=0.3)
    await dead.beat_once()
    first = await queue.claim_batch(T, "w1", limit=10, bounds=BOUNDED)
    assert len(first.jobs) == 2 and first.deferred == ["sleep"]
    assert (await queue.claim_batch(T, "w2", limit=10, bounds=BOUNDED)).jobs == []
    await wait_until(lambda: liveness_lapsed(db, "w1"), within=5)
    fresh = Liveness(db, "w2", T, opens=None, beat=0.05, lapse=30)  # rescues at once
    assert await fresh.beat_once() == [Rescue("w1", T, 2)]
    assert await _running(db, "sleep") == []
    again = await queue.claim_batch(T, "w2", limit=10, bounds=BOUNDED)
    assert len(again.jobs) == 2 and len(await _running(db, "sleep")) == 2


async def test_the_per_client_bound_leaves_other_clients_their_turn(
    queue: QueueClient, db: Database
) -> None:
    for i in range(6):
        await submit(queue, "probe", "sleep", {"ms": i}, STAFF)
    other = await submit(queue, "probe", "sleep", {"ms": 0}, replace(NORTH, client="globex"))
    bounds = {"sleep": FlowBound(max=3, per_client=1)}
    batch = await queue.claim_batch(T, "w1", limit=10, bounds=bounds)
    assert sorted(job.payload["auth"]["client"] for job in batch.jobs) == ["acme", "globex"]
    assert other.job_id in {job.id for job in batch.jobs}
    assert batch.deferred == ["sleep"]
    again = await queue.claim_batch(T, "w2", limit=10, bounds=bounds)
    assert again.jobs == []  # each client at its own bound, the total has room: none


async def test_no_bounds_is_the_claim_of_before(queue: QueueClient) -> None:
    await _burst(queue, sleeps=5, echoes=0)
    batch = await queue.claim_batch(T, "w1", limit=10)
    assert len(batch.jobs) == 5 and batch.deferred == []
    none = await queue.claim_batch(T, "w1", limit=10, bounds={"sleep": FlowBound()})
    assert none.jobs == [] and none.deferred == []  # an empty bound is no bound


async def test_a_slot_counted_by_another_claim_is_deferred_not_waited_for(
    queue: QueueClient, queue_dsn: str, bridge: Any
) -> None:
    """A claim finding the operation's row of maestro_flow locked (another claim counts
    its slots) skips the operation at once: claims never wait for each other."""
    await _burst(queue, sleeps=3, echoes=2)
    first = await queue.claim_batch(T, "w0", limit=1, bounds=BOUNDED)  # makes its flow row
    await complete(queue, first.jobs[0], {})
    with psycopg.connect(queue_dsn) as other:  # a transaction holding the row's lock
        other.execute(
            "SELECT 1 FROM maestro_flow WHERE type = %(t)s AND operation = 'sleep' FOR UPDATE",
            {"t": T},
        )
        with trio.fail_after(5):
            batch = await queue.claim_batch(T, "w1", limit=10, bounds=BOUNDED)
        other.rollback()
    assert {job.payload["operation"] for job in batch.jobs} == {"echo"}
    assert batch.deferred == ["sleep"]
    after = await queue.claim_batch(T, "w1", limit=10, bounds=BOUNDED)
    assert len(after.jobs) == 2  # the lock gone, both slots are free again
