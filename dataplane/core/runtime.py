"""The process's heap, out of the cyclic collector's way once it is built.

A BFF or worker process imports its stack (Quart, Hypercorn, psycopg, OpenTelemetry,
the surfaces and their schemas) and builds its pools and caches before it serves:
some hundreds of thousands of objects that live as long as the process. CPython's
full (generation 2) collection traverses every one of them each time it runs,
roughly every few seconds under load, and every request in flight waits it out
(``docs/perf/prefer-wait.md``, ``docs/perf/gc-young.md``).

:func:`freeze_startup_heap` collects once, then moves what is alive to the permanent
generation (:func:`gc.freeze`), which collections skip. Objects made afterwards,
per-request garbage included, are collected as before, and reference counting still
frees frozen objects. Only a frozen object that later becomes part of an
unreachable cycle stays. :func:`thaw_heap` hands the frozen objects back to the
collector when the process stops serving (tests start and stop many apps in one
process).

A BFF also holds what it builds while serving: every open SSE stream keeps its task,
its HTTP connection and its request alive, some 400 tracked objects each. With
CPython's default young threshold (a collection every 700 net allocations), objects
of streams in flight survive young collections and reach the old generation, whose
full collection then walks every open stream again. ``young_threshold``
(:data:`BFF_YOUNG_THRESHOLD` for the BFF) spaces young collections out: a request's
objects are mostly freed by reference counting before one runs, so far fewer reach
the old generation; a young collection then walks up to that many objects
(``docs/perf/gc-young.md``). :func:`thaw_heap` restores the thresholds.

A worker draining a backlog holds up to its concurrency (64) jobs in flight, each a
task with its scopes, coroutines and rows: at 700 they too survived young collections
and were walked again in the older generations; :data:`WORKER_YOUNG_THRESHOLD` spaces
them out as well (``docs/perf/worker-drain.md``).
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

BFF_YOUNG_THRESHOLD = 20_000  # net allocations between young collections (CPython: 700)
WORKER_YOUNG_THRESHOLD = 20_000  # the same for a worker (a drain's jobs in flight)

_thresholds_before: tuple[int, int, int] | None = None  # what freeze_startup_heap replaced


def freeze_startup_heap(what: str, *, young_threshold: int | None = None) -> int:
    """Collect, then freeze everything alive; the number of objects frozen.
    ``young_threshold``: allocations between young collections from now on."""
    global _thresholds_before
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    if young_threshold is not None:
        before = gc.get_threshold()
        if _thresholds_before is None:
            _thresholds_before = before
        gc.set_threshold(young_threshold, *before[1:])
    log.info(
        "%s: %d startup objects frozen out of the cyclic collector's way;"
        " young collections every %d allocations",
        what,
        frozen,
        gc.get_threshold()[0],
    )
    return frozen


def thaw_heap() -> None:
    """Give the frozen objects back to the collector and restore its thresholds."""
    global _thresholds_before
    gc.unfreeze()
    if _thresholds_before is not None:
        gc.set_threshold(*_thresholds_before)
        _thresholds_before = None
