"""The completer: commits finished jobs in batches.

Whatever is waiting when a statement is free goes in one statement (each job's
result, blob and done notify still commit together: it is one transaction). At
idle a completion goes alone, with no added latency; under load completions
queue up while the previous statement runs and go together.

Failure handling: while the queue DB is unreachable a batch is retried, doubling
from 0.2 s to 5 s, for up to 60 s: a finished job's result is worth keeping
through a blip; the retry either lands or meets the fence once another worker
has taken the row over. A completion the fence refused raises :class:`LeaseLost`
in its job's task.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

import trio

from dataplane.core.errors import DatabaseError, DatabaseUnavailable, LeaseLost
from dataplane.queue import Completion, QueueClient

log = logging.getLogger(__name__)

COMPLETE_BATCH = 256  # completions per statement
COMPLETE_RETRY_SECONDS = 60.0  # how long a finished job's write is retried through an outage
COMPLETE_RETRY_FIRST = 0.2  # seconds before the first retry (doubling)
COMPLETE_RETRY_MAX = 5.0  # seconds between retries at most


@dataclass
class _Pending:
    completion: Completion
    done: trio.Event = field(default_factory=trio.Event)
    committed: bool = False
    error: BaseException | None = None


class Completer:
    """Commits completions in batches: whatever is waiting goes in one statement.

    At idle a completion goes alone (no added latency); under load they queue up
    while the previous statement runs and go together.
    """

    def __init__(
        self,
        queue: QueueClient,
        *,
        max_batch: int = COMPLETE_BATCH,
        retry_seconds: float = COMPLETE_RETRY_SECONDS,
    ) -> None:
        self.queue = queue
        self.max_batch = max_batch
        self.retry_seconds = retry_seconds
        self._send, self._recv = trio.open_memory_channel[_Pending](max_batch * 4)
        self.batches = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async for first in self._recv:
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._recv.receive_nowait())
                except trio.WouldBlock:
                    break
            self.batches += 1
            try:
                done = await self._commit(batch)
            except DatabaseError as exc:
                for p in batch:
                    p.error = exc
                    p.done.set()
                continue
            for p in batch:
                p.committed = p.completion.job.id in done
                p.done.set()

    async def _commit(self, batch: list[_Pending]) -> set[uuid.UUID]:
        """One statement for the batch; retried while the queue DB is unreachable.

        A finished job's result is worth keeping through a blip: the retry either
        lands, or meets the fence once another worker has taken the row over.
        """
        deadline = trio.current_time() + self.retry_seconds
        delay = COMPLETE_RETRY_FIRST
        while True:
            try:
                return await self.queue.complete_many([p.completion for p in batch])
            except DatabaseUnavailable as exc:
                if trio.current_time() + delay > deadline:
                    raise
                log.warning(
                    "completing %d job(s) failed (%s); retrying in %gs", len(batch), exc, delay
                )
                await trio.sleep(delay)
                delay = min(delay * 2, COMPLETE_RETRY_MAX)

    async def complete(self, completion: Completion) -> None:
        """Commit one completion; :class:`LeaseLost` if the claim was lost."""
        pending = _Pending(completion)
        try:
            self._send.send_nowait(pending)  # no checkpoint: the wait below is one
        except trio.WouldBlock:
            await self._send.send(pending)
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        if not pending.committed:
            job = completion.job
            raise LeaseLost(f"job {job.id}: claim {job.dequeue_count} is lost")
