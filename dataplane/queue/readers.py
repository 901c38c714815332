"""The queue's readers: statements that read rows and blobs and change nothing.

Who reads: the BFF (a caller's job, matched to its owner in the statement:
:meth:`QueueReaders.get_owned`; the finished rows its reply pump wakes streams with:
:meth:`QueueReaders.get_finished_many`; live rows by client for backpressure;
a blob's head and chunks, :mod:`dataplane.queue.blobs`), operators (``get``,
``list_jobs``) and workers (whether an operator cancelled a held claim's row). Each
is one statement on a pooled connection.
:class:`~dataplane.queue.client.QueueClient` inherits them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from dataplane.core.errors import InvalidArgument
from dataplane.db import Database, q
from dataplane.queue.blobs import StoredBlob, blob_chunk, blob_head
from dataplane.queue.records import Cancellation, ClaimedJob, JobRow, job_uuid
from dataplane.queue.types import QueueType, check_queue_type, check_status


class QueueReaders:
    """The reading statements of the queue, on ``db``."""

    db: Database

    async def get(self, job_id: uuid.UUID | str) -> JobRow | None:
        row = await self.db.fetchone(q("job_get"), {"id": job_uuid(job_id)})
        return JobRow.from_row(row) if row is not None else None

    async def get_finished_many(self, job_ids: Iterable[uuid.UUID | str]) -> list[JobRow]:
        """The finished (done or poison) jobs among ``job_ids``."""
        ids = [job_uuid(j) for j in job_ids]
        if not ids:
            return []
        rows = await self.db.fetchall(q("job_get_finished_many"), {"ids": ids})
        return [JobRow.from_row(row) for row in rows]

    async def list_jobs(
        self,
        *,
        status: str | None = None,
        queue_type: str | QueueType | None = None,
        limit: int = 50,
    ) -> list[JobRow]:
        if status is not None:
            check_status(status)
        type_name = check_queue_type(queue_type) if queue_type is not None else None
        if not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise InvalidArgument(f"limit must be in 1..10000, got {limit}")
        rows = await self.db.fetchall(
            q("job_list"), {"status": status, "type": type_name, "limit": limit}
        )
        return [JobRow.from_row(row) for row in rows]

    async def cancelled_held(self, job: ClaimedJob) -> Cancellation | None:
        """Who cancelled the row of this claim, if it is ``cancelled`` and still names
        its worker and dequeue count (what a cancel notify is checked against); else
        None. (A row an older release cancelled names nobody: an operator, then.)"""
        params = {"id": job.id, "worker_id": job.worker_id, "dequeue_count": job.dequeue_count}
        row = await self.db.fetchone(q("job_cancelled_held"), params)
        if row is None:
            return None
        return Cancellation.of_row(row) or Cancellation("operator", True, row["completed_at"])

    async def live_counts(self) -> dict[tuple[str, str], int]:
        """Live rows by (type, client)."""
        rows = await self.db.fetchall(q("job_live_counts"))
        return {(row["type"], row["client"]): row["n"] for row in rows}

    async def get_owned(
        self,
        job_id: uuid.UUID | str,
        *,
        queue_type: str | QueueType,
        client: str,
        scope_key: str,
    ) -> JobRow | None:
        """The job if it is of ``queue_type`` and owned by ``client`` and ``scope_key``;
        None for anyone else's job exactly as for an unknown id (the owner is matched
        in the statement: nothing of another tenant's row is returned)."""
        row = await self.db.fetchone(
            q("job_get_owned"),
            {
                "id": job_uuid(job_id),
                "type": check_queue_type(queue_type),
                "client": client,
                "scope_key": scope_key,
            },
        )
        return JobRow.from_row(row) if row is not None else None

    async def get_blob_head(self, job_id: uuid.UUID | str) -> StoredBlob | None:
        """The newest unexpired blob of a job *without its bytes* (``data`` is empty):
        read them with :meth:`get_blob_chunk`, a bounded slice at a time
        (:mod:`dataplane.queue.blobs`)."""
        return await blob_head(self.db, job_uuid(job_id))

    async def get_blob_chunk(self, blob_id: uuid.UUID, offset: int, length: int) -> bytes | None:
        """``length`` bytes of a blob from byte ``offset``; None once it expired or is gone."""
        return await blob_chunk(self.db, blob_id, offset, length)
