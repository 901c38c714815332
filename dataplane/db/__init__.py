"""Database access under Trio: psycopg 3's async API bridged with trio-asyncio.

The lowest layer of the plane: it imports nothing above itself. It is the only
package that touches psycopg connections, and the one boundary where driver
errors become the project's (:mod:`dataplane.core.errors`).

* :mod:`~dataplane.db.bridge`: the process's asyncio loop inside Trio;
* :mod:`~dataplane.db.connection`: how to reach a database, the error boundary;
* :mod:`~dataplane.db.pool`: :class:`Database`, a bounded pool with timeouts;
* :mod:`~dataplane.db.listener`: :class:`Listener`, a dedicated LISTEN connection;
* :mod:`~dataplane.db.sql`: the named statements of ``sql/queries/*.sql``.
"""

from dataplane.db.admin import close_to_public, ensure_database, open_to_public
from dataplane.db.bridge import current_loop, open_bridge, run_on_loop
from dataplane.db.connection import Connection, DatabaseConfig, translate, with_params
from dataplane.db.listener import (
    MAX_IDENTIFIER_BYTES,
    Event,
    Gap,
    Listener,
    ListenerStatistics,
    Notification,
    check_channel,
)
from dataplane.db.pool import Database, PoolStatistics, open_database
from dataplane.db.sql import q

__all__ = [
    "MAX_IDENTIFIER_BYTES",
    "Connection",
    "Database",
    "DatabaseConfig",
    "Event",
    "Gap",
    "Listener",
    "ListenerStatistics",
    "Notification",
    "PoolStatistics",
    "check_channel",
    "close_to_public",
    "current_loop",
    "ensure_database",
    "open_bridge",
    "open_database",
    "open_to_public",
    "q",
    "run_on_loop",
    "translate",
    "with_params",
]
