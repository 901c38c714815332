"""The process's heap, out of the cyclic collector's way once it is built.

A BFF or worker process imports its stack (Quart, Hypercorn, psycopg, OpenTelemetry,
the surfaces and their schemas) and builds its pools and caches before it serves:
some hundreds of thousands of objects that live as long as the process. CPython's
full (generation 2) collection traverses every one of them each time it runs,
roughly every few seconds under load. Each pass stalled a serving process for
100-140 ms, and every request in flight waited it out: that was the p99 of
``bench/prefer_wait.py`` at 32 clients (measured with ``gc.callbacks``; see
``bench/results/prefer-wait.md``).

:func:`freeze_startup_heap` collects once, then moves what is alive to the permanent
generation (:func:`gc.freeze`), which collections skip. Objects made afterwards,
per-request garbage included, are collected as before, and reference counting still
frees frozen objects. Only a frozen object that later becomes part of an
unreachable cycle stays. :func:`thaw_heap` hands the frozen objects back to the
collector when the process stops serving (tests start and stop many apps in one
process).
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_startup_heap(what: str) -> int:
    """Collect, then freeze everything alive; the number of objects frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("%s: %d startup objects frozen out of the cyclic collector's way", what, frozen)
    return frozen


def thaw_heap() -> None:
    """Give the frozen objects back to the collector."""
    gc.unfreeze()
