"""The queue client: producer and consumer sides of ``maestro_queues``.

States::

    pending --claim--> in_progress --complete--> done
                           |  \\--fail (budget left)--> pending (after backoff, + retry notify)
                           |   \\-fail (at cutoff)----> poison   (+ done notify)
                           |    \\release (shutdown)--> pending (claim not counted)
                           \\--lease lapses--> claimable again (the lease *is* the retry)
                                                (at the cutoff: poison, by the next claim
                                                 or the maintenance pass, + done notify)

Invariants:

* At most one live (``pending``/``in_progress``) row per dedupe key; an identical
  enqueue attaches to it (``coalesced``).
* Every write by a claimer is *fenced*: it applies only while ``id``,
  ``locked_by`` and the ``dequeue_count`` seen at claim still match and the row
  is ``in_progress``. A claimer whose lease lapsed and whose row was re-claimed
  cannot touch the newer claim: it gets :class:`LeaseLost` (or the id is missing
  from a batch's answer) and must drop its work.
* Completion writes the result (and blob), and sends the done notify, in one
  statement — so one transaction: a woken listener can always read the row.
* Every method is one database round trip (enqueue: two when it loses a race
  to a row its snapshot could not see).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.context import Context
from psycopg.rows import DictRow

from dataplane.core.errors import DatabaseError, InvalidArgument, LeaseLost
from dataplane.db import Database, check_channel, q
from dataplane.queue.blobs import blob_params
from dataplane.queue.config import QueueConfig, check_non_negative, check_positive
from dataplane.queue.notices.done import carried, done_note
from dataplane.queue.notices.retries import retry_notice
from dataplane.queue.notices.seal import NotifySeal
from dataplane.queue.readers import QueueReaders
from dataplane.queue.records import (
    CancelResult,
    ClaimBatch,
    ClaimedJob,
    Completion,
    EnqueueResult,
    FlowBounds,
    JsonText,
    Poisoned,
    bounds_json,
    job_uuid,
    to_json,
)
from dataplane.queue.types import INVALIDATE_CHANNEL, QueueType, check_queue_type, check_tag
from telemetry.failures import FAILURES_KEPT, AttemptFailure, storable
from telemetry.tracing import context_from

MAX_CLAIM_BATCH = 1000  # rows one claim statement may take
MAX_NOTIFY_PAYLOAD = 7999  # bytes; Postgres refuses 8000 and more
MAX_ERROR_TEXT = 4000  # characters of last_error kept
ENQUEUE_ATTEMPTS = 5  # races with a row finishing under our feet


class QueueClient(QueueReaders):
    """Every queue operation, each one statement on a pooled connection (the reads:
    :class:`~dataplane.queue.readers.QueueReaders`)."""

    def __init__(self, db: Database, config: QueueConfig | None = None) -> None:
        self.db = db
        self.config = config or QueueConfig()
        # Seals a small answer into its done notify (a worker) and opens it (a BFF's
        # pump); without DATAPLANE_NOTIFY_SECRET every done notify names its job alone.
        self.seal = NotifySeal.from_setting(self.config.notify_secret)

    # -- producer ---------------------------------------------------------

    async def enqueue(
        self,
        queue_type: str | QueueType,
        dedupe_key: str,
        payload: Mapping[str, Any],
        *,
        max_dequeues: int | None = None,
        requester: str | None = None,
    ) -> EnqueueResult:
        """Insert a job, or attach to the live one with the same dedupe key; ``requester``
        (who may withdraw: :meth:`cancel`) is recorded on the row, once."""
        params = self.enqueue_params(
            queue_type, dedupe_key, payload, max_dequeues=max_dequeues, requester=requester
        )
        return await self.enqueue_prepared(params)

    async def enqueue_prepared(self, params: dict[str, Any]) -> EnqueueResult:
        """:meth:`enqueue` with parameters :meth:`enqueue_params` made."""
        for _ in range(ENQUEUE_ATTEMPTS):
            row = await self.db.fetchone(q("job_enqueue"), params)
            if row is None:
                continue  # an identical row committed after the statement's snapshot
            return EnqueueResult(row["id"], row["coalesced"], row["status"], row["traceparent"])
        raise DatabaseError(f"enqueue of {params['dedupe_key']!r} kept racing with finishing rows")

    def enqueue_params(
        self,
        queue_type: str | QueueType,
        dedupe_key: str,
        payload: Mapping[str, Any],
        *,
        max_dequeues: int | None = None,
        requester: str | None = None,
    ) -> dict[str, Any]:
        """One enqueue's statement parameters, checked (:class:`InvalidArgument`)."""
        if requester is not None and (not isinstance(requester, str) or not requester):
            raise InvalidArgument("requester must be a non-empty string or None")
        type_name = check_queue_type(queue_type)
        if not isinstance(dedupe_key, str) or not dedupe_key:
            raise InvalidArgument("dedupe_key must be a non-empty string")
        if not isinstance(payload, Mapping):
            raise InvalidArgument("payload must be a JSON object")
        cutoff = self.config.max_dequeues if max_dequeues is None else max_dequeues
        if not isinstance(cutoff, int) or cutoff < 1:
            raise InvalidArgument(f"max_dequeues must be an integer >= 1, got {cutoff!r}")
        auth = payload.get("auth")
        client = auth.get("client") if isinstance(auth, Mapping) else None
        return {
            "type": type_name,
            "dedupe_key": dedupe_key,
            "payload": to_json(payload, what="payload"),
            "max_dequeues": cutoff,
            "client": client if isinstance(client, str) else "",
            "requester": requester,
        }

    async def insert_many(self, items: Sequence[Mapping[str, Any]]) -> dict[str, EnqueueResult]:
        """Insert a new job for each of ``items`` (:meth:`enqueue_params`, distinct dedupe
        keys) in one statement, by dedupe key; a key with a live job is left out (the
        caller enqueues it: that attaches). Never touches an existing row."""
        if not items:
            return {}
        if len({item["dedupe_key"] for item in items}) != len(items):
            raise InvalidArgument("insert_many takes distinct dedupe keys")
        rows = await self.db.fetchall(
            q("job_insert_many"),
            {
                "types": [item["type"] for item in items],
                "dedupe_keys": [item["dedupe_key"] for item in items],
                "payloads": [item["payload"] for item in items],
                "max_dequeues": [item["max_dequeues"] for item in items],
                "clients": [item["client"] for item in items],
                "requesters": [item.get("requester") for item in items],
            },
        )
        return {
            row["dedupe_key"]: EnqueueResult(row["id"], False, row["status"], row["traceparent"])
            for row in rows
        }

    async def attach(self, dedupe_key: str, requester: str | None = None) -> EnqueueResult | None:
        """Attach to the live job of ``dedupe_key`` if there is one; never adds a row
        (what a caller under backpressure may still do)."""
        params = {"dedupe_key": dedupe_key, "requester": requester}
        row = await self.db.fetchone(q("job_attach"), params)
        if row is None:
            return None
        return EnqueueResult(row["id"], row["coalesced"], row["status"], row["traceparent"])

    # -- consumer ---------------------------------------------------------

    async def claim(
        self,
        queue_type: str | QueueType,
        worker_id: str,
        *,
        limit: int = 1,
        lease_seconds: float | None = None,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` claimable rows of ``queue_type``, oldest first.

        The rows the same statement parked as poison are not returned: see
        :meth:`claim_batch`.
        """
        batch = await self.claim_batch(
            queue_type, worker_id, limit=limit, lease_seconds=lease_seconds
        )
        return batch.jobs

    async def claim_batch(
        self,
        queue_type: str | QueueType,
        worker_id: str,
        *,
        limit: int = 1,
        lease_seconds: float | None = None,
        bounds: FlowBounds | None = None,
    ) -> ClaimBatch:
        """Claim up to ``limit`` claimable rows of ``queue_type``, oldest first; the
        claimable rows found with their dequeue budget spent (the lease of their last
        attempt lapsed) become poison in the same statement, and are reported too.
        ``bounds``: the flow bounds of its operations (rows over one stay pending, and
        their operation is reported in ``deferred``).

        Both count toward ``limit``: a batch of ``limit`` rows may have left work behind.
        """
        type_name = check_queue_type(queue_type)
        if not worker_id:
            raise InvalidArgument("worker_id must be a non-empty string")
        if not isinstance(limit, int) or not 1 <= limit <= MAX_CLAIM_BATCH:
            raise InvalidArgument(f"limit must be an integer in 1..{MAX_CLAIM_BATCH}, got {limit}")
        lease = check_positive(
            "lease_seconds", self.config.lease_seconds if lease_seconds is None else lease_seconds
        )
        rows = await self.db.fetchall(
            q("job_claim"),
            {"type": type_name, "worker_id": worker_id, "limit": limit, "lease_seconds": lease}
            | {"bounds": bounds_json(bounds)},
            parents=_claimed_traces,
        )
        jobs = [_claimed(row, worker_id) for row in rows if row["id"] and not row["poisoned"]]
        jobs.sort(key=lambda j: j.created_at)
        poisoned = [Poisoned.from_row(row) for row in rows if row["poisoned"]]
        return ClaimBatch(jobs, poisoned, [row["deferred"] for row in rows if row["deferred"]])

    async def renew(
        self, jobs: Sequence[ClaimedJob], *, lease_seconds: float | None = None
    ) -> set[uuid.UUID]:
        """Extend the leases of held jobs; returns the ids still held (others are lost)."""
        if not jobs:
            return set()
        lease = check_positive(
            "lease_seconds", self.config.lease_seconds if lease_seconds is None else lease_seconds
        )
        rows = await self.db.fetchall(
            q("lease_renew"),
            {**_fence_params(jobs), "lease_seconds": lease},
        )
        return {row["id"] for row in rows}

    async def complete_many(self, completions: Sequence[Completion]) -> set[uuid.UUID]:
        """Finish several held jobs in one statement; returns the ids that committed.

        All completions must come from one claimer (one ``worker_id``). Each job's
        result, blob and done notify commit together.
        """
        if not completions:
            return set()
        worker_ids = {c.job.worker_id for c in completions}
        if len(worker_ids) != 1:
            raise InvalidArgument("complete_many takes completions of one worker_id")
        results = [
            c.result
            if isinstance(c.result, JsonText)
            else to_json(c.result, what=f"job {c.job.id}")
            for c in completions
        ]
        completed_ats = [c.completed_at for c in completions]
        seal = self.seal
        notes: list[str | None] = [None] * len(completions)
        if seal is not None:
            for i, c in enumerate(completions):
                if carried(c, results[i]):
                    job_id = str(c.job.id)
                    notes[i] = seal.seal(job_id, done_note(c.job, results[i], completed_ats[i]))
        rows = await self.db.fetchall(
            q("job_complete"),
            {
                **_fence_params([c.job for c in completions]),
                "results": results,
                "completed_ats": completed_ats,
                "notes": notes,
                **blob_params([c.blob for c in completions], self.config.blob_ttl_seconds),
            },
            parents=lambda _: [c.trace for c in completions],
        )
        return {row["id"] for row in rows}

    async def fail(
        self, job: ClaimedJob, error: str | AttemptFailure, *, backoff_seconds: float | None = None
    ) -> str:
        """An unexpected error: back to ``pending`` after the backoff (with a retry notify:
        :mod:`dataplane.queue.notices.retries`), or ``poison`` at the cutoff (with a done notify).
        ``error`` is its text, or the attempt's record, then appended to the row's ``errors``
        too. Returns the new status; :class:`LeaseLost` if not held."""
        failure = None if isinstance(error, str) else error
        backoff = check_non_negative(
            "backoff_seconds",
            self.config.fail_backoff_seconds if backoff_seconds is None else backoff_seconds,
        )
        text = storable(str(error)[:MAX_ERROR_TEXT])  # no NUL or lone surrogate
        row = await self.db.fetchone(
            q("job_fail"),
            {
                "id": job.id,
                "worker_id": job.worker_id,
                "dequeue_count": job.dequeue_count,
                "backoff_seconds": backoff,
                "error": text,
                "failure": None if failure is None else failure.to_json(),
                "failures_kept": FAILURES_KEPT,
                **retry_notice(self.seal, job, text, backoff),  # waiting streams hear it
            },
        )
        if row is None:
            raise LeaseLost(f"job {job.id}: claim {job.dequeue_count} by {job.worker_id} is lost")
        status: str = row["status"]
        return status

    async def cancel(
        self, job_id: uuid.UUID | str, requester: str, queue_type: str | QueueType
    ) -> CancelResult:
        """``requester`` withdraws from a live job, once; the last one cancels it, running
        or not (``job_cancel``; its worker hears it on ``queue_type``'s cancel channel).
        A finished or unknown job is not touched (status None: read the row)."""
        if not isinstance(requester, str) or not requester:
            raise InvalidArgument("requester must be a non-empty string")
        params = {
            "id": job_uuid(job_id),
            "requester": requester,
            "cancel_channel": QueueType.parse(queue_type).cancel_channel,
        }
        row = await self.db.fetchone(q("job_cancel"), params)
        if row is None:
            return CancelResult(None, 0)
        return CancelResult(row["status"], row["requesters"], row["running"], row["completed_at"])

    async def release(self, jobs: Sequence[ClaimedJob]) -> set[uuid.UUID]:
        """Hand held jobs back (shutdown): pending at once, the claim not counted."""
        if not jobs:
            return set()
        rows = await self.db.fetchall(q("job_release"), _fence_params(jobs))
        return {row["id"] for row in rows}

    # -- operators and broadcasts -------------------------------------------

    async def retry(self, job_id: uuid.UUID | str) -> bool:
        """Re-drive a poison job; False if it is not poison (or does not exist)."""
        row = await self.db.fetchone(q("job_retry"), {"id": job_uuid(job_id)})
        return row is not None

    async def invalidate(self, *tags: str) -> None:
        """Drop the cache entries carrying ``tags`` on every worker (a notify per tag,
        sealed with ``DATAPLANE_NOTIFY_SECRET`` when set)."""
        for tag in tags:
            check_tag(tag)  # every one before the first is sent
        for tag in tags:  # sealed when the plane has a notify secret: workers require it
            payload = tag if self.seal is None else self.seal.seal_invalidation(tag)
            await self.notify(INVALIDATE_CHANNEL, payload)

    async def notify(self, channel: str, payload: str = "") -> None:
        """Send one notification (e.g. the cache-invalidation broadcast)."""
        check_channel(channel)
        if len(payload.encode()) > MAX_NOTIFY_PAYLOAD:
            raise InvalidArgument(
                f"notify payload is {len(payload.encode())} bytes; "
                f"Postgres allows at most {MAX_NOTIFY_PAYLOAD}"
            )
        await self.db.notify(channel, payload)


def _claimed_traces(rows: list[DictRow] | None) -> list[Context | None]:
    """The request traces a claim served: each claimed or poisoned row's producer
    context (a claimed row's is in its payload; a poisoned row's comes alone)."""
    out: list[Context | None] = []
    for row in rows or ():
        payload = row["payload"]
        traceparent = payload.get("traceparent") if isinstance(payload, dict) else None
        out.append(context_from(traceparent or row["traceparent"]))
    return out


def _claimed(row: DictRow, worker_id: str) -> ClaimedJob:
    return ClaimedJob(
        id=row["id"],
        type=row["type"],
        dedupe_key=row["dedupe_key"],
        payload=row["payload"],
        dequeue_count=row["dequeue_count"],
        max_dequeues=row["max_dequeues"],
        created_at=row["created_at"],
        ready_at=row["ready_at"],
        claimed_at=row["claimed_at"],
        lease_expires_at=row["lease_expires_at"],
        worker_id=worker_id,
    )


def _fence_params(jobs: Sequence[ClaimedJob]) -> dict[str, Any]:
    worker_ids = {j.worker_id for j in jobs}
    if len(worker_ids) != 1:
        raise InvalidArgument("a batch must hold jobs of one worker_id")
    return {
        "ids": [j.id for j in jobs],
        "dequeue_counts": [j.dequeue_count for j in jobs],
        "worker_id": worker_ids.pop(),
    }
