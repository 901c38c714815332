"""The queue client's reads for the BFF's edge: owner-filtered job reads and blob
chunks, against a real Postgres."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from dataplane.core.errors import InvalidArgument
from dataplane.db import Database, q
from dataplane.queue import Blob, QueueClient
from tests.helpers import NORTH, STAFF, complete, submit

T = "surface-probe"


async def test_get_owned_returns_the_row_to_its_owner_only(queue: QueueClient) -> None:
    enq = await submit(queue, "probe", "echo", {"value": 1}, STAFF)
    mine = await queue.get_owned(enq.job_id, queue_type=T, client="acme", scope_key=STAFF.scope_key)
    assert mine is not None and mine.id == enq.job_id
    for queue_type, client, scope_key in (
        (T, "globex", STAFF.scope_key),  # another tenant
        (T, "acme", NORTH.scope_key),  # the same client, another scope
        ("surface-probe-dev", "acme", STAFF.scope_key),  # another tier
        ("surface-users", "acme", STAFF.scope_key),  # another surface
    ):
        other = await queue.get_owned(
            enq.job_id, queue_type=queue_type, client=client, scope_key=scope_key
        )
        assert other is None, (queue_type, client)
    unknown = await queue.get_owned(
        uuid.uuid4(), queue_type=T, client="acme", scope_key=STAFF.scope_key
    )
    assert unknown is None


async def test_the_owned_read_returns_no_row_for_another_tenant(
    queue: QueueClient, db: Database
) -> None:
    """The statement itself filters: EXPLAIN ANALYZE shows it returning no row."""
    enq = await submit(queue, "probe", "echo", {"value": 1}, STAFF)
    (job,) = await queue.claim(T, "w")
    await complete(queue, job, {"data": "x" * 100_000})  # a result worth not reading

    async def rows_returned(client: str, scope_key: str) -> int:
        plan = await db.fetchone(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + q("job_get_owned"),
            {"id": enq.job_id, "type": T, "client": client, "scope_key": scope_key},
        )
        assert plan is not None
        doc = plan["QUERY PLAN"]
        doc = json.loads(doc) if isinstance(doc, str) else doc
        return int(doc[0]["Plan"]["Actual Rows"])

    assert await rows_returned("acme", STAFF.scope_key) == 1
    assert await rows_returned("globex", STAFF.scope_key) == 0
    assert await rows_returned("acme", NORTH.scope_key) == 0


async def test_blob_head_and_chunks_read_a_blob_in_slices(queue: QueueClient) -> None:
    await submit(queue, "probe", "echo", {"value": "blob"}, STAFF)
    (job,) = await queue.claim(T, "w")
    data = os.urandom(200_000)
    await complete(queue, job, {"blobRef": {}}, blob=Blob("application/octet-stream", data))
    head = await queue.get_blob_head(job.id)
    assert head is not None and head.size == len(data) and head.data == b""
    assert head.content_type == "application/octet-stream"
    parts = []
    for offset in range(0, head.size, 65_536):
        chunk = await queue.get_blob_chunk(head.id, offset, 65_536)
        assert chunk is not None and len(chunk) == min(65_536, head.size - offset)
        parts.append(chunk)
    assert b"".join(parts) == data
    assert await queue.get_blob_chunk(head.id, head.size, 10) == b""  # past the end
    assert await queue.get_blob_chunk(uuid.uuid4(), 0, 10) is None
    assert await queue.get_blob_head(uuid.uuid4()) is None
    with pytest.raises(InvalidArgument):
        await queue.get_blob_chunk(head.id, -1, 10)
    with pytest.raises(InvalidArgument):
        await queue.get_blob_chunk(head.id, 0, 0)
