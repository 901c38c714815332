"""The queue: ``maestro_queues`` and its blobs, and the one client that reads and writes them.

* :mod:`~dataplane.queue.types`: :class:`QueueType` (``surface-<id>[-dev]``) and its
  channel names;
* :mod:`~dataplane.queue.records`: claimed jobs, rows (and who cancelled one),
  completions, poisoned rows;
* :mod:`~dataplane.queue.blobs`: the blob path: storage with a completion, chunked
  reads, expiry;
* :mod:`~dataplane.queue.config`: lease, backoff, poison cutoff;
* :mod:`~dataplane.queue.client`: :class:`QueueClient`, every queue statement (enqueue,
  claim, renew, complete, fail, release), fenced where a claimer writes;
* :mod:`~dataplane.queue.readers`: the statements that only read (the client's);
* :mod:`~dataplane.queue.notices`: what its notifies carry (done notes, progress, retries)
  and how they are sealed;
* :mod:`~dataplane.queue.migrations`: the ordered schema migrations.

It builds on :mod:`dataplane.db` only; the fleet's maintenance (:mod:`dataplane.maintenance`),
the BFF and the worker build on it.
"""

from dataplane.queue.blobs import Blob, StoredBlob
from dataplane.queue.client import MAX_CLAIM_BATCH, QueueClient
from dataplane.queue.config import (
    FAIL_BACKOFF_SECONDS,
    LEASE_SECONDS,
    MAX_DEQUEUES,
    QueueConfig,
    open_queue_database,
    queue_database,
)
from dataplane.queue.notices.done import DONE_NOTIFY_INLINE_MAX, split_done_notify
from dataplane.queue.records import (
    Cancellation,
    CancelResult,
    ClaimBatch,
    ClaimedJob,
    Completion,
    EnqueueResult,
    FlowBound,
    FlowBounds,
    JobRow,
    JsonText,
    Poisoned,
    to_json,
)
from dataplane.queue.types import (
    INVALIDATE_CHANNEL,
    LIVE_STATUSES,
    ROWS_DELETED_CHANNEL,
    STATUSES,
    QueueType,
    check_queue_type,
    done_channel,
    wake_channel,
)

__all__ = [
    "DONE_NOTIFY_INLINE_MAX",
    "FAIL_BACKOFF_SECONDS",
    "INVALIDATE_CHANNEL",
    "LEASE_SECONDS",
    "LIVE_STATUSES",
    "MAX_CLAIM_BATCH",
    "MAX_DEQUEUES",
    "ROWS_DELETED_CHANNEL",
    "STATUSES",
    "Blob",
    "CancelResult",
    "Cancellation",
    "ClaimBatch",
    "ClaimedJob",
    "Completion",
    "EnqueueResult",
    "FlowBound",
    "FlowBounds",
    "JobRow",
    "JsonText",
    "Poisoned",
    "QueueClient",
    "QueueConfig",
    "QueueType",
    "StoredBlob",
    "check_queue_type",
    "done_channel",
    "open_queue_database",
    "queue_database",
    "split_done_notify",
    "to_json",
    "wake_channel",
]
