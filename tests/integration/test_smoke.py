from dataplane.queue import QueueClient


async def test_enqueue_claim_complete(queue: QueueClient) -> None:
    r = await queue.enqueue("surface-probe", "k1", {"a": 1})
    assert not r.coalesced
    jobs = await queue.claim("surface-probe", "w1", limit=5)
    assert [j.id for j in jobs] == [r.job_id]
    await queue.complete(jobs[0], {"ok": True})
    row = await queue.get(r.job_id)
    assert row is not None and row.status == "done" and row.result == {"ok": True}
