"""The data worker: claims one queue type's jobs and runs their operations.

One :class:`Worker` per process, owning (in one nursery):

* the **claim loop** — claims at most its free slots (``concurrency``), polls
  with a backoff of 100 ms doubling to ``idle_ms``, reset on work, and is woken
  at once by the enqueue notify (and by a freed slot);
* the **listener** for ``<type>_enqueued`` and ``dataplane_invalidate``;
* the **heartbeat**, renewing every held lease each ``renew_seconds``; a lease
  found lost cancels that job and its result is dropped;
* the **completer**, which commits finished jobs in batches (each job's result,
  blob and done notify still commit together, in one statement);
* the **reaper**, hourly, only while idle;
* the **reporter** slot (telemetry sender; a no-op until one is given).

Per job: envelope → operation → params validated → gates re-enforced from the
envelope's ``auth`` → TTL cache (``ttl_seconds > 0`` only) → single-flight per
dedupe key → handler → blob offload → complete. An ``HttpError`` completes the
job with an error payload; any other exception fails it (retry after the
backoff, poison at the cutoff). A fenced-out write means the lease was lost: the
work is dropped.

Shutdown (:meth:`Worker.stop`): stop claiming, let in-flight jobs finish within
the grace period, then release what is still held (not counted toward poison).
"""

from __future__ import annotations

import logging
import os
import resource
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio
from opentelemetry.trace import Span, SpanKind

from dataplane.cache import INVALIDATE_CHANNEL, SingleFlight, TtlCache
from dataplane.db import Database, Gap, Notification
from dataplane.envelope import Envelope
from dataplane.errors import (
    DatabaseError,
    DatabaseUnavailable,
    HttpError,
    InvalidArgument,
    LeaseLost,
)
from dataplane.manifest import BlobResult, Operation, OperationContext, Surface
from dataplane.queue import (
    Blob,
    ClaimedJob,
    Completion,
    JsonText,
    QueueClient,
    to_json,
    wake_channel,
)
from dataplane.reaper import REAP_INTERVAL_SECONDS, RetentionConfig, reap_once
from telemetry.metrics import instruments
from telemetry.tracing import context_from, links_to, messaging, tracer

log = logging.getLogger(__name__)

POLL_START_MS = 100  # first idle backoff
IDLE_MS = 2000  # idle backoff ceiling
SHUTDOWN_GRACE_SECONDS = 30.0
RELEASE_TIMEOUT = 5.0  # seconds the shielded release on shutdown may take
COMPLETE_BATCH = 256  # completions per statement
COMPLETE_RETRY_SECONDS = 60.0  # how long a finished job's write is retried through an outage
COMPLETE_RETRY_FIRST = 0.2  # seconds before the first retry (doubling)
COMPLETE_RETRY_MAX = 5.0  # seconds between retries at most
DB_ERROR_BACKOFF = 1.0  # seconds after a failed claim before trying again


@dataclass(frozen=True, slots=True)
class JobReport:
    """One finished job, as the telemetry receiver's ``worker_runs`` row wants it."""

    job_id: str
    type: str
    operation: str
    outcome: str  # done | error | failed | poison | lost | released
    wall_ms: float
    cpu_ms: float
    rss_bytes: int
    queue_wait_ms: float
    cache: str  # hit | miss | bypass
    coalesced: bool
    dequeue_count: int
    worker_id: str
    finished_at: float  # unix seconds


class Reporter(Protocol):
    """Where finished-job reports go; ``report`` must never block or raise."""

    def report(self, job: JobReport) -> None: ...


class _NoReporter:
    def report(self, job: JobReport) -> None:
        return None


def rss_bytes() -> int:
    """Resident set size now (Linux /proc; falls back to the peak)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def default_worker_id(queue_type: str) -> str:
    return f"{queue_type}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    queue_type: str
    worker_id: str
    concurrency: int = 8
    lease_seconds: float = 120.0
    renew_seconds: float = 60.0
    idle_ms: int = IDLE_MS
    poll_start_ms: int = POLL_START_MS
    inline_max_bytes: int = 262_144
    fail_backoff_seconds: float = 30.0
    shutdown_grace_seconds: float = SHUTDOWN_GRACE_SECONDS
    reap_interval_seconds: float = REAP_INTERVAL_SECONDS
    retention: RetentionConfig = field(default_factory=RetentionConfig)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise InvalidArgument("concurrency must be >= 1")
        if not 0 < self.renew_seconds < self.lease_seconds:
            raise InvalidArgument("renew_seconds must be > 0 and shorter than lease_seconds")
        if not 0 < self.poll_start_ms <= self.idle_ms:
            raise InvalidArgument("poll_start_ms must be > 0 and <= idle_ms")
        if self.inline_max_bytes < 1 or self.shutdown_grace_seconds < 0:
            raise InvalidArgument("inline_max_bytes must be >= 1 and the grace >= 0")


@dataclass(frozen=True, slots=True)
class WorkerStatistics:
    claimed: int
    done: int
    errors: int
    failed: int
    poisoned: int
    lost: int
    released: int
    coalesced: int
    cache_hits: int
    in_flight: int
    claims: int
    idle_claims: int


@dataclass
class _Counters:
    claimed: int = 0
    done: int = 0
    errors: int = 0
    failed: int = 0
    poisoned: int = 0
    lost: int = 0
    released: int = 0
    coalesced: int = 0
    cache_hits: int = 0
    claims: int = 0
    idle_claims: int = 0


@dataclass
class _Running:
    job: ClaimedJob
    scope: trio.CancelScope
    finishing: bool = False  # handed to the completer: the heartbeat leaves it be
    finished: bool = False  # its row was written (or the write was refused)
    lost: bool = False


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
        await self._send.send(pending)
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        if not pending.committed:
            job = completion.job
            raise LeaseLost(f"job {job.id}: claim {job.dequeue_count} is lost")


class Worker:
    def __init__(
        self,
        config: WorkerConfig,
        surface: Surface,
        queue: QueueClient,
        *,
        client_db: Database | None = None,
        cache: TtlCache | None = None,
        reporter: Reporter | None = None,
        blob_base_path: str = "/api",
    ) -> None:
        self.config = config
        self.surface = surface
        self.queue = queue
        self.client_db = client_db
        self.cache = cache if cache is not None else TtlCache()
        self.reporter: Reporter = reporter if reporter is not None else _NoReporter()
        self.blob_base_path = blob_base_path
        self.single_flight: SingleFlight[Any] = SingleFlight()
        self.completer = Completer(queue)
        # Keyed by claim, not job: a job failed with no backoff can be claimed again by this
        # worker before its first run has finished its bookkeeping.
        self._held: dict[tuple[uuid.UUID, int], _Running] = {}
        self._wake = trio.Event()
        self._became_idle = trio.Event()
        self._stopping = False
        self._jobs_scope = trio.CancelScope()
        self._counters = _Counters()
        self.listener = queue.db.listener(
            [wake_channel(config.queue_type), INVALIDATE_CHANNEL],
        )

    # -- lifecycle --------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until :meth:`stop`; returns once in-flight work is finished or released."""
        async with trio.open_nursery() as services:
            await services.start(self.listener.run)
            services.start_soon(self._dispatch_notifications)
            await services.start(self.completer.run)
            services.start_soon(self._heartbeat)
            services.start_soon(self._reaper)
            reporter_run = getattr(self.reporter, "run", None)
            if reporter_run is not None:
                await services.start(reporter_run)
            log.info(
                "worker %s serving %s (concurrency %d)",
                self.config.worker_id,
                self.config.queue_type,
                self.config.concurrency,
            )
            with self._jobs_scope:
                async with trio.open_nursery() as jobs:
                    task_status.started()
                    await self._claim_loop(jobs)
            log.info("worker %s stopped", self.config.worker_id)
            services.cancel_scope.cancel()

    def stop(self, *, force: bool = False) -> None:
        """Stop claiming; in-flight jobs get the grace period (none if ``force``),
        then are released."""
        if force:
            self._jobs_scope.cancel()
        if self._stopping:
            return
        self._stopping = True
        self._jobs_scope.deadline = trio.current_time() + self.config.shutdown_grace_seconds
        self._wake.set()
        log.info(
            "worker %s stopping: %d job(s) in flight, grace %gs",
            self.config.worker_id,
            len(self._held),
            self.config.shutdown_grace_seconds,
        )

    def statistics(self) -> WorkerStatistics:
        c = self._counters
        return WorkerStatistics(
            claimed=c.claimed,
            done=c.done,
            errors=c.errors,
            failed=c.failed,
            poisoned=c.poisoned,
            lost=c.lost,
            released=c.released,
            coalesced=c.coalesced,
            cache_hits=c.cache_hits,
            in_flight=len(self._held),
            claims=c.claims,
            idle_claims=c.idle_claims,
        )

    # -- claiming ---------------------------------------------------------

    async def _claim_loop(self, jobs: trio.Nursery) -> None:
        backoff_ms = self.config.poll_start_ms
        while not self._stopping:
            free = self.config.concurrency - len(self._held)
            self._wake = trio.Event()  # before the claim: no wake-up can be lost
            if free <= 0:
                await self._wake.wait()
                continue
            try:
                claimed = await self.queue.claim(
                    self.config.queue_type,
                    self.config.worker_id,
                    limit=free,
                    lease_seconds=self.config.lease_seconds,
                )
            except DatabaseError as exc:
                log.warning("claim failed (%s); retrying", exc)
                claimed = []
                backoff_ms = max(backoff_ms, int(DB_ERROR_BACKOFF * 1000))
            self._counters.claims += 1
            if claimed:
                backoff_ms = self.config.poll_start_ms
                self._counters.claimed += len(claimed)
                for job in claimed:
                    running = _Running(job, trio.CancelScope())
                    self._held[job.id, job.dequeue_count] = running
                    jobs.start_soon(self._run_job, running)
                continue
            self._counters.idle_claims += 1
            with trio.move_on_after(backoff_ms / 1000):
                await self._wake.wait()
            backoff_ms = min(backoff_ms * 2, self.config.idle_ms)

    async def _dispatch_notifications(self) -> None:
        async for event in self.listener.events:
            if isinstance(event, Gap):
                # Invalidations may have been missed: drop the cache; and look for work.
                self.cache = TtlCache(self.cache.cap)
                self._wake.set()
            elif isinstance(event, Notification):
                if event.channel == INVALIDATE_CHANNEL:
                    dropped = self.cache.invalidate_tag(event.payload)
                    log.info("cache: invalidated tag %r (%d entries)", event.payload, dropped)
                else:
                    self._wake.set()

    # -- leases -----------------------------------------------------------

    async def _heartbeat(self) -> None:
        while True:
            await trio.sleep(self.config.renew_seconds)
            held = [r for r in self._held.values() if not (r.finishing or r.finished)]
            if not held:
                continue
            try:
                kept = await self.queue.renew(
                    [r.job for r in held], lease_seconds=self.config.lease_seconds
                )
            except DatabaseError as exc:
                log.warning("lease renewal failed (%s); will retry", exc)
                continue
            for running in held:
                if running.job.id not in kept and not (running.finishing or running.finished):
                    log.warning("job %s: lease lost; cancelling its execution", running.job.id)
                    running.lost = True
                    running.scope.cancel()

    async def _reaper(self) -> None:
        while True:
            await trio.sleep(self.config.reap_interval_seconds)
            while self._held:  # only at idle
                self._became_idle = trio.Event()
                await self._became_idle.wait()
            try:
                result = await reap_once(self.queue.db, self.config.retention)
            except DatabaseError as exc:
                log.warning("reaper pass failed (%s); next pass in %gs", exc, 3600)
                continue
            log.info("reaper: %s", result)

    # -- execution --------------------------------------------------------

    async def _run_job(self, running: _Running) -> None:
        job = running.job
        started, cpu_started = time.perf_counter(), time.process_time()
        outcome, cache, coalesced, operation = "released", "bypass", False, "?"
        try:
            with running.scope:
                outcome, cache, coalesced, operation = await self._execute(running)
            if running.lost:
                outcome = "lost"
                self._counters.lost += 1
        finally:
            if not (running.finished or running.lost):
                # Cancelled by shutdown past the grace period: hand the row back.
                with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_TIMEOUT):
                    try:
                        await self.queue.release([job])
                        self._counters.released += 1
                    except DatabaseError as exc:
                        log.warning(
                            "job %s: release failed (%s); its lease will lapse", job.id, exc
                        )
            del self._held[job.id, job.dequeue_count]
            if not self._held:
                self._became_idle.set()
            self._wake.set()
            if not isinstance(self.reporter, _NoReporter):  # else no report: RSS reads /proc
                self.reporter.report(
                    JobReport(
                        job_id=str(job.id),
                        type=job.type,
                        operation=operation,
                        outcome=outcome,
                        wall_ms=(time.perf_counter() - started) * 1000,
                        cpu_ms=(time.process_time() - cpu_started) * 1000,
                        rss_bytes=rss_bytes(),
                        queue_wait_ms=max(0.0, job.queue_wait_ms),
                        cache=cache,
                        coalesced=coalesced,
                        dequeue_count=job.dequeue_count,
                        worker_id=job.worker_id,
                        finished_at=time.time(),
                    )
                )

    async def _execute(self, running: _Running) -> tuple[str, str, bool, str]:
        """Run one job inside its ``process`` span; record its metrics."""
        job = running.job
        traceparent = job.payload.get("traceparent") if isinstance(job.payload, dict) else None
        first = job.dequeue_count == 1
        envelope_ctx = context_from(traceparent)
        attrs = messaging(
            "process",
            job.type,
            str(job.id),
            surface=self.surface.id,
            queue_wait_ms=round(job.queue_wait_ms, 3),
            dequeue_count=job.dequeue_count,
        )
        started = time.perf_counter()
        with tracer().start_as_current_span(
            f"process {job.type}",
            context=envelope_ctx if first else None,
            kind=SpanKind.CONSUMER,
            links=[] if first else links_to(traceparent),
            attributes=attrs,
        ) as span:
            result = await self._execute_job(running, span)
            outcome, cache, coalesced, operation = result
            span.set_attributes(
                {
                    "dataplane.operation": operation,
                    "dataplane.cache": cache,
                    "dataplane.coalesced": coalesced,
                    "dataplane.outcome": outcome,
                }
            )
        m = instruments()
        labels = {"surface": self.surface.id, "operation": operation}
        m.queue_wait.record(max(0.0, job.queue_wait_ms), labels)
        m.execution.record((time.perf_counter() - started) * 1000, labels)
        m.jobs.add(1, {**labels, "outcome": outcome})
        if coalesced:
            m.coalesced.add(1, {"layer": "single_flight", "surface": self.surface.id})
        if cache == "hit":
            m.cache_hits.add(1, labels)
        if outcome == "poison":
            m.poison.add(1, labels)
        return result

    async def _execute_job(self, running: _Running, span: Span) -> tuple[str, str, bool, str]:
        """Run one job to its row write; returns (outcome, cache, coalesced, operation)."""
        job = running.job
        cache, coalesced, operation = "bypass", False, "?"
        try:
            envelope = Envelope.from_json(job.payload)
            operation = envelope.operation
            if envelope.surface != self.surface.id:
                raise HttpError(
                    404, f"this worker serves {self.surface.id!r}, not {envelope.surface!r}"
                )
            op = self.surface.operation(envelope.operation)
            if envelope.version != op.version:
                raise HttpError(
                    400, f"{op.name} is served at version {op.version}, not {envelope.version}"
                )
            params = op.check(envelope.auth, envelope.params)  # gates re-enforced here
            value: Any = None
            hit = False
            if op.cacheable:
                hit, value = self.cache.get(job.dedupe_key)
                cache = "hit" if hit else "miss"
            if hit:
                self._counters.cache_hits += 1
            else:
                ctx = OperationContext(
                    params=params,
                    auth=envelope.auth,
                    job_id=str(job.id),
                    dequeue_count=job.dequeue_count,
                    client_db=self.client_db,
                )
                value, coalesced, leader = await self.single_flight.run_with_meta(
                    job.dedupe_key, lambda: _call_handler(op, ctx), span.get_span_context()
                )
                if coalesced:
                    self._counters.coalesced += 1
                    if leader is not None and leader.is_valid:  # the execution that answered
                        span.add_link(leader, {"dataplane.link": "single_flight"})
                if op.cacheable and not coalesced and not isinstance(value, BlobResult | bytes):
                    self.cache.put(
                        job.dedupe_key, value, op.ttl_seconds, op.cache_tags(envelope.auth, params)
                    )
            completion = self._shape(job, value, cache=cache, coalesced=coalesced)
            await self._finish(running, completion)
            self._counters.done += 1
            return "done", cache, coalesced, operation
        except HttpError as exc:
            await self._finish(running, Completion(job, exc.to_payload()))
            self._counters.errors += 1
            return "error", cache, coalesced, operation
        except InvalidArgument as exc:  # a malformed envelope: an answer, not a retry
            error = HttpError(400, f"malformed job: {exc}")
            await self._finish(running, Completion(job, error.to_payload()))
            self._counters.errors += 1
            return "error", cache, coalesced, operation
        except LeaseLost:
            log.warning("job %s: lease lost before completion; result dropped", job.id)
            running.lost = True
            return "lost", cache, coalesced, operation
        except DatabaseError as exc:
            # The queue DB is out of reach: the lease will lapse and the job re-run.
            log.warning("job %s: could not write its outcome (%s)", job.id, exc)
            running.finished = True
            return "failed", cache, coalesced, operation
        except Exception as exc:
            return await self._fail(running, exc), cache, coalesced, operation

    def _shape(self, job: ClaimedJob, value: Any, *, cache: str, coalesced: bool) -> Completion:
        """The row's result, and a blob when the value is binary or too large to inline."""
        meta = {"cache": cache, "coalesced": coalesced}
        blob: Blob | None = None
        filename: str | None = None
        if isinstance(value, BlobResult):
            blob, filename = Blob(value.content_type, value.data), value.filename
        elif isinstance(value, bytes | bytearray):
            blob = Blob("application/octet-stream", bytes(value))
        else:
            text = to_json(value, what="handler result")
            if len(text.encode()) <= self.config.inline_max_bytes:
                return Completion(job, JsonText(_merge_json({"data": None, **meta}, text)))
            blob = Blob("application/json", text.encode())
        ref: dict[str, Any] = {
            "url": f"{self.blob_base_path}/{self.surface.id}/q/{job.id}/blob",
            "contentType": blob.content_type,
            "size": len(blob.data),
        }
        if filename:
            ref["filename"] = filename
        return Completion(job, {"blobRef": ref, **meta}, blob)

    async def _finish(self, running: _Running, completion: Completion) -> None:
        running.finishing = True
        job = running.job
        try:
            with tracer().start_as_current_span(
                f"complete {job.type}",
                attributes=messaging("settle", job.type, str(job.id)),
            ):
                await self.completer.complete(completion)
        finally:
            running.finished = True

    async def _fail(self, running: _Running, exc: Exception) -> str:
        job = running.job
        log.warning(
            "job %s (attempt %d/%d) failed: %r",
            job.id,
            job.dequeue_count,
            job.max_dequeues,
            exc,
            exc_info=exc if log.isEnabledFor(logging.DEBUG) else None,
        )
        running.finishing = True
        try:
            status = await self.queue.fail(
                job,
                f"{type(exc).__name__}: {exc}",
                backoff_seconds=self.config.fail_backoff_seconds,
            )
        except LeaseLost:
            running.lost = True
            return "lost"
        except DatabaseError as db_exc:
            log.warning("job %s: could not record the failure (%s)", job.id, db_exc)
            return "failed"
        finally:
            running.finished = True
        if status == "poison":
            self._counters.poisoned += 1
            return "poison"
        self._counters.failed += 1
        return "failed"


async def _call_handler(op: Operation, ctx: OperationContext) -> Any:
    with tracer().start_as_current_span(
        f"{op.name} handler", attributes={"dataplane.operation": op.name}
    ):
        return await op.handler(ctx)


def _merge_json(head: Mapping[str, Any], data_json: str) -> str:
    """``{"data": <data_json>, **rest}`` without parsing ``data_json`` again."""
    rest = {k: v for k, v in head.items() if k != "data"}
    tail = to_json(rest)[1:-1]
    return '{"data":' + data_json + ("," + tail if tail else "") + "}"
