"""One job's pipeline, from its claim to its row's last write.

envelope -> operation -> params validated -> gates re-enforced from the
envelope's ``auth`` -> dedupe key recomputed from the checked envelope -> TTL
cache (``ttl_seconds > 0`` only) -> single-flight per dedupe key -> handler ->
blob offload -> complete.

Outcomes (:class:`~telemetry.report.Outcome`): an ``HttpError`` (or
a malformed envelope, a 400) completes the job with an error payload, ``error``;
any other exception fails it, ``failed`` (retried after the backoff) or
``poison`` (at the cutoff); a fenced-out write, or a renewal that found the
claim gone, means the lease was lost, ``lost``, and the work is dropped; a job
cancelled while it ran, by an operator or by its last requester's withdrawal
(:mod:`dataplane.worker.claims.cancels`), is dropped alike, its row already final,
``cancelled``; a job cancelled by shutdown past the grace period is
handed back, ``released``. A
queue DB out of reach when the outcome is written leaves the row to its lease.

Each attempt runs in its ``process`` span; a failed attempt's span is ERROR with
``error.type`` and records the exception; the attempt's record (type, message, bounded
traceback, the surface's frame: :mod:`dataplane.worker.pipeline.failures`) goes to the
row with the failure, and one ERROR record with the traceback is logged. A poisoning
attempt, a lost lease and a fenced-out write add a ``POISON``, ``LEASE_LOST`` or
``FENCED_OUT`` event (and a warning line naming the job, its type and attempt). All of
that is one observer the pipeline calls at its steps
(:class:`~dataplane.worker.pipeline.observe.Attempt`), so the steps read here in order;
the completion its value becomes is :mod:`dataplane.worker.pipeline.results`'s, the
handler's call under its deadline :mod:`dataplane.worker.pipeline.handler`'s.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from dataplane.core.errors import DatabaseError, HttpError, InvalidArgument, LeaseLost
from dataplane.db import Database
from dataplane.queue import ClaimedJob, Completion, QueueClient
from dataplane.queue.envelope import Envelope
from dataplane.surfaces.manifest import BlobResult, Operation, OperationContext, Surface
from dataplane.surfaces.sources import surface_sources
from dataplane.worker.claims.completer import Completer
from dataplane.worker.claims.held import HeldJobs, Running
from dataplane.worker.config import WorkerConfig
from dataplane.worker.pipeline.cache import SingleFlight, TtlCache
from dataplane.worker.pipeline.deadlines import HandlerDeadlines
from dataplane.worker.pipeline.handler import HandlerTimeout, call_handler, timeout_message
from dataplane.worker.pipeline.observe import Attempt, JobResult
from dataplane.worker.pipeline.results import shape
from dataplane.worker.progress import ProgressWriter
from dataplane.worker.report import Reporter
from telemetry.report import CacheStatus, Outcome
from telemetry.tracing import context_of

log = logging.getLogger(__name__)

RELEASE_TIMEOUT = 5.0  # seconds the shielded release on shutdown may take


@dataclass
class ExecutorCounters:
    done: int = 0
    errors: int = 0
    failed: int = 0
    poisoned: int = 0
    lost: int = 0
    cancelled: int = 0
    released: int = 0
    coalesced: int = 0
    cache_hits: int = 0


class JobExecutor:
    def __init__(
        self,
        config: WorkerConfig,
        surface: Surface,
        queue: QueueClient,
        completer: Completer,
        held: HeldJobs,
        *,
        client_db: Database | None,
        cache: TtlCache,
        reporter: Reporter | None,
        on_finished: Callable[[], None],
        on_retry: Callable[[float], None] | None = None,
        progress: ProgressWriter | None = None,
    ) -> None:
        self.config = config
        self.surface = surface
        self.queue = queue
        self.completer = completer
        self.held = held
        self.client_db = client_db
        self.cache = cache
        self.reporter = reporter
        self.on_finished = on_finished
        self.on_retry = on_retry  # a failed job is claimable again in so many seconds
        self.progress = progress  # where handlers' progress goes (None: nowhere)
        self.tier = config.parsed_type.suffix  # its own: the envelope's is not trusted
        self.single_flight: SingleFlight[Any] = SingleFlight()
        self.deadlines = HandlerDeadlines(held)  # the worker runs it (deadlines.run)
        self.counters = ExecutorCounters()
        self.sources = surface_sources(surface)  # the frames a failure's traceback marks

    async def run(self, running: Running) -> None:
        """Execute one claim; hand the row back if shutdown cancels it unfinished."""
        job = running.job
        attempt = Attempt(job, self.surface.id, self.reporter, self.sources)
        result = JobResult(Outcome.RELEASED, self._operation_of(job))
        try:
            with attempt.current():
                result = await self._execute(running, attempt)
                attempt.ended_as(result)
            if running.cancelled:  # by an operator or its requesters: the row is final
                result = JobResult(
                    Outcome.CANCELLED, result.operation, result.cache, result.coalesced, "Cancelled"
                )
                self.counters.cancelled += 1
            elif running.lost:  # cancelled by a renewal, or its write fenced out
                result = JobResult(
                    Outcome.LOST, result.operation, result.cache, result.coalesced, "LeaseLost"
                )
                self.counters.lost += 1
        finally:
            if self.progress is not None:
                self.progress.forget(job.id)
            if not (running.finished or running.lost):
                await self._release(job)
            attempt.record(result)
            self.held.remove(running)
            self.on_finished()
            attempt.report(result)

    def _operation_of(self, job: ClaimedJob) -> str:
        """The job's operation while it has not been checked yet (a cancelled or lost
        attempt's metrics and report): a known name of this surface, else ``?``."""
        name = job.payload.get("operation") if isinstance(job.payload, dict) else None
        return name if isinstance(name, str) and name in self.surface.operations else "?"

    async def _release(self, job: ClaimedJob) -> None:
        """Cancelled by shutdown past the grace period: hand the row back (shielded)."""
        with trio.CancelScope(shield=True), trio.move_on_after(RELEASE_TIMEOUT):
            try:
                await self.queue.release([job])
                self.counters.released += 1
            except DatabaseError as exc:
                log.warning("job %s: release failed (%s); its lease will lapse", job.id, exc)

    async def _execute(self, running: Running, attempt: Attempt) -> JobResult:
        """Run one job, then write its outcome.

        Whatever the handler raises (a client-DB error included) is the job's failure
        and takes the fail path. Only a failure to write the outcome to the queue DB
        is an outage: the completer retries it while the lease keeper keeps the lease,
        and if it never lands the claim is released (or, the DB still down, lapses).
        """
        job = running.job
        operation, cache, coalesced = "?", CacheStatus.BYPASS, False
        try:
            envelope = Envelope.from_json(job.payload)
            operation = envelope.operation
            op, params = self._checked(envelope)
            if op.cacheable:
                cache = CacheStatus.MISS
            value, cache, coalesced = await self._produce(running, envelope, op, params, attempt)
            completion = shape(
                job, value, cache, coalesced, inline_max_bytes=self.config.inline_max_bytes
            )
            outcome = Outcome.DONE
        except _ClaimLost:
            # A renewal found the claim gone, or the row was cancelled, and cancelled
            # the execution: drop the work.
            if running.cancelled:
                attempt.cancelled()
                return JobResult(Outcome.CANCELLED, operation, cache, error_type="Cancelled")
            attempt.lease_lost()
            return JobResult(Outcome.LOST, operation, cache, error_type="LeaseLost")
        except ResultInvalid as exc:
            # A defect of the surface (its answer breaks its schema): answered loudly at
            # once, not retried (the handler would answer the same).
            completion, outcome = Completion(job, exc.to_payload()), Outcome.ERROR
        except (HttpError, InvalidArgument) as exc:
            # An expected error, or a malformed envelope: an answer, not a retry.
            error = exc if isinstance(exc, HttpError) else HttpError(400, f"malformed job: {exc}")
            completion, outcome, coalesced = (
                Completion(job, error.to_payload()),
                Outcome.ERROR,
                False,
            )
        except Exception as exc:
            attempt.failed(exc, operation)
            outcome = await self._fail(running, exc, attempt)
            return JobResult(outcome, operation, cache, error_type=type(exc).__qualname__)
        try:
            await self._finish(running, completion, attempt)
        except LeaseLost:
            attempt.fenced_out("complete")
            running.lost = True
            return JobResult(Outcome.LOST, operation, cache, error_type="LeaseLost")
        except DatabaseError as exc:
            log.warning(
                "job %s: could not write its outcome (%s); handing the claim back", job.id, exc
            )
            return JobResult(Outcome.FAILED, operation, cache, error_type=type(exc).__qualname__)
        if outcome is Outcome.DONE:
            self.counters.done += 1
        else:
            self.counters.errors += 1
        return JobResult(outcome, operation, cache, coalesced)

    async def _produce(
        self,
        running: Running,
        envelope: Envelope,
        op: Operation,
        params: dict[str, Any],
        attempt: Attempt,
    ) -> tuple[Any, CacheStatus, bool]:
        """The job's value: from the cache, another execution's, or the handler's.

        The claim's only wait before its outcome is written, so the only part a lost
        lease or the operation's timeout cancels (its claim's scope, see
        :mod:`dataplane.worker.pipeline.deadlines`): :class:`_ClaimLost` or
        :class:`HandlerTimeout` then.
        """
        job = running.job
        # The key this worker caches and single-flights under is its own, computed
        # from the checked envelope; the row's dedupe_key is not trusted for it.
        checked = Envelope(
            envelope.surface,
            op.name,
            op.version,
            params,
            envelope.auth,
            tier=self.tier,
            per_user=op.per_user,  # from this worker's declaration, not the row
        )
        key = checked.dedupe_key
        if op.cacheable:
            hit, value = self.cache.get(key)
            if hit:
                self.counters.cache_hits += 1
                return value, CacheStatus.HIT, False
        ctx = OperationContext(
            params=params,
            auth=envelope.auth,
            job_id=str(job.id),
            dequeue_count=job.dequeue_count,
            client_db=self.client_db,
            progress_sink=self.progress.sink(job) if self.progress is not None else None,
        )
        timeout = op.timeout_seconds
        if self.config.max_handler_seconds is not None:
            timeout = min(timeout, self.config.max_handler_seconds)
        self.deadlines.start(running, timeout)
        try:
            with running.scope:
                value, coalesced, leader = await self.single_flight.run_with_meta(
                    key,
                    lambda: call_handler(op, ctx, running, timeout, attempt.traced),
                    attempt.span.get_span_context(),
                )
        finally:
            running.deadline = math.inf  # past the part its deadline bounds
        if running.scope.cancelled_caught:
            if running.lost:
                raise _ClaimLost
            # Its own deadline, waiting for another job's execution (single flight).
            raise HandlerTimeout(timeout_message(op, timeout))
        if coalesced:
            self.counters.coalesced += 1
            attempt.coalesced_with(leader)  # the execution that answered
        self._check_result(op, value, attempt)  # before the cache keeps it
        if op.cacheable and not coalesced and not isinstance(value, BlobResult | bytes):
            self.cache.put(key, value, op.ttl_seconds, op.cache_tags(envelope.auth, params))
        cache = CacheStatus.MISS if op.cacheable else CacheStatus.BYPASS
        return value, cache, coalesced

    def _check_result(self, op: Operation, value: Any, attempt: Attempt) -> None:
        """A JSON answer against its operation's result schema, as the worker's
        ``result_check`` says: ``enforce`` raises :class:`ResultInvalid`, ``count``
        counts and lets it go, ``off`` (the default) costs nothing."""
        mode = self.config.result_check
        if mode == "off" or op.result is None or isinstance(value, BlobResult | bytes):
            return
        problem = op.result_problem(value)
        if problem is not None:
            attempt.result_invalid(op.name, problem, enforced=mode == "enforce")
            if mode == "enforce":
                raise ResultInvalid(problem)

    def _checked(self, envelope: Envelope) -> tuple[Operation, dict[str, Any]]:
        """The operation and its checked params; gates re-enforced from the envelope."""
        if envelope.surface != self.surface.id:
            raise HttpError(
                404, f"this worker serves {self.surface.id!r}, not {envelope.surface!r}"
            )
        op = self.surface.operation(envelope.operation, envelope.version)
        return op, op.check(envelope.auth, envelope.params)

    async def _finish(self, running: Running, completion: Completion, attempt: Attempt) -> None:
        """Write the outcome; ``finished`` once it landed or the fence refused it.

        While the completer retries through an outage the claim stays held and renewed;
        if the write never lands, ``run`` releases the claim.
        """
        self.held.hand_off(running)
        try:
            with attempt.settling() as span:
                if span.is_recording():  # its statement is traced under this span
                    completion = dataclasses.replace(completion, trace=context_of(span))
                await self.completer.complete(completion)
        except LeaseLost:
            running.finished = True
            raise
        running.finished = True

    async def _fail(self, running: Running, exc: Exception, attempt: Attempt) -> Outcome:
        job = running.job
        self.held.hand_off(running)
        try:
            status = await self.queue.fail(
                job,
                attempt.failure or f"{type(exc).__name__}: {exc}",  # its record, for `errors`
                backoff_seconds=self.config.queue.fail_backoff_seconds,
            )
        except LeaseLost:
            attempt.fenced_out("fail")
            running.finished = running.lost = True
            return Outcome.LOST
        except DatabaseError as db_exc:
            # Not finished: ``run`` hands the claim back (or, the DB still down, it lapses).
            log.warning("job %s: could not record the failure (%s)", job.id, db_exc)
            return Outcome.FAILED
        running.finished = True
        if status == "poison":
            attempt.poisoned(exc)
            self.counters.poisoned += 1
            return Outcome.POISON
        self.counters.failed += 1
        if self.on_retry is not None:
            self.on_retry(self.config.queue.fail_backoff_seconds)
        return Outcome.FAILED


class ResultInvalid(Exception):
    """The handler's answer breaks its operation's result schema (``enforce``)."""

    def to_payload(self) -> dict[str, Any]:
        return {"error": {"status": 500, "code": "RESULT_INVALID", "message": str(self)}}


class _ClaimLost(Exception):
    """A renewal found the claim gone and cancelled its execution (the work is dropped)."""
