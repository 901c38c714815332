"""The growth watch: a queue table that outgrew its statistics is analyzed by the
worker that leads the fleet's maintenance within seconds
(``dataplane/maintenance/growth.py``), not a minute later by autovacuum."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import psycopg

from tests.conftest import wait_until
from tests.helpers import WorkerProcess


def _manual_analyses(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'maestro_queues'"
        ).fetchone()
    return int(row[0]) if row else 0


async def test_the_leading_worker_analyzes_a_queue_that_grew(
    spawn_worker: Callable[..., Awaitable[WorkerProcess]], queue_dsn: str
) -> None:
    await spawn_worker()
    before = _manual_analyses(queue_dsn)
    with psycopg.connect(queue_dsn, autocommit=True) as conn:
        # only the worker may refresh the statistics here, not autovacuum's schedule
        conn.execute("ALTER TABLE maestro_queues SET (autovacuum_enabled = false)")
        conn.execute(
            "INSERT INTO maestro_queues (type, dedupe_key, payload)"
            " SELECT 'surface-unserved', 'burst-' || g, '{}'::jsonb"  # no worker claims them
            " FROM generate_series(1, 20000) AS g"
        )
    await wait_until(lambda: _manual_analyses(queue_dsn) > before, within=15, interval=0.2)
