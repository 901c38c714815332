"""The blob path: a result too large (or too binary) for its row, from the worker's
offload to the browser's download and the blob's expiry.

States of a blob (``surface_result_blobs``)::

    written (with its job's completion) --expires_at passes--> expired --reaper--> gone

* **Storage**: a worker hands a :class:`Blob` with its completion
  (:class:`~dataplane.queue.records.Completion`); ``job_complete`` writes the row's
  result, the blob and the done notify in one statement, so a blob exists exactly
  when its job's completion committed. It expires ``blob_ttl_seconds`` after it was
  written (:class:`~dataplane.queue.config.QueueConfig`). The row's result holds only
  the reference, :func:`blob_ref` (type, size, file name; the BFF adds a signed URL).
  A completion with a blob never carries its answer in the done notify.
* **Chunked reads**: a reader takes the newest unexpired blob of a job *without its
  bytes* (:func:`blob_head`), then its bytes ``BLOB_CHUNK_BYTES`` at a time
  (:func:`blob_chunks`): at most one chunk per download is in memory, however large
  the blob. A blob that expires (or is deleted) mid-read ends the read with
  :class:`BlobVanished`: the reader has fewer bytes than the head announced, never
  wrong ones.
* **Expiry**: an expired blob is never read (every read checks ``expires_at``), and
  the maintenance pass deletes expired blobs in bounded batches
  (:func:`delete_expired`, run by :mod:`dataplane.maintenance.retention`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.rows import DictRow

from dataplane.core.errors import InvalidArgument
from dataplane.db import Connection, Database, q

BLOB_CHUNK_BYTES = 512 * 1024  # bytes of a blob read (and held) at a time per download


@dataclass(frozen=True, slots=True)
class Blob:
    """A blob on its way in, with its job's completion."""

    content_type: str
    data: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes | bytearray | memoryview):
            raise InvalidArgument("blob data must be bytes")
        if not self.content_type or "/" not in self.content_type:
            raise InvalidArgument(f"blob content type looks wrong: {self.content_type!r}")


@dataclass(frozen=True, slots=True)
class StoredBlob:
    """A stored blob; ``data`` is empty when read by :func:`blob_head`."""

    id: uuid.UUID
    job_id: uuid.UUID
    content_type: str
    data: bytes
    size: int
    created_at: datetime
    expires_at: datetime


def blob_ref(blob: Blob, filename: str | None = None) -> dict[str, Any]:
    """The reference a job's result holds instead of the blob: its type, size and
    file name (the BFF adds the blob's URL)."""
    ref: dict[str, Any] = {"contentType": blob.content_type, "size": len(blob.data)}
    if filename:
        ref["filename"] = filename
    return ref


def blob_params(blobs: Sequence[Blob | None], ttl_seconds: float) -> dict[str, Any]:
    """The blob parameters of ``job_complete``: one entry per completion (None:
    no blob), all expiring ``ttl_seconds`` from the write."""
    return {
        "blob_types": [b.content_type if b else None for b in blobs],
        "blob_data": [bytes(b.data) if b else None for b in blobs],
        "blob_ttl_seconds": ttl_seconds,
    }


async def blob_head(db: Database, job_id: uuid.UUID) -> StoredBlob | None:
    """The newest unexpired blob of a job *without its bytes* (``data`` is empty):
    read them with :func:`blob_chunk`, a bounded slice at a time."""
    row = await db.fetchone(q("blob_head"), {"job_id": job_id})
    return _stored_blob(row) if row is not None else None


async def blob_chunk(db: Database, blob_id: uuid.UUID, offset: int, length: int) -> bytes | None:
    """``length`` bytes of a blob from byte ``offset``; None once it expired or is gone."""
    if not isinstance(offset, int) or offset < 0:
        raise InvalidArgument(f"offset must be an integer >= 0, got {offset!r}")
    if not isinstance(length, int) or length < 1:
        raise InvalidArgument(f"length must be an integer >= 1, got {length!r}")
    row = await db.fetchone(q("blob_chunk"), {"id": blob_id, "offset": offset, "length": length})
    return bytes(row["chunk"]) if row is not None else None


async def blob_chunks(db: Database, blob: StoredBlob) -> AsyncIterator[bytes]:
    """A blob's bytes, read from the queue DB ``BLOB_CHUNK_BYTES`` at a time.

    At most one chunk per download is in memory. A blob that expires (or a queue DB
    that fails) mid-download ends the body early: the client sees fewer bytes than
    ``Content-Length`` announced, never wrong ones."""
    offset = 0
    while offset < blob.size:
        length = min(BLOB_CHUNK_BYTES, blob.size - offset)
        chunk = await blob_chunk(db, blob.id, offset, length)
        if not chunk:
            raise BlobVanished(f"blob {blob.id} is gone after {offset} of {blob.size} bytes")
        _counters.chunks += 1
        _counters.bytes += len(chunk)
        _counters.largest_chunk = max(_counters.largest_chunk, len(chunk))
        offset += len(chunk)
        yield chunk


class BlobVanished(RuntimeError):
    """A blob expired or was deleted while it was being sent."""


@dataclass(frozen=True, slots=True)
class BlobStatistics:
    """Blob bytes this process has read from the queue DB, and in how many chunks."""

    chunks: int
    bytes: int
    largest_chunk: int


@dataclass
class _BlobCounters:
    chunks: int = 0
    bytes: int = 0
    largest_chunk: int = 0


_counters = _BlobCounters()


def blob_statistics() -> BlobStatistics:
    return BlobStatistics(_counters.chunks, _counters.bytes, _counters.largest_chunk)


async def delete_expired(conn: Connection, *, batch: int, max_batches: int) -> int:
    """Delete expired blobs, ``batch`` at a time (each its own short statement), at
    most ``max_batches`` batches; the number deleted."""
    total = 0
    for _ in range(max_batches):
        cur = await conn.execute(q("reap_blobs"), {"batch": batch})
        total += cur.rowcount
        if cur.rowcount < batch:
            break
    return total


def _stored_blob(row: DictRow) -> StoredBlob:
    return StoredBlob(
        id=row["id"],
        job_id=row["job_id"],
        content_type=row["content_type"],
        data=b"",
        size=row["size"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
    )
