"""Every metric instrument of the data plane, declared in this one place.

Instruments come from the global meter provider, so they are no-ops until
:func:`dataplane.observability.otel.setup_telemetry` installs a real one. Names follow
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
  (:func:`track_listener`, :func:`track_pool`, :func:`publish_queue_sample`).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any, Literal, Protocol

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Observation

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

# Attribute keys (the span attributes' keys: a trace and a metric say the same thing).
QUEUE_TYPE = "messaging.destination.name"
OPERATION = "dataplane.operation"
OUTCOME = "dataplane.outcome"
REASON = "dataplane.reason"

# Known label values, for initialise(): every series exists before its first event.
OUTCOMES = ("done", "error", "failed", "poison", "lost", "released")  # report.Outcome
POISON_REASONS = ("failed", "lease_lapsed")  # the fail at the cutoff; a lapsed last lease
FENCED_WRITES = ("complete", "fail")
CAPCOM_DROP_REASONS = (
    "queue_full",
    "timeout",
    "refused",
    "rejected",
    "error",
    "invalid",
    "shutdown",
)
REFUSAL_SCOPES = ("type", "client")
QUEUE_STATES = ("ready", "backing_off", "running", "lease_lapsed", "poison")


class Instruments:
    def __init__(self) -> None:
        meter = metrics.get_meter(METER)
        self._meter = meter

        def histogram(name: str, description: str) -> Histogram:
            return meter.create_histogram(
                name,
                unit="s",
                description=description,
                explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
            )

        def counter(name: str, unit: str, description: str) -> Counter:
            return meter.create_counter(name, unit=unit, description=description)

        # -- worker ---------------------------------------------------------------
        self.process_duration = histogram(
            "messaging.process.duration",
            "Claim to completion of one attempt of a job (worker); error.type on failure",
        )
        self.queue_wait = histogram(
            "dataplane.queue.wait",
            "From when a job became claimable (enqueue, end of a retry backoff, lapsed "
            "lease) to its claim (worker)",
        )
        self.queue_wait_since_enqueue = histogram(
            "dataplane.queue.wait_since_enqueue",
            "From enqueue to claim, retry backoffs and earlier attempts included (worker)",
        )
        self.jobs = counter("dataplane.jobs", "{job}", "Finished attempts by outcome (worker)")
        self.cache_hits = counter(
            "dataplane.cache_hits", "{job}", "Jobs answered from the TTL cache (worker)"
        )
        self.poison = counter(
            "dataplane.poison",
            "{job}",
            "Jobs parked as poison: failed at the dequeue cutoff (worker) or with the lease "
            "of their last attempt lapsed (the next claim of their type, or maintenance)",
        )
        self.lease_lost = counter(
            "dataplane.lease.lost",
            "{job}",
            "Running claims a lease renewal found lost (execution cancelled) (worker)",
        )
        self.fenced = counter(
            "dataplane.completion.fenced",
            "{job}",
            "Completions and failures the fence refused: the claim was lost (worker)",
        )
        self.capcom_dropped = counter(
            "dataplane.capcom.dropped",
            "{report}",
            "Job reports the capcom sender dropped, by reason (worker)",
        )
        # -- BFF --------------------------------------------------------------------
        self.http_duration = histogram(
            "http.server.request.duration",
            "HTTP requests served, to the end of the response (BFF, capcom)",
        )
        self.end_to_end = histogram(
            "dataplane.end_to_end",
            "Enqueue to the answer handed to a waiting stream (BFF)",
        )
        self.enqueued = counter("dataplane.enqueued", "{request}", "Accepted POSTs (BFF)")
        self.coalesced = counter(
            "dataplane.coalesced",
            "{request}",
            "Requests answered by another's execution, by layer (BFF: transport, worker: "
            "single_flight)",
        )
        self.refused = counter(
            "dataplane.enqueue.refused",
            "{request}",
            "POSTs refused by backpressure, by scope (type: 503, client: 429) (BFF)",
        )
        self.cancelled = counter(
            "dataplane.cancelled", "{job}", "Jobs cancelled by their requesters (BFF)"
        )
        self.stream_timeouts = counter(
            "dataplane.stream.timeouts",
            "{stream}",
            "Streams ended by the stream deadline with event: error TIMEOUT (BFF)",
        )
        self.notify_rejected = counter(
            "dataplane.notify.rejected",
            "{notify}",
            "Done notifies the reply pump did not believe: a carried answer that did not "
            "open with the notify secret or parse (its row was read), or a payload naming "
            "no job (BFF)",
        )
        meter.create_observable_up_down_counter(  # read when collected: free per request
            "dataplane.waiters",
            callbacks=[_observe_waiters],
            unit="{stream}",
            description="Streams waiting for an answer (BFF)",
        )
        # -- telemetry receiver -------------------------------------------------------
        self.capcom_received = counter(
            "dataplane.capcom.received",
            "{report}",
            "Job reports written to worker_runs (telemetry receiver)",
        )
        # -- observed state ---------------------------------------------------------------
        meter.create_observable_gauge(
            "dataplane.queue.depth",
            callbacks=[_observe_depth],
            unit="{job}",
            description="Rows by queue type and state (ready, backing_off, running, "
            "lease_lapsed, poison), sampled by one elected worker",
        )
        meter.create_observable_gauge(
            "dataplane.queue.oldest_ready_age",
            callbacks=[_observe_oldest],
            unit="s",
            description="Age of the oldest claimable row since it became claimable, by queue "
            "type (0: none), sampled by one elected worker",
        )
        meter.create_observable_gauge(
            "dataplane.listen.connected",
            callbacks=[_observe_listeners],
            unit="1",
            description="1 while the process's LISTEN connection is up, 0 while it is down",
        )
        meter.create_observable_gauge(
            "dataplane.db.pool.connections",
            callbacks=[_observe_pool_connections],
            unit="{connection}",
            description="Pooled connections by state (used, idle)",
        )
        meter.create_observable_gauge(
            "db.client.connection.pending_requests",
            callbacks=[_observe_pool_pending],
            unit="{request}",
            description="Callers waiting for a free pooled connection",
        )


def metrics_on() -> bool:
    """Whether the instruments record anywhere: without a meter provider the API's
    proxy meter drops every value, so recording is skipped before its attributes are
    even built. A proxy meter records once a provider is set, from then on."""
    meter = instruments()._meter
    real = getattr(meter, "_real_meter", meter)  # a proxy's delegate (private: else "on")
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
) -> None:
    """Every counter series this process can produce, at zero, before any event.

    ``operations`` maps each queue type the process serves (a worker: its own; a BFF:
    every surface's, in its tier) to its operation names; ``cacheable`` lists the
    (queue type, operation) pairs with a TTL cache; ``maintained``, the other queue
    types whose rows a worker's maintenance pass may park as poison (``lease_lapsed``:
    the elected pass covers every type, whichever worker runs it).
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
        for queue_type in maintained:
            m.poison.add(0, {QUEUE_TYPE: queue_type, REASON: "lease_lapsed"})
        for queue_type, name in cacheable:
            m.cache_hits.add(0, {QUEUE_TYPE: queue_type, OPERATION: name})
        for reason in CAPCOM_DROP_REASONS:
            m.capcom_dropped.add(0, {REASON: reason})
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


# -- observed state -------------------------------------------------------------------

_lock = threading.Lock()  # the exporter may collect from another thread


class _Connected(Protocol):
    connected: bool


class _Waiting(Protocol):
    waiting: int


class _Pool(Protocol):
    def statistics(self) -> Any: ...  # .in_use, .idle, .waiting


# id -> (weak reference, name): the tracked objects need not be hashable (dataclasses)
_listeners: dict[int, tuple[weakref.ref[Any], str]] = {}
_pools: dict[int, tuple[weakref.ref[Any], str]] = {}
_pumps: dict[int, tuple[weakref.ref[Any], str]] = {}


def _track(registry: dict[int, tuple[weakref.ref[Any], str]], obj: object, name: str) -> None:
    key = id(obj)

    def forget(_: object) -> None:
        with _lock:
            registry.pop(key, None)

    with _lock:
        registry[key] = (weakref.ref(obj, forget), name)


def _live(registry: dict[int, tuple[weakref.ref[Any], str]]) -> list[tuple[Any, str]]:
    with _lock:
        entries = list(registry.values())
    return [(obj, name) for ref, name in entries if (obj := ref()) is not None]


def track_listener(listener: _Connected, name: str) -> None:
    """Report ``listener.connected`` as ``dataplane.listen.connected{dataplane.listener=name}``
    while it lives (several of one name: 0 if any is down)."""
    _track(_listeners, listener, name)


def track_pool(pool: _Pool, name: str) -> None:
    """Report ``pool.statistics()`` (``in_use``, ``idle``, ``waiting``) while it lives."""
    _track(_pools, pool, name)


def track_waiters(pump: _Waiting) -> None:
    """Report ``pump.waiting`` (summed over live pumps) as ``dataplane.waiters``."""
    _track(_pumps, pump, "pump")


def _observe_waiters(_: CallbackOptions) -> Iterable[Observation]:
    pumps = _live(_pumps)
    return [Observation(sum(p.waiting for p, _ in pumps))] if pumps else []


def _observe_listeners(_: CallbackOptions) -> Iterable[Observation]:
    up: dict[str, int] = {}
    for listener, name in _live(_listeners):
        up[name] = min(up.get(name, 1), 1 if listener.connected else 0)
    return [Observation(v, {"dataplane.listener": k}) for k, v in up.items()]


def _pool_totals() -> dict[str, tuple[int, int, int]]:
    totals: dict[str, tuple[int, int, int]] = {}
    for pool, name in _live(_pools):
        s = pool.statistics()
        used, idle, waiting = totals.get(name, (0, 0, 0))
        totals[name] = (used + s.in_use, idle + s.idle, waiting + s.waiting)
    return totals


def _observe_pool_connections(_: CallbackOptions) -> Iterable[Observation]:
    out = []
    for name, (used, idle, _waiting) in _pool_totals().items():
        pool = {"db.client.connection.pool.name": name}
        out.append(Observation(used, {**pool, "db.client.connection.state": "used"}))
        out.append(Observation(idle, {**pool, "db.client.connection.state": "idle"}))
    return out


def _observe_pool_pending(_: CallbackOptions) -> Iterable[Observation]:
    return [
        Observation(waiting, {"db.client.connection.pool.name": name})
        for name, (_used, _idle, waiting) in _pool_totals().items()
    ]


# -- the queue sample (one elected process publishes it) ----------------------------


class _QueueSample:
    depth: Mapping[tuple[str, str], int] = {}
    oldest: Mapping[str, float] = {}
    expires = 0.0  # time.monotonic() past which the sample is withdrawn


_sample = _QueueSample()


def publish_queue_sample(
    depth: Mapping[tuple[str, str], int], oldest: Mapping[str, float], *, valid_for: float
) -> None:
    """The elected sampler's latest reading: rows by (queue type, state), and the oldest
    claimable row's age by queue type; exported until ``valid_for`` seconds from now."""
    with _lock:
        _sample.depth, _sample.oldest = dict(depth), dict(oldest)
        _sample.expires = time.monotonic() + valid_for


def withdraw_queue_sample() -> None:
    """This process no longer samples (it lost the election, or stopped)."""
    with _lock:
        _sample.depth, _sample.oldest, _sample.expires = {}, {}, 0.0


def current_queue_sample() -> tuple[Mapping[tuple[str, str], int], Mapping[str, float]]:
    """What the depth gauges report now (empty unless this process samples)."""
    with _lock:
        if time.monotonic() > _sample.expires:
            return {}, {}
        return _sample.depth, _sample.oldest


def _observe_depth(_: CallbackOptions) -> Iterable[Observation]:
    depth, _oldest = current_queue_sample()
    return [
        Observation(n, {QUEUE_TYPE: queue_type, "dataplane.state": state})
        for (queue_type, state), n in depth.items()
    ]


def _observe_oldest(_: CallbackOptions) -> Iterable[Observation]:
    _depth, oldest = current_queue_sample()
    return [Observation(age, {QUEUE_TYPE: queue_type}) for queue_type, age in oldest.items()]
