"""The worker keys its cache and single-flight by the dedupe key it computes from the
checked envelope, never by the row's ``dedupe_key`` column."""

from __future__ import annotations

from dataplane.queue import QueueClient
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
