"""Every metric instrument of the data plane, declared in this one place.

Instruments come from the global meter provider, so they are no-ops until
:func:`dataplane.observability.otel.setup_telemetry` installs a real one. Prometheus names
(``DATAPLANE_METRICS=1``) are the OpenTelemetry names with dots as underscores
and the unit appended, e.g. ``dataplane_queue_wait_milliseconds_bucket``.
"""

from __future__ import annotations

from functools import cache

from opentelemetry import metrics
from opentelemetry.metrics import Counter, Histogram, UpDownCounter

METER = "dataplane"
# Latency buckets fine enough for the sub-millisecond and single-digit figures we hold.
MS_BUCKETS = [0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 50, 100, 250, 500, 1000, 2500, 5000, 10_000]


class Instruments:
    def __init__(self) -> None:
        meter = metrics.get_meter(METER)
        self.queue_wait: Histogram = meter.create_histogram(
            "dataplane.queue_wait",
            unit="ms",
            description="Enqueue to claim, per job (worker)",
            explicit_bucket_boundaries_advisory=MS_BUCKETS,
        )
        self.execution: Histogram = meter.create_histogram(
            "dataplane.execution",
            unit="ms",
            description="Claim to completion, per job (worker)",
            explicit_bucket_boundaries_advisory=MS_BUCKETS,
        )
        self.end_to_end: Histogram = meter.create_histogram(
            "dataplane.end_to_end",
            unit="ms",
            description="Enqueue to the answer handed to a waiting stream (BFF)",
            explicit_bucket_boundaries_advisory=MS_BUCKETS,
        )
        self.jobs: Counter = meter.create_counter(
            "dataplane.jobs", unit="1", description="Finished jobs by outcome (worker)"
        )
        self.coalesced: Counter = meter.create_counter(
            "dataplane.coalesced",
            unit="1",
            description="Requests answered by another's execution, by layer",
        )
        self.cache_hits: Counter = meter.create_counter(
            "dataplane.cache_hits", unit="1", description="Jobs answered from the TTL cache"
        )
        self.waiters: UpDownCounter = meter.create_up_down_counter(
            "dataplane.waiters", unit="1", description="Streams waiting for an answer (BFF)"
        )
        self.poison: Counter = meter.create_counter(
            "dataplane.poison", unit="1", description="Jobs parked as poison"
        )
        self.capcom_dropped: Counter = meter.create_counter(
            "dataplane.capcom.dropped",
            unit="1",
            description="Job reports the capcom sender dropped (queue full, timeout, refused)",
        )
        self.enqueued: Counter = meter.create_counter(
            "dataplane.enqueued", unit="1", description="Accepted POSTs, by surface (BFF)"
        )
        self.refused: Counter = meter.create_counter(
            "dataplane.enqueue.refused",
            unit="1",
            description="POSTs refused by backpressure, by surface and scope (type: 503, "
            "client: 429) (BFF)",
        )
        self.cancelled: Counter = meter.create_counter(
            "dataplane.cancelled", unit="1", description="Jobs cancelled by their requesters"
        )
        self.capcom_received: Counter = meter.create_counter(
            "dataplane.capcom.received",
            unit="1",
            description="Job reports written to worker_runs (telemetry receiver)",
        )


@cache
def instruments() -> Instruments:
    """The process's instruments (created on first use, after setup_telemetry)."""
    return Instruments()
