"""Enqueues that arrive together, inserted by one statement.

An :class:`Enqueuer` stands in front of :meth:`QueueClient.enqueue
<dataplane.queue.client.QueueClient.enqueue>` in a process that enqueues for many
callers at once (the BFF). An enqueue that finds no other enqueue of the process in
flight runs its own statement, as before. One that arrives while another is in
flight waits for the enqueuer's task. That task takes every enqueue waiting when it
is free, without waiting for more, and inserts them with one ``job_insert_many``
statement. So under load a POST costs a share of a statement: one bridge crossing
and one round trip for the batch, not one each.

The semantics are those of ``enqueue``:

* Some callers of a batch run the single ``job_enqueue`` themselves, concurrently
  (it attaches or inserts, with its race retries): those whose key has a live job
  (coalescing), a key's second caller in one batch, and every caller of a batch
  statement that failed with anything but the database being unreachable.
* The database unreachable: every caller of the batch gets ``DatabaseUnavailable``,
  as its own statement would have.
* With a tracer installed, the single statement runs. Its span is a child of the
  request's ``send`` span, and a shared statement has no single parent.
* It is bounded: at most ``max_batch`` rows per statement and ``max_waiting``
  callers waiting. Past that, the single statement runs.
* A caller cancelled while its batch runs (its client went away) changes nothing:
  the job is enqueued, as it would be by a statement already sent. When the
  enqueuer stops, its waiting callers get ``DatabaseUnavailable``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from dataplane.core.errors import DatabaseUnavailable, DataPlaneError
from dataplane.queue.client import QueueClient
from dataplane.queue.records import EnqueueResult
from dataplane.queue.types import QueueType
from telemetry.tracing import tracing_on

log = logging.getLogger(__name__)

MAX_BATCH = 64  # rows per job_insert_many statement
MAX_WAITING = 1024  # callers waiting for the enqueuer's task; past it, their own statement


@dataclass(eq=False)
class _Waiting:
    """One caller's enqueue, waiting for a batch."""

    params: dict[str, Any]
    done: trio.Event = field(default_factory=trio.Event)
    result: EnqueueResult | None = None  # None when settled: run the single statement
    error: DatabaseUnavailable | None = None

    def settle(
        self, result: EnqueueResult | None = None, error: DatabaseUnavailable | None = None
    ) -> None:
        if not self.done.is_set():
            self.result, self.error = result, error
            self.done.set()


@dataclass(frozen=True, slots=True)
class EnqueuerStatistics:
    statements: int  # job_insert_many statements run
    batched: int  # jobs they inserted
    single: int  # enqueues that ran job_enqueue (alone, fallen back, or traced)
    largest: int  # the most rows of one batch


@dataclass
class _Counters:
    statements: int = 0
    batched: int = 0
    single: int = 0
    largest: int = 0


class Enqueuer:
    """:meth:`enqueue` as :meth:`QueueClient.enqueue`, batched while :meth:`run` runs."""

    def __init__(
        self, queue: QueueClient, *, max_batch: int = MAX_BATCH, max_waiting: int = MAX_WAITING
    ) -> None:
        self.queue = queue
        self._max_batch = max(1, max_batch)
        self._send, self._receive = trio.open_memory_channel[_Waiting](max(1, max_waiting))
        self._running = False
        self._in_flight = 0  # enqueue statements of this process under way
        self._counters = _Counters()

    def statistics(self) -> EnqueuerStatistics:
        c = self._counters
        return EnqueuerStatistics(c.statements, c.batched, c.single, c.largest)

    async def enqueue(
        self,
        queue_type: str | QueueType,
        dedupe_key: str,
        payload: Mapping[str, Any],
        *,
        max_dequeues: int | None = None,
        requester: str | None = None,
    ) -> EnqueueResult:
        """Insert a job, or attach to the live one with the same dedupe key."""
        params = self.queue.enqueue_params(
            queue_type, dedupe_key, payload, max_dequeues=max_dequeues, requester=requester
        )
        if self._running and self._in_flight and not tracing_on():
            waiting = _Waiting(params)
            try:
                self._send.send_nowait(waiting)
            except trio.WouldBlock:
                pass  # too many waiting: its own statement
            else:
                await waiting.done.wait()
                if waiting.error is not None:
                    raise waiting.error
                if waiting.result is not None:
                    return waiting.result
        self._counters.single += 1
        self._in_flight += 1
        try:
            return await self.queue.enqueue_prepared(params)
        finally:
            self._in_flight -= 1

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Insert waiting enqueues in batches until cancelled."""
        batch: list[_Waiting] = []
        self._running = True
        task_status.started()
        try:
            while True:
                batch = [await self._receive.receive()]
                while len(batch) < self._max_batch:
                    try:
                        batch.append(self._receive.receive_nowait())
                    except trio.WouldBlock:
                        break
                await self._insert(batch)
                batch = []
        finally:
            self._running = False
            gone = DatabaseUnavailable("the enqueuer stopped: the process is shutting down")
            for waiting in batch:
                waiting.settle(error=gone)
            while True:
                try:
                    self._receive.receive_nowait().settle(error=gone)
                except trio.WouldBlock:
                    break

    async def _insert(self, batch: list[_Waiting]) -> None:
        by_key: dict[str, _Waiting] = {}
        for waiting in batch:
            key = waiting.params["dedupe_key"]
            if key in by_key:
                waiting.settle()  # its second caller: attaches by the single statement
            else:
                by_key[key] = waiting
        self._in_flight += 1
        try:
            inserted = await self.queue.insert_many([w.params for w in by_key.values()])
        except DatabaseUnavailable as exc:
            for waiting in by_key.values():
                waiting.settle(error=exc)
            return
        except DataPlaneError as exc:  # each caller's own statement tells its own error
            log.warning("batched enqueue of %d job(s) failed (%s); one by one", len(by_key), exc)
            for waiting in by_key.values():
                waiting.settle()
            return
        finally:
            self._in_flight -= 1
        c = self._counters
        c.statements += 1
        c.batched += len(inserted)
        c.largest = max(c.largest, len(by_key))
        for key, waiting in by_key.items():
            waiting.settle(inserted.get(key))  # missing: a live job has the key
