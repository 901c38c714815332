"""The worker's TTL cache and single-flight.

:class:`TtlCache` holds results of cacheable operations (``ttl_seconds > 0``)
under their dedupe key — which includes client and scope, so two scopes never
share an entry, and for a ``per_user`` operation the caller, so two users never
do. Entries carry tags for O(1) invalidation (``c:<client>``, and ``u:<user>`` with
its client-scoped twin ``c:<client>|u:<user>``: see ``Operation.cache_tags``); at
most ``cap`` entries, oldest first out; expired entries are dropped when met.
Invalidations arrive from every process over ``pg_notify('dataplane_invalidate',
tag)``, one tag per notify (the wire format: :mod:`dataplane.queue.types`).

:class:`SingleFlight` lets one execution per key run at a time inside the
process: a second caller for the same key waits for the first and shares its
outcome (reported ``coalesced``). If the first is cancelled (its lease was
lost), a waiter runs the work itself.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import outcome
import trio

from dataplane.core.errors import InvalidArgument
from dataplane.queue.types import INVALIDATE_CHANNEL

CACHE_CAP = 500  # entries
__all__ = ["INVALIDATE_CHANNEL", "CacheStatistics", "SingleFlight", "TtlCache"]

T = TypeVar("T")


@dataclass(slots=True)
class _Entry:
    value: Any
    expires_at: float
    tags: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CacheStatistics:
    size: int
    hits: int
    misses: int
    evictions: int
    invalidations: int


class TtlCache:
    def __init__(self, cap: int = CACHE_CAP, clock: Callable[[], float] = time.monotonic) -> None:
        if cap < 1:
            raise InvalidArgument("cache cap must be >= 1")
        self.cap = cap
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._by_tag: dict[str, set[str]] = {}
        self._hits = self._misses = self._evictions = self._invalidations = 0

    def get(self, key: str) -> tuple[bool, Any]:
        """(True, value) on a live hit; (False, None) otherwise."""
        entry = self._entries.get(key)
        if entry is None:
            self._misses += 1
            return False, None
        if entry.expires_at <= self._clock():
            self._remove(key)
            self._misses += 1
            return False, None
        self._hits += 1
        return True, entry.value

    def put(self, key: str, value: Any, ttl_seconds: float, tags: Iterable[str] = ()) -> None:
        if ttl_seconds <= 0:
            raise InvalidArgument("only operations with ttl_seconds > 0 are cached")
        if key in self._entries:
            self._remove(key)
        entry = _Entry(value, self._clock() + ttl_seconds, tuple(dict.fromkeys(tags)))
        self._entries[key] = entry
        for tag in entry.tags:
            self._by_tag.setdefault(tag, set()).add(key)
        while len(self._entries) > self.cap:
            oldest = next(iter(self._entries))
            self._remove(oldest)
            self._evictions += 1

    def invalidate_tag(self, tag: str) -> int:
        """Drop every entry carrying ``tag``; return how many."""
        keys = self._by_tag.pop(tag, set())
        for key in keys:
            self._remove(key)
        self._invalidations += len(keys)
        return len(keys)

    def clear(self) -> None:
        """Drop every entry (counted as invalidations)."""
        self._invalidations += len(self._entries)
        self._entries.clear()
        self._by_tag.clear()

    def keys(self) -> list[str]:
        """Keys, oldest first."""
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def statistics(self) -> CacheStatistics:
        return CacheStatistics(
            len(self._entries), self._hits, self._misses, self._evictions, self._invalidations
        )

    def _remove(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        for tag in entry.tags:
            keys = self._by_tag.get(tag)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_tag[tag]


@dataclass(slots=True)
class _Flight(Generic[T]):
    done: trio.Event = field(default_factory=trio.Event)
    result: outcome.Outcome[T] | None = None
    followers: int = 0
    meta: Any = None  # what the leader wants followers to know (its trace context)


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        self._flights: dict[str, _Flight[T]] = {}
        self.shared = 0

    async def run(self, key: str, fn: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """Run ``fn`` unless a flight for ``key`` is in the air; (value, shared)."""
        value, shared, _meta = await self.run_with_meta(key, fn)
        return value, shared

    async def run_with_meta(
        self, key: str, fn: Callable[[], Awaitable[T]], meta: Any = None
    ) -> tuple[T, bool, Any]:
        """As :meth:`run`; also returns the leader's ``meta`` (ours when we lead)."""
        while True:
            flight = self._flights.get(key)
            if flight is None:
                break
            flight.followers += 1
            await flight.done.wait()
            result = flight.result
            if result is not None:
                self.shared += 1
                if isinstance(result, outcome.Value):
                    return result.value, True, flight.meta
                assert isinstance(result, outcome.Error)
                raise result.error
            # The leader was cancelled before finishing: try to lead ourselves.
        flight = _Flight(meta=meta)
        self._flights[key] = flight
        try:
            result = await outcome.acapture(fn)
            if not isinstance(result, outcome.Error) or not isinstance(
                result.error, trio.Cancelled
            ):
                flight.result = result
            return result.unwrap(), False, meta
        finally:
            del self._flights[key]
            flight.done.set()

    def in_flight(self) -> int:
        """Executions in the air (one per key)."""
        return len(self._flights)

    def callers(self) -> int:
        """Callers in the air: each execution's leader and the followers waiting on it."""
        return sum(1 + flight.followers for flight in self._flights.values())
