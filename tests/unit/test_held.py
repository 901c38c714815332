"""The held claims of a worker: the same job may be held twice at once.

After a Postgres failover that lost a claim's commit, the new primary hands the same
job out again with the same dequeue count while the first claim is still held (its
completion then fenced out). tests/ha found a worker ending with a KeyError there:
the held claims were keyed by (job id, dequeue count)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid

import trio

from dataplane.queue import ClaimedJob
from dataplane.worker.claims.held import HeldJobs


def _job() -> ClaimedJob:
    now = dt.datetime.now(dt.UTC)
    return ClaimedJob(uuid.uuid4(), "surface-probe", "k", {}, 1, 5, now, now, now, now, "w")


async def test_the_same_claim_handed_out_twice_is_held_twice_and_removed_each() -> None:
    held = HeldJobs()
    job = _job()
    first = held.add(job)
    again = held.add(dataclasses.replace(job))  # same id, same dequeue count
    assert len(held) == 2 and held.executing == 2
    assert {id(r) for r in held.renewable()} == {id(first), id(again)}
    held.hand_off(first)
    held.remove(first)  # the fenced-out first claim finishes its bookkeeping
    assert list(held.running()) == [again] and held.executing == 1
    with trio.move_on_after(0.01) as waited:
        await held.wait_idle()
    assert waited.cancelled_caught  # the second is still held
    held.remove(again)
    assert len(held) == 0 and held.executing == 0
    with trio.fail_after(1):
        await held.wait_idle()
