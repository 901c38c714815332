"""The worker keys its cache and single-flight by the dedupe key it computes from the
checked envelope, never by the row's ``dedupe_key`` column; for a per-user operation
that key names the caller."""

from __future__ import annotations

from typing import Any

import trio

from dataplane import Auth, Operation, OperationContext
from dataplane.queue import QueueClient
from dataplane.surfaces.manifest import surface_of
from tests.conftest import wait_until
from tests.helpers import NORTH, STAFF, envelope
from tests.integration.test_worker import _counting_surface, running_worker, wait_done


async def test_a_row_with_a_forged_key_cannot_read_another_scopes_cache(
    queue: QueueClient,
) -> None:
    surface, runs = _counting_surface(ttl=60)
    async with running_worker(queue, surface) as (worker, _):
        staff = envelope("counted", "cached", {"n": 1}, STAFF)
        first = await queue.enqueue("surface-counted", staff.dedupe_key, staff.to_json())
        assert (await wait_done(queue, first.job_id)).result["cache"] == "miss"

        # A row for another scope that carries the staff request's dedupe key.
        north = envelope("counted", "cached", {"n": 1}, NORTH)
        forged = await queue.enqueue("surface-counted", staff.dedupe_key, north.to_json())
        assert not forged.coalesced
        row = await wait_done(queue, forged.job_id)

    assert row.result["cache"] == "miss"  # not the staff scope's entry
    assert len(runs) == 2
    assert len(worker.cache) == 2  # one entry per scope


async def test_a_per_user_operation_keys_its_cache_and_single_flight_by_the_caller(
    queue: QueueClient,
) -> None:
    """Rows of alice and bob in flight at once: each gets an execution of their own
    (never the other's, whatever key the rows carry); two of alice's share one."""
    gate = trio.Event()
    runs: list[str] = []

    async def mine(ctx: OperationContext) -> Any:
        runs.append(ctx.auth.user_id)
        await gate.wait()
        return {"user": ctx.auth.user_id}

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    surface = surface_of(
        Operation("mine", 1, schema, mine, ttl_seconds=60, per_user=True),
        id="counted",
        needs_client_db=False,
    )
    alice = Auth("acme", "alice", "", False, ("acme-north",))
    bob = Auth("acme", "bob", "", False, ("acme-north",))
    async with running_worker(queue, surface) as (worker, _):
        jobs = []
        for i, auth in enumerate((alice, alice, bob)):
            env = envelope("counted", "mine", {"n": 1}, auth)
            # Distinct row keys: the worker's own key alone decides who shares.
            jobs.append(await queue.enqueue("surface-counted", f"row-{i}", env.to_json()))
        flights = worker.executor.single_flight
        await wait_until(lambda: flights.callers() == 3, within=10)
        assert flights.in_flight() == 2  # alice's, and bob's
        gate.set()
        rows = [await wait_done(queue, job.job_id) for job in jobs]
        assert [row.result["data"]["user"] for row in rows] == ["alice", "alice", "bob"]
        assert sorted(runs) == ["alice", "bob"]  # alice's two shared one execution
        assert sorted(row.result["coalesced"] for row in rows) == [False, False, True]

        # Cached per caller: each one's next request is a hit on their own entry.
        for auth in (bob, alice):
            env = envelope("counted", "mine", {"n": 1}, auth)
            again = await queue.enqueue("surface-counted", f"again-{auth.user_id}", env.to_json())
            row = await wait_done(queue, again.job_id)
            assert row.result["data"] == {"user": auth.user_id}
            assert row.result["cache"] == "hit"
    assert len(runs) == 2
