"""The done notify: what ``job_complete`` sends on the type's done channel.

``<job id>`` alone, or, for a small answer when the worker holds a notify secret,
``<job id> <sealed note>``: the note (:func:`done_note`) says what the answer and its
trace need, and a BFF that opens it (:class:`~dataplane.queue.notices.seal.NotifySeal`)
answers without reading the row (:meth:`~dataplane.queue.records.JobRow.from_done_note`).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from dataplane.queue.records import ClaimedJob, Completion

_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


DONE_NOTIFY_INLINE_MAX = 1024  # bytes of a result's JSON its done notify may carry


def done_note(job: ClaimedJob, result: str, completed_at: datetime) -> str:
    """The note a done notify carries, sealed, for a small answer: what the answer and
    its trace need (:meth:`JobRow.from_done_note`); ``result`` is the result's JSON."""
    payload = job.payload
    surface = payload.get("surface") if isinstance(payload, dict) else None
    traceparent = payload.get("traceparent") if isinstance(payload, dict) else None
    return (
        f'{{"type":{_COMPACT.encode(job.type)},"dequeueCount":{job.dequeue_count},'
        f'"maxDequeues":{job.max_dequeues},"createdAt":"{job.created_at.isoformat()}",'
        f'"claimedAt":"{job.claimed_at.isoformat()}","completedAt":"{completed_at.isoformat()}",'
        f'"surface":{_COMPACT.encode(surface)},"traceparent":{_COMPACT.encode(traceparent)},'
        f'"result":{result}}}'
    )


def carried(completion: Completion, result: str) -> bool:
    """Whether the done notify carries the answer: a result of at most
    :data:`DONE_NOTIFY_INLINE_MAX` bytes of JSON, without a blob."""
    if completion.blob is not None or len(result) > DONE_NOTIFY_INLINE_MAX:
        return False
    if not result.isascii() and len(result.encode()) > DONE_NOTIFY_INLINE_MAX:
        return False
    return not (isinstance(completion.result, dict) and "blobRef" in completion.result)


def split_done_notify(payload: str) -> tuple[uuid.UUID, str | None]:
    """The job id of a done notify, and its sealed note when it carries one (not opened:
    :class:`~dataplane.queue.notices.seal.NotifySeal` opens it, :meth:`JobRow.from_done_note`
    reads it).

    ``job_complete`` sends ``<job id>`` alone, or, for a small answer (result JSON of at
    most :data:`DONE_NOTIFY_INLINE_MAX` bytes, no blob) when the worker holds a notify
    secret, ``<job id> <sealed note>``; the fail, cancel and poison paths send the id
    alone. :class:`ValueError` if the payload does not start with a job id."""
    if len(payload) < 36:
        raise ValueError(f"not a done notify: {payload[:60]!r}")
    job_id = uuid.UUID(payload[:36])
    if len(payload) == 36:
        return job_id, None
    if payload[36] != " ":
        raise ValueError(f"not a done notify: {payload[:60]!r}")
    return job_id, payload[37:]
