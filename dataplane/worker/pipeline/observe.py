"""What one attempt of a job leaves for operators: its spans, metrics and report.

* Spans: a ``wait`` span recorded from the row's timestamps (claimable -> claimed),
  then the attempt's ``process`` span (:func:`process_span`), both children of the
  request's producer context on every attempt (retries and re-drives included). Nothing
  is built when tracing is off; a wait outside the request's trace is not recorded.
* Metrics (:func:`record_attempt`): every attempt, whatever its outcome (released and
  lost included), records its duration, its queue waits and its outcome.
* The report (:func:`job_report`): one
  :class:`~telemetry.report.JobReport` per attempt, with its trace id,
  for the reporter (capcom).

:class:`Attempt` is the one observer the executor calls at its steps (made current,
lease lost, failed, fenced out, poisoned, coalesced, settling, ended), so the pipeline
reads as its steps and all that observes them is here; a failure's record, log record
and span event are made by :mod:`dataplane.worker.pipeline.failures`. :class:`JobResult` is how the
attempt ended, as all three tell it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from dataplane.core.errors import LeaseLost
from dataplane.queue import ClaimedJob
from dataplane.surfaces.sources import SurfaceSources
from dataplane.worker.pipeline.failures import failure_of, log_failure, span_attributes
from dataplane.worker.pipeline.handler import HandlerTimeout
from dataplane.worker.report import Reporter, rss_bytes
from telemetry.failures import AttemptFailure
from telemetry.metrics import (
    OPERATION,
    OUTCOME,
    QUEUE_TYPE,
    REASON,
    instruments,
    metrics_on,
    process_attributes,
)
from telemetry.report import CacheStatus, JobReport, Outcome
from telemetry.tracing import (
    context_from,
    context_of,
    failed,
    messaging,
    record_span,
    trace_id_hex,
    tracer,
    tracing_on,
)

# An attempt's warning lines keep the logger they always had, the executor's.
log = logging.getLogger("dataplane.worker.pipeline.executor")


@dataclass(frozen=True, slots=True)
class JobResult:
    """How one claim ended, as the report, the span and the metrics tell it."""

    outcome: Outcome
    operation: str = "?"
    cache: CacheStatus = CacheStatus.BYPASS
    coalesced: bool = False
    error_type: str | None = None  # the failed attempt's exception type (metrics)


def process_span(job: ClaimedJob, surface_id: str) -> Span:
    """The attempt's ``process`` span (not yet current), after its ``wait`` span.

    Both are children of the request's producer context on every attempt; the
    wait, from when the row became claimable to its claim, is recorded from the
    row's timestamps. Nothing is built when tracing is off.
    """
    if not tracing_on():
        return trace.INVALID_SPAN
    traceparent = job.payload.get("traceparent") if isinstance(job.payload, dict) else None
    parent = context_from(traceparent)
    job_id = str(job.id)
    waits: dict[str, Any] = {
        "queue_wait_ms": round(job.queue_wait_ms, 3),
        "ready_wait_ms": round(job.ready_wait_ms, 3),
        "attempt": job.dequeue_count,
    }
    if parent is not None:  # a wait outside the request's trace would be an orphan
        record_span(
            f"wait {job.type}",
            parent,
            job.ready_at,
            job.claimed_at,
            attributes=messaging("receive", job.type, job_id, operation_name="wait", **waits),
        )
    attrs = {
        **messaging(
            "process",
            job.type,
            job_id,
            surface=surface_id,
            queue_wait_ms=waits["queue_wait_ms"],
            attempt=job.dequeue_count,
        ),
        "messaging.message.delivery_count": job.dequeue_count,
    }
    return tracer().start_span(
        f"process {job.type}", context=parent, kind=SpanKind.CONSUMER, attributes=attrs
    )


def record_attempt(job: ClaimedJob, result: JobResult, seconds: float) -> None:
    """One attempt's metrics, whatever its outcome (released and lost included)."""
    if not metrics_on():
        return
    m = instruments()
    queue = {QUEUE_TYPE: job.type}
    labels = {**queue, OPERATION: result.operation}
    attrs = process_attributes(job.type, result.operation)
    if result.error_type is not None:
        attrs["error.type"] = result.error_type
    m.process_duration.record(seconds, attrs)
    m.queue_wait.record(job.ready_wait_ms / 1000, labels)
    m.queue_wait_since_enqueue.record(max(0.0, job.queue_wait_ms) / 1000, labels)
    m.jobs.add(1, {**labels, OUTCOME: result.outcome.value})
    if result.coalesced:
        m.coalesced.add(1, {**queue, "dataplane.layer": "single_flight"})
    if result.cache is CacheStatus.HIT:
        m.cache_hits.add(1, labels)
    if result.outcome is Outcome.POISON:
        m.poison.add(1, {**queue, REASON: "failed"})


_results_warned: set[tuple[str, str]] = set()  # (type, operation) counted and warned of


def error_type(exc: BaseException) -> str:
    """``error.type`` of a failed attempt: ``TIMEOUT``, else the exception's class."""
    return "TIMEOUT" if isinstance(exc, HandlerTimeout) else type(exc).__name__


def fenced_out(job: ClaimedJob, write: Literal["complete", "fail"]) -> None:
    """A write the fence refused (the claim was lost): counted and logged."""
    instruments().fenced.add(1, {QUEUE_TYPE: job.type, "dataplane.write": write})
    what = (
        "its completion fenced out; result dropped"
        if write == "complete"
        else "its failure write fenced out"
    )
    log.warning(
        "job %s (%s, attempt %d): lease lost, %s", job.id, job.type, job.dequeue_count, what
    )


def poisoned(job: ClaimedJob, exc: BaseException, span: Span) -> None:
    """A failure at the dequeue cutoff parked the job as poison: logged, and an event
    on the attempt's span."""
    log.warning(
        "job %s (%s, attempt %d/%d): poisoned after %s",
        job.id,
        job.type,
        job.dequeue_count,
        job.max_dequeues,
        error_type(exc),
    )
    if span.is_recording():
        span.add_event("POISON", {**attempt_event(job), "error.type": error_type(exc)})


def attempt_event(job: ClaimedJob) -> dict[str, Any]:
    return {"dataplane.attempt": job.dequeue_count, "dataplane.max_dequeues": job.max_dequeues}


def job_report(
    job: ClaimedJob, result: JobResult, started: float, cpu_started: float, trace_id: str | None
) -> JobReport:
    return JobReport(
        job_id=str(job.id),
        type=job.type,
        operation=result.operation,
        outcome=result.outcome,
        wall_ms=(time.perf_counter() - started) * 1000,
        cpu_ms=(time.process_time() - cpu_started) * 1000,
        rss_bytes=rss_bytes(),
        queue_wait_ms=max(0.0, job.queue_wait_ms),
        cache=result.cache,
        coalesced=result.coalesced,
        dequeue_count=job.dequeue_count,
        worker_id=job.worker_id,
        finished_at=time.time(),
        trace_id=trace_id,
    )


class Attempt:
    """One attempt's observation: the executor calls it at its steps."""

    __slots__ = (
        "cpu_started",
        "failure",
        "job",
        "reporter",
        "sources",
        "span",
        "started",
        "surface_id",
    )

    def __init__(
        self,
        job: ClaimedJob,
        surface_id: str,
        reporter: Reporter | None,
        sources: SurfaceSources | None = None,
    ) -> None:
        self.job = job
        self.surface_id = surface_id
        self.reporter = reporter
        self.sources = sources if sources is not None else SurfaceSources()
        self.failure: AttemptFailure | None = None  # the record of its exception, if any
        self.started = time.perf_counter()  # the attempt's duration is always recorded
        self.cpu_started = time.process_time() if reporter is not None else 0.0
        self.span = process_span(job, surface_id)

    @property
    def traced(self) -> bool:
        """Whether tracing is on (else no span is made current or started)."""
        return self.span is not trace.INVALID_SPAN

    def current(self) -> AbstractContextManager[Any]:
        """The ``process`` span made current for the attempt's steps, ended after them."""
        return trace.use_span(self.span, end_on_exit=True) if self.traced else nullcontext()

    def ended_as(self, result: JobResult) -> None:
        """What the ``process`` span says of the outcome (inside :meth:`current`)."""
        if self.traced:
            self.span.set_attributes(
                {
                    "dataplane.operation": result.operation,
                    "dataplane.cache": result.cache.value,
                    "dataplane.coalesced": result.coalesced,
                    "dataplane.outcome": result.outcome.value,
                }
            )

    def lease_lost(self) -> None:
        """A renewal found the claim gone and cancelled the execution."""
        if self.span.is_recording():
            self.span.add_event("LEASE_LOST", attempt_event(self.job))
            failed(self.span, "LEASE_LOST", "a renewal found the claim gone")

    def cancelled(self) -> None:
        """The row was cancelled (by its requesters or an operator), and the worker
        cancelled its execution."""
        if self.span.is_recording():
            self.span.add_event("CANCELLED", attempt_event(self.job))
            failed(self.span, "CANCELLED", "the job was cancelled while it ran")

    def failed(self, exc: Exception, operation: str) -> AttemptFailure:
        """The handler (or the job's checks) raised: the attempt failed. Its record
        (:attr:`failure`, for the row), its one log record, the exception on its span
        (:mod:`dataplane.worker.pipeline.failures`)."""
        self.failure, frame = failure_of(exc, self.job, self.sources, trace_id_hex(self.span))
        log_failure(self.job, self.surface_id, operation, exc, self.failure)
        if self.span.is_recording():
            self.span.record_exception(exc, span_attributes(self.failure, frame))
            failed(self.span, error_type(exc), f"{type(exc).__name__}: {exc}")
        return self.failure

    def fenced_out(self, write: Literal["complete", "fail"]) -> None:
        """The fence refused the attempt's write (the claim was lost)."""
        fenced_out(self.job, write)
        if write == "complete":
            failed(self.span, "FENCED_OUT", "the claim was lost: the result was dropped")
        else:
            self.span.add_event("FENCED_OUT", attempt_event(self.job))

    def poisoned(self, exc: BaseException) -> None:
        poisoned(self.job, exc, self.span)

    def result_invalid(self, operation: str, problem: str, enforced: bool) -> None:
        """The answer broke its operation's result schema: counted, logged (each time
        it is enforced, else once per operation and process), an event on the span."""
        instruments().result_invalid.add(1, {QUEUE_TYPE: self.job.type, OPERATION: operation})
        if enforced or (self.job.type, operation) not in _results_warned:
            if not enforced:
                _results_warned.add((self.job.type, operation))
            log.log(
                logging.ERROR if enforced else logging.WARNING,
                "job %s (%s, %s): the answer breaks its result schema: %s%s",
                self.job.id,
                self.job.type,
                operation,
                problem,
                "" if enforced else " (counted, answered anyway; logged once)",
            )
        if self.span.is_recording():
            self.span.add_event("RESULT_INVALID", {"dataplane.problem": problem})

    def coalesced_with(self, leader: Any) -> None:
        """The value came from another job's execution (single flight): link to it."""
        if leader is not None and leader.is_valid:
            self.span.add_link(leader, {"dataplane.link": "single_flight"})

    @contextmanager
    def settling(self) -> Iterator[Span]:
        """The ``complete`` span around the outcome's write (the invalid span when
        tracing is off); a write the fence refuses is an event and its error."""
        job = self.job
        if not trace.get_current_span().is_recording():
            yield trace.INVALID_SPAN  # tracing off: no span to start or make current
            return
        with tracer().start_as_current_span(
            f"complete {job.type}",
            kind=SpanKind.CLIENT,
            attributes=messaging("settle", job.type, str(job.id), operation_name="complete"),
        ) as span:
            try:
                yield span
            except LeaseLost:
                span.add_event("FENCED_OUT", attempt_event(job))
                failed(span, "FENCED_OUT", "the claim was lost: the write was refused")
                raise

    def record(self, result: JobResult) -> None:
        """The attempt's metrics, whatever its outcome."""
        record_attempt(self.job, result, time.perf_counter() - self.started)

    def report(self, result: JobResult) -> None:
        """The attempt's report, to the reporter (none at all without one: RSS reads
        /proc)."""
        if self.reporter is None:
            return
        trace_id = trace_id_hex(self.span)  # None when tracing is off
        report = job_report(self.job, result, self.started, self.cpu_started, trace_id)
        if trace_id is None:
            self.reporter.report(report)
        else:
            self.reporter.report(report, parent=context_of(self.span))
