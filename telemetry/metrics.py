"""Every counter and histogram of the data plane, declared in this one place (the
gauges of observed state beside the state they read, :mod:`telemetry.observed`).

Instruments come from the global meter provider, so they are no-ops until
:func:`telemetry.otel.setup_telemetry` installs a real one. Names follow
the OpenTelemetry semantic conventions where one exists (``messaging.process.duration``,
``http.server.request.duration``, ``db.client.connection.pending_requests``), otherwise
``dataplane.*``; every duration is in seconds. Prometheus names (``DATAPLANE_METRICS=1``)
are the OpenTelemetry names with dots as underscores and the unit appended, e.g.
``messaging_process_duration_seconds_bucket``, ``dataplane_poison_total``; attribute keys
likewise (``messaging.destination.name`` -> ``messaging_destination_name``).
``dashboards/README.md`` lists them all.

Two rules keep Prometheus' ``increase()`` and ``rate()`` honest:

* **no lazily created series**: a counter series that appears with its first event
  loses that event to ``increase()`` (nothing to subtract from). :func:`initialise`
  adds 0 to every label set a process knows at start (its surfaces, operations,
  outcomes, reasons), so each series exists, at zero, before its first event;
* **state is observed, not counted**: queue depth, LISTEN and pool gauges are
  observable instruments reading the current state at collection time
  (:func:`track_listener`, :func:`track_pool`, :func:`publish_queue_sample`, all in
  :mod:`telemetry.observed`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from typing import Literal

from opentelemetry import metrics
from opentelemetry.metrics import Counter, Histogram, Meter

# The observed state, its trackers and the queue sample live in their own module;
# they are imported from here too (``as``: re-exported).
from telemetry.observed import QUEUE_TYPE as QUEUE_TYPE
from telemetry.observed import create_observed_gauges
from telemetry.observed import current_queue_sample as current_queue_sample
from telemetry.observed import publish_queue_sample as publish_queue_sample
from telemetry.observed import track_listener as track_listener
from telemetry.observed import track_pool as track_pool
from telemetry.observed import track_waiters as track_waiters
from telemetry.observed import withdraw_queue_sample as withdraw_queue_sample

METER = "dataplane"
# Seconds, fine enough for the sub-millisecond and single-digit-millisecond figures we
# hold, wide enough for the 60 s stream deadline (queue wait under backlog, end to end).
SECONDS_BUCKETS = [
    0.00025,
    0.0005,
    0.001,
    0.002,
    0.003,
    0.005,
    0.008,
    0.013,
    0.02,
    0.03,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
]
MESSAGING_SYSTEM = "postgresql"

# Attribute keys (the span attributes' keys: a trace and a metric say the same thing);
# QUEUE_TYPE, "messaging.destination.name", comes from observed (its gauges carry it).
OPERATION = "dataplane.operation"
OUTCOME = "dataplane.outcome"
REASON = "dataplane.reason"

# Known label values, for initialise(): every series exists before its first event.
OUTCOMES = ("done", "error", "failed", "poison", "lost", "released", "cancelled")  # Outcome
POISON_REASONS = ("failed", "lease_lapsed")  # the fail at the cutoff; a lapsed last lease
FENCED_WRITES = ("complete", "fail")
CAPCOM_DROP_REASONS = tuple("queue_full timeout refused rejected error invalid shutdown".split())
REFUSAL_SCOPES = ("type", "client")
QUEUE_STATES = ("ready", "backing_off", "running", "lease_lapsed", "poison")


class Instruments:
    """Every instrument, by process: the worker's, the BFF's, the telemetry
    receiver's, and the gauges of observed state (created with the instruments)."""

    def __init__(self) -> None:
        meter = metrics.get_meter(METER)
        self._meter = meter
        self._worker(meter)
        self._bff(meter)
        self.capcom_received = _counter(
            meter,
            "dataplane.capcom.received",
            "{report}",
            "Job reports written to worker_runs (telemetry receiver)",
        )
        create_observed_gauges(meter)  # beside the state they read (telemetry.observed)

    def _worker(self, meter: Meter) -> None:
        self.process_duration = _histogram(
            meter,
            "messaging.process.duration",
            "Claim to completion of one attempt of a job (worker); error.type on failure",
        )
        self.queue_wait = _histogram(
            meter,
            "dataplane.queue.wait",
            "From when a job became claimable (enqueue, end of a retry backoff, lapsed "
            "lease) to its claim (worker)",
        )
        self.queue_wait_since_enqueue = _histogram(
            meter,
            "dataplane.queue.wait_since_enqueue",
            "From enqueue to claim, retry backoffs and earlier attempts included (worker)",
        )
        self.jobs = _counter(
            meter, "dataplane.jobs", "{job}", "Finished attempts by outcome (worker)"
        )
        self.cache_hits = _counter(
            meter, "dataplane.cache_hits", "{job}", "Jobs answered from the TTL cache (worker)"
        )
        self.poison = _counter(
            meter,
            "dataplane.poison",
            "{job}",
            "Jobs parked as poison: failed at the dequeue cutoff (worker) or with the lease "
            "of their last attempt lapsed (the next claim of their type, or maintenance)",
        )
        self.lease_lost = _counter(
            meter,
            "dataplane.lease.lost",
            "{job}",
            "Running claims a lease renewal found lost (execution cancelled) (worker)",
        )
        self.rescued = _counter(
            meter,
            "dataplane.jobs.rescued",
            "{job}",
            "Running claims of a worker whose liveness lapsed, made claimable by another "
            "worker's beat before their leases ended (worker)",
        )
        self.fenced = _counter(
            meter,
            "dataplane.completion.fenced",
            "{job}",
            "Completions and failures the fence refused: the claim was lost (worker)",
        )
        self.capcom_dropped = _counter(
            meter,
            "dataplane.capcom.dropped",
            "{report}",
            "Job reports the capcom sender dropped, by reason (worker)",
        )

    def _bff(self, meter: Meter) -> None:
        self.http_duration = _histogram(
            meter,
            "http.server.request.duration",
            "HTTP requests served, to the end of the response (BFF, capcom)",
        )
        self.end_to_end = _histogram(
            meter,
            "dataplane.end_to_end",
            "Enqueue to the answer handed to a waiting stream (BFF)",
        )
        self.enqueued = _counter(meter, "dataplane.enqueued", "{request}", "Accepted POSTs (BFF)")
        self.coalesced = _counter(
            meter,
            "dataplane.coalesced",
            "{request}",
            "Requests answered by another's execution, by layer (BFF: transport, worker: "
            "single_flight)",
        )
        self.refused = _counter(
            meter,
            "dataplane.enqueue.refused",
            "{request}",
            "POSTs refused by backpressure, by scope (type: 503, client: 429) (BFF)",
        )
        self.cancelled = _counter(
            meter, "dataplane.cancelled", "{job}", "Jobs cancelled by their requesters (BFF)"
        )
        self.stream_timeouts = _counter(
            meter,
            "dataplane.stream.timeouts",
            "{stream}",
            "Streams ended by the stream deadline with event: error TIMEOUT (BFF)",
        )
        self.invalidations_refused = _counter(
            meter,
            "dataplane.invalidations.refused",
            "{notify}",
            "Invalidation notifies a worker did not believe: not sealed with the notify "
            "secret (or too old), or a tag a BFF would not send (worker)",
        )
        self.outsider_locks = _counter(
            meter,
            "dataplane.outsider.locks",
            "{observation}",
            "Checks that found a plane lock held by a session whose role is not the plane's "
            "(worker, while waiting for its on-call lock)",
        )
        self.result_invalid = _counter(
            meter,
            "dataplane.result.invalid",
            "{answer}",
            "Answers that broke their operation's result schema, checked as "
            "DATAPLANE_RESULT_CHECK says: enforce answers RESULT_INVALID, count lets them "
            "go (worker)",
        )
        self.flow_deferred = _counter(
            meter,
            "dataplane.flow.deferred",
            "{claim}",
            "Claims that left an operation's claimable rows pending for its flow bound "
            "(max_concurrency or max_concurrency_per_client), one per claim and operation "
            "(worker)",
        )
        self.notify_rejected = _counter(
            meter,
            "dataplane.notify.rejected",
            "{notify}",
            "Done notifies the reply pump did not believe: a carried answer that did not "
            "open with the notify secret or parse (its row was read), or a payload naming "
            "no job (BFF)",
        )


def _histogram(meter: Meter, name: str, description: str) -> Histogram:
    return meter.create_histogram(
        name,
        unit="s",
        description=description,
        explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
    )


def _counter(meter: Meter, name: str, unit: str, description: str) -> Counter:
    return meter.create_counter(name, unit=unit, description=description)


def _as_is(meter: Meter) -> object:
    return meter


# What a meter records into: the API's proxy meter (made before a provider was set)
# delegates once one is, to a meter it keeps in a private attribute, which
# dataplane.compat.opentelemetry reads (use_meter_delegate). Without it a meter is
# taken as it is: a proxy counts as recording.
_meter_delegate: Callable[[Meter], object] = _as_is


def use_meter_delegate(delegate: Callable[[Meter], object] | None) -> None:
    """How :func:`metrics_on` sees through a proxy meter (None: it does not)."""
    global _meter_delegate
    _meter_delegate = delegate or _as_is


def metrics_on() -> bool:
    """Whether the instruments record anywhere: without a meter provider the API's
    proxy meter drops every value, so recording is skipped before its attributes are
    even built. A proxy meter records once a provider is set, from then on."""
    real = _meter_delegate(instruments()._meter)
    return real is not None and not isinstance(real, metrics.NoOpMeter)


@cache
def instruments() -> Instruments:
    """The process's instruments (created on first use, after setup_telemetry)."""
    return Instruments()


def process_attributes(queue_type: str, operation: str) -> dict[str, str]:
    """``messaging.process.duration``'s attributes (semantic conventions, plus the
    operation); add ``error.type`` for a failed attempt."""
    return {
        "messaging.system": MESSAGING_SYSTEM,
        QUEUE_TYPE: queue_type,
        "messaging.operation.name": "process",
        OPERATION: operation,
    }


# -- zero at start ------------------------------------------------------------------

Process = Literal["bff", "worker", "capcom"]


def initialise(
    process: Process,
    operations: Mapping[str, Sequence[str]] | None = None,
    *,
    cacheable: Iterable[tuple[str, str]] = (),
    maintained: Iterable[str] = (),
    bounded: Iterable[tuple[str, str]] = (),
) -> None:
    """Every counter series this process can produce, at zero, before any event.

    ``operations`` maps each queue type the process serves (a worker: its own; a BFF:
    every surface's, in its tier) to its operation names; ``cacheable`` lists the
    (queue type, operation) pairs with a TTL cache; ``maintained``, the other queue
    types whose rows a worker's maintenance pass may park as poison (``lease_lapsed``:
    the elected pass covers every type, whichever worker runs it) and whose claims its
    liveness beat may rescue (``dataplane.jobs.rescued``); ``bounded``, the
    (queue type, operation) pairs with a flow bound.
    """
    m = instruments()
    operations = operations or {}
    if process == "worker":
        for queue_type, names in operations.items():
            q = {QUEUE_TYPE: queue_type}
            for name in names:
                for outcome in OUTCOMES:
                    m.jobs.add(0, {**q, OPERATION: name, OUTCOME: outcome})
            for reason in POISON_REASONS:
                m.poison.add(0, {**q, REASON: reason})
            for write in FENCED_WRITES:
                m.fenced.add(0, {**q, "dataplane.write": write})
            m.lease_lost.add(0, q)
            m.coalesced.add(0, {**q, "dataplane.layer": "single_flight"})
            for name in names:
                m.result_invalid.add(0, {**q, OPERATION: name})
        for queue_type in maintained:  # any worker's beat rescues claims of any type
            m.poison.add(0, {QUEUE_TYPE: queue_type, REASON: "lease_lapsed"})
            m.rescued.add(0, {QUEUE_TYPE: queue_type})
        for queue_type, name in cacheable:
            m.cache_hits.add(0, {QUEUE_TYPE: queue_type, OPERATION: name})
        for queue_type, name in bounded:
            m.flow_deferred.add(0, {QUEUE_TYPE: queue_type, OPERATION: name})
        for reason in CAPCOM_DROP_REASONS:
            m.capcom_dropped.add(0, {REASON: reason})
        m.outsider_locks.add(0, {"dataplane.lock": "oncall"})
        for reason in ("unsealed", "bad_tag"):
            m.invalidations_refused.add(0, {"dataplane.reason": reason})
    elif process == "bff":
        for queue_type, names in operations.items():
            q = {QUEUE_TYPE: queue_type}
            for name in names:
                m.enqueued.add(0, {**q, OPERATION: name})
            for scope in REFUSAL_SCOPES:
                m.refused.add(0, {**q, "dataplane.scope": scope})
            m.coalesced.add(0, {**q, "dataplane.layer": "transport"})
            m.cancelled.add(0, q)
            m.stream_timeouts.add(0, q)
        m.notify_rejected.add(0)
    else:
        m.capcom_received.add(0)
