"""The test kit of a surface package: a pytest plugin and what its tests call.

Installed with ``dataplane`` (``pip install 'dataplane[testing]'`` brings pytest and
pytest-trio), its plugin (:mod:`dataplane.testing.plugin`, entry point ``pytest11``)
gives every test run the fixtures ``run_operation`` and ``plane`` and the ones they are
built from, on a real PostgreSQL server: docs/testing.md.

* ``await run_operation(surface, operation, params, auth=token(...))``: the operation
  through the real worker (validation 400, gates 403, cache, single flight, timeout,
  result schema), answered as a browser would be (:class:`Answer`);
* ``await plane.query(surface, operation, params, auth=...)``: the same through a real
  BFF and its event stream, every event kept (``answer.events``);
* ``await plane.enqueued(...)`` / ``await plane.executions(...)``: the queue's rows
  and the finished attempts (``worker_runs``): coalescing made visible;
* :func:`token`: a bearer JWT the kit's BFF trusts.
"""

from collections.abc import Awaitable, Callable

from dataplane.testing.answers import JWT_SECRET, Answer, AnswerError, Event, token
from dataplane.testing.kit import Enqueued, Execution, Kit
from dataplane.testing.plane import Plane

#: The ``run_operation`` fixture's type.
RunOperation = Callable[..., Awaitable[Answer]]

# `-p dataplane.testing` (or `pytest_plugins = ["dataplane.testing"]`) where the entry
# point is not installed registers this module; it brings the fixtures with it.
pytest_plugins = ["dataplane.testing.plugin"]

__all__ = [
    "JWT_SECRET",
    "Answer",
    "AnswerError",
    "Enqueued",
    "Event",
    "Execution",
    "Kit",
    "Plane",
    "RunOperation",
    "token",
]
