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

:class:`JobResult` is how the attempt ended, as all three tell it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from dataplane.queue import ClaimedJob
from dataplane.worker.pipeline.handler import HandlerTimeout
from dataplane.worker.report import rss_bytes
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
    messaging,
    record_span,
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
