"""Surface Data Plane: a queue-backed request/reply service on Trio and Postgres.

A browser POSTs ``{operation, params}`` to the BFF, which enqueues a row in
``maestro_queues``; a per-surface data worker claims it, runs the operation over a
read-only client database and completes the row with a ``pg_notify``; the BFF's
reply pump streams the answer back over Server-Sent Events.

This module is the public API a team writes its own surfaces with (see the README's
"Write your own surface"): declare a :class:`Surface` of :class:`Operation` s with
:func:`surface`, register it under the entry-point group ``dataplane.surfaces``
(a :class:`SurfacePackage` when it also ships a demo client DB), load your SQL with
:class:`NamedQueries`, and drop cached results from your own write paths with
``await QueueClient.invalidate(...)`` or ``POST /api/<surface>/invalidate``.
Everything else in the package is the plane's own.
"""

from dataplane.core.errors import ConfigError, HttpError
from dataplane.db.sql import NamedQueries
from dataplane.queue.envelope import Auth
from dataplane.surfaces.manifest import (
    STAFF_ONLY,
    BlobResult,
    Gate,
    Operation,
    OperationContext,
    Surface,
    branch_in_scope,
    client_match,
    surface,
)
from dataplane.surfaces.registry import SurfacePackage

__version__ = "0.1.0"

__all__ = [
    "STAFF_ONLY",
    "Auth",
    "BlobResult",
    "ConfigError",
    "Gate",
    "HttpError",
    "NamedQueries",
    "Operation",
    "OperationContext",
    "Surface",
    "SurfacePackage",
    "__version__",
    "branch_in_scope",
    "client_match",
    "surface",
]
