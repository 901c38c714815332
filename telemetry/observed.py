"""The state the data plane's gauges observe: read when the exporter collects, never
counted per event (free on the request path).

* **Tracked objects**: LISTEN listeners (:func:`track_listener`), connection pools
  (:func:`track_pool`) and reply pumps (:func:`track_waiters`) are registered by weak
  reference: each is reported while it lives and forgotten when it is collected.
  Several of one name add up (pools, waiters) or report 0 if any is down (listeners).
* **The queue sample**: one elected process publishes the queue's depth by state and
  the age of its oldest claimable row (:func:`publish_queue_sample`); the sample is
  reported until it expires or is withdrawn (:func:`withdraw_queue_sample`), so a
  process that lost the election stops reporting stale figures.
* The exporter may collect from another thread: every registry and the sample are
  read and written under one lock. A tracked object's weak-reference callback takes
  no lock (the collector may run it on a thread that holds it): it only queues the
  key, and the next reader or writer under the lock drops it.

The observable instruments that read it are declared here too, beside what they read
(:func:`create_observed_gauges`, called with every other instrument by
:mod:`telemetry.metrics`).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from opentelemetry.metrics import CallbackOptions, Meter, Observation

QUEUE_TYPE = "messaging.destination.name"  # as metrics.QUEUE_TYPE (the span attribute's key)

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
# (registry, key, reference) of collected objects; deque.append needs no lock
_collected: deque[tuple[dict[int, tuple[weakref.ref[Any], str]], int, weakref.ref[Any]]] = deque()


def _purge() -> None:
    """Drop the collected objects' entries (under ``_lock``). An id may have been
    reused by a newer object by now: only the entry holding the dead reference goes."""
    while _collected:
        registry, key, ref = _collected.popleft()
        entry = registry.get(key)
        if entry is not None and entry[0] is ref:
            del registry[key]


def _track(registry: dict[int, tuple[weakref.ref[Any], str]], obj: object, name: str) -> None:
    key = id(obj)

    def forget(ref: weakref.ref[Any]) -> None:
        _collected.append((registry, key, ref))

    with _lock:
        _purge()
        registry[key] = (weakref.ref(obj, forget), name)


def _live(registry: dict[int, tuple[weakref.ref[Any], str]]) -> list[tuple[Any, str]]:
    with _lock:
        _purge()
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


def observe_waiters(_: CallbackOptions) -> Iterable[Observation]:
    pumps = _live(_pumps)
    return [Observation(sum(p.waiting for p, _ in pumps))] if pumps else []


def observe_listeners(_: CallbackOptions) -> Iterable[Observation]:
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


def observe_pool_connections(_: CallbackOptions) -> Iterable[Observation]:
    out = []
    for name, (used, idle, _waiting) in _pool_totals().items():
        pool = {"db.client.connection.pool.name": name}
        out.append(Observation(used, {**pool, "db.client.connection.state": "used"}))
        out.append(Observation(idle, {**pool, "db.client.connection.state": "idle"}))
    return out


def observe_pool_pending(_: CallbackOptions) -> Iterable[Observation]:
    return [
        Observation(waiting, {"db.client.connection.pool.name": name})
        for name, (_used, _idle, waiting) in _pool_totals().items()
    ]


# -- the queue sample (one elected process publishes it) ----------------------------


class _QueueSample:
    depth: Mapping[tuple[str, str], int] = {}
    oldest: Mapping[str, float] = {}
    paused: frozenset[str] = frozenset()  # queue types whose claims take nothing
    expires = 0.0  # time.monotonic() past which the sample is withdrawn


_sample = _QueueSample()


def publish_queue_sample(
    depth: Mapping[tuple[str, str], int],
    oldest: Mapping[str, float],
    *,
    valid_for: float,
    paused: Iterable[str] = (),
) -> None:
    """The sampler's latest reading (where the maintenance leader leads): rows by (queue
    type, state), the oldest claimable row's age by queue type, and the paused types;
    exported until ``valid_for`` seconds from now."""
    with _lock:
        _sample.depth, _sample.oldest = dict(depth), dict(oldest)
        _sample.paused = frozenset(paused)
        _sample.expires = time.monotonic() + valid_for


def withdraw_queue_sample() -> None:
    """This process no longer samples (it lost the election, or stopped)."""
    with _lock:
        _sample.depth, _sample.oldest, _sample.expires = {}, {}, 0.0
        _sample.paused = frozenset()


def current_queue_sample() -> tuple[Mapping[tuple[str, str], int], Mapping[str, float]]:
    """What the depth gauges report now (empty unless this process samples)."""
    with _lock:
        if time.monotonic() > _sample.expires:
            return {}, {}
        return _sample.depth, _sample.oldest


def observe_depth(_: CallbackOptions) -> Iterable[Observation]:
    depth, _oldest = current_queue_sample()
    return [
        Observation(n, {QUEUE_TYPE: queue_type, "dataplane.state": state})
        for (queue_type, state), n in depth.items()
    ]


def observe_oldest(_: CallbackOptions) -> Iterable[Observation]:
    _depth, oldest = current_queue_sample()
    return [Observation(age, {QUEUE_TYPE: queue_type}) for queue_type, age in oldest.items()]


def observe_paused(_: CallbackOptions) -> Iterable[Observation]:
    """1 for a paused queue type, 0 for every other sampled one."""
    with _lock:
        if time.monotonic() > _sample.expires:
            return []
        types, paused = set(_sample.oldest) | _sample.paused, _sample.paused
    return [Observation(int(t in paused), {QUEUE_TYPE: t}) for t in sorted(types)]


# -- the instruments that read it ----------------------------------------------------


def create_observed_gauges(meter: Meter) -> None:
    """The instruments of observed state, read when collected: free per event."""
    meter.create_observable_up_down_counter(
        "dataplane.waiters",
        callbacks=[observe_waiters],
        unit="{stream}",
        description="Streams waiting for an answer (BFF)",
    )
    meter.create_observable_gauge(
        "dataplane.queue.depth",
        callbacks=[observe_depth],
        unit="{job}",
        description="Rows by queue type and state (ready, backing_off, running, "
        "lease_lapsed, poison), sampled by one elected worker",
    )
    meter.create_observable_gauge(
        "dataplane.queue.oldest_ready_age",
        callbacks=[observe_oldest],
        unit="s",
        description="Age of the oldest claimable row since it became claimable, by queue "
        "type (0: none), sampled by one elected worker",
    )
    meter.create_observable_gauge(
        "dataplane.queue.paused",
        callbacks=[observe_paused],
        unit="1",
        description="1 while a queue type is paused (its claims take nothing), 0 otherwise",
    )
    meter.create_observable_gauge(
        "dataplane.listen.connected",
        callbacks=[observe_listeners],
        unit="1",
        description="1 while the process's LISTEN connection is up, 0 while it is down",
    )
    meter.create_observable_gauge(
        "dataplane.db.pool.connections",
        callbacks=[observe_pool_connections],
        unit="{connection}",
        description="Pooled connections by state (used, idle)",
    )
    meter.create_observable_gauge(
        "db.client.connection.pending_requests",
        callbacks=[observe_pool_pending],
        unit="{request}",
        description="Callers waiting for a free pooled connection",
    )
