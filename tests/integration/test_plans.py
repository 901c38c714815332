"""Plans made on an empty queue, kept while a backlog arrives.

A session's prepared statements (psycopg prepares a statement at its sixth run) get
a generic plan from Postgres' plan cache after five custom ones, and keep it until
the table's statistics change. A plane's sessions start at idle, so that plan is
usually made on an almost empty table, where reading the whole table (or the whole
of an index) looks cheapest: kept through a burst, every enqueue, completion and
reply read would read the whole table until autovacuum's next ANALYZE. The BFF's
:class:`~dataplane.maintenance.growth.GrowthWatch` analyzes a table that outgrew its
statistics, and every session's plans of it are made again.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import psycopg
import pytest
import trio

from dataplane.db import Database, DatabaseConfig, open_database, with_params
from dataplane.maintenance.growth import RETRY_SECONDS, GrowthWatch
from dataplane.queue import Blob, Completion, QueueClient
from tests.conftest import admin_execute

T = "surface-plans"
IDLE_ROUNDS = 12  # past psycopg's prepare threshold and the plan cache's five custom plans
BACKLOG = 20_000
TABLES = ("maestro_queues", "surface_result_blobs")


@pytest.fixture(autouse=True)
def _no_autovacuum(queue_dsn: str) -> None:
    """Autovacuum refreshes the statistics on its own schedule: these tests must see
    only their own ANALYZEs and the watch's."""
    with psycopg.connect(queue_dsn, autocommit=True) as conn:
        for table in TABLES:
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")


async def _per_request(queue: QueueClient, tag: str) -> None:
    """Every queue statement a request costs the BFF and a worker, once each."""
    first = await queue.enqueue(T, f"{tag}-a", {"v": 1})
    await queue.enqueue(T, f"{tag}-a", {"v": 1})  # attaches to the live row
    await queue.attach(f"{tag}-a")
    await queue.insert_many([queue.enqueue_params(T, f"{tag}-m{i}", {"i": i}) for i in range(3)])
    await queue.get_owned(first.job_id, queue_type=T, client="", scope_key="")
    await queue.cancel(first.job_id, "requester", T)
    jobs = await queue.claim(T, "w-plans", limit=4)
    assert len(jobs) == 4
    await queue.renew(jobs)
    await queue.complete_many([Completion(jobs[0], {"ok": 1}, Blob("text/plain", b"blob"))])
    await queue.fail(jobs[1], "boom", backoff_seconds=60)
    await queue.release(jobs[2:])
    await queue.get(jobs[0].id)
    await queue.get_finished_many([j.id for j in jobs])
    head = await queue.get_blob_head(jobs[0].id)
    assert head is not None
    await queue.get_blob_chunk(head.id, 0, 2)


async def _reads(queue: QueueClient) -> dict[str, tuple[int, int]]:
    """Per table: sequential scans and rows read so far (this session's counts flushed)."""
    await queue.db.fetchone("SELECT pg_stat_force_next_flush()")
    rows = await queue.db.fetchall(
        "SELECT relname, seq_scan, coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) AS n"
        " FROM pg_stat_user_tables WHERE relname = ANY(%(t)s)",
        {"t": list(TABLES)},
    )
    return {row["relname"]: (int(row["seq_scan"]), int(row["n"])) for row in rows}


async def _plan_idle_then_grow(one: Database, queue: QueueClient) -> None:
    await one.execute("ANALYZE maestro_queues, surface_result_blobs")
    for i in range(IDLE_ROUNDS):
        await _per_request(queue, f"idle-{i}")
    await one.execute(
        "INSERT INTO maestro_queues (type, dedupe_key, payload)"
        " SELECT %(t)s, 'backlog-' || g, '{}'::jsonb FROM generate_series(1, %(n)s) AS g",
        {"t": T, "n": BACKLOG},
    )
    await one.execute(
        "INSERT INTO surface_result_blobs (job_id, content_type, data, size, expires_at)"
        " SELECT gen_random_uuid(), 'text/plain', '\\x00', 1, now() + interval '1 hour'"
        " FROM generate_series(1, %(n)s)",
        {"n": BACKLOG},
    )


@pytest.mark.parametrize("watched", [True, False])
async def test_plans_made_at_idle_are_made_again_once_the_queue_grows(
    queue_dsn: str, db: Database, watched: bool
) -> None:
    """Without the watch (``watched=False``) the plans made at idle read the grown
    tables whole: that case shows the trap is real here, and must stay so."""
    async with open_database(DatabaseConfig(queue_dsn, pool_size=1)) as one:
        queue = QueueClient(one)  # one pooled connection: one session, its plans kept
        await _plan_idle_then_grow(one, queue)
        if watched:
            assert sorted(await GrowthWatch(db).check()) == sorted(TABLES)
        before = await _reads(queue)
        for i in range(3):
            await _per_request(queue, f"backlog-{i}")
        after = await _reads(queue)
    scans = {t: after[t][0] - before[t][0] for t in TABLES}
    rows_read = sum(after[t][1] - before[t][1] for t in TABLES)
    if watched:
        assert scans == {t: 0 for t in TABLES}
        assert rows_read < 1_000  # index probes: a few rows per statement
    else:
        assert rows_read > BACKLOG  # some statement read a whole table


async def test_the_watch_leaves_a_small_or_analyzed_queue_alone(db: Database) -> None:
    queue = QueueClient(db)
    for i in range(50):
        await queue.enqueue(T, f"small-{i}", {"i": i})
    watch = GrowthWatch(db)
    assert await watch.check() == []  # far below the floor
    await db.execute(
        "INSERT INTO maestro_queues (type, dedupe_key, payload)"
        " SELECT %(t)s, 'big-' || g, '{}'::jsonb FROM generate_series(1, %(n)s) AS g",
        {"t": T, "n": BACKLOG},
    )
    assert await watch.check() == ["maestro_queues"]
    assert await watch.check() == []  # its statistics are fresh now
    row = await db.fetchone(
        "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'maestro_queues'"
    )
    assert row is not None and row["analyze_count"] >= 1


async def test_a_role_that_may_not_analyze_is_told_once_and_left_alone(
    queue_dsn: str, pg_admin_dsn: str, bridge: Any, caplog: pytest.LogCaptureFixture
) -> None:
    role = f"plans_{uuid.uuid4().hex[:8]}"
    dbname = psycopg.conninfo.conninfo_to_dict(queue_dsn)["dbname"]
    admin_execute(
        pg_admin_dsn,
        f"CREATE ROLE {role} LOGIN PASSWORD '{role}'",
        f'GRANT CONNECT ON DATABASE "{dbname}" TO {role}',
    )
    try:
        async with open_database(DatabaseConfig(queue_dsn, pool_size=1)) as owner:
            await owner.execute(
                "INSERT INTO maestro_queues (type, dedupe_key, payload)"
                " SELECT %(t)s, 'big-' || g, '{}'::jsonb FROM generate_series(1, %(n)s) AS g",
                {"t": T, "n": BACKLOG},
            )
        other = DatabaseConfig(with_params(queue_dsn, user=role, password=role), pool_size=1)
        async with open_database(other) as guest:
            watch = GrowthWatch(guest, every=0.0)
            with caplog.at_level(logging.WARNING, logger="dataplane.maintenance.growth"):
                assert await watch.check() == []
                assert await watch.check() == []  # not tried again
        refusals = [r for r in caplog.records if "may not ANALYZE" in r.getMessage()]
        assert len(refusals) == 1
    finally:
        admin_execute(pg_admin_dsn, f'REVOKE ALL ON DATABASE "{dbname}" FROM {role}')
        admin_execute(pg_admin_dsn, f"DROP ROLE {role}")


async def test_a_table_lock_held_elsewhere_defers_the_analyze_briefly(
    queue_dsn: str, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """A VACUUM (autovacuum's too) holds the lock an ANALYZE needs: the watch waits for
    it at most its lock timeout, never the call timeout, and tries again soon after."""
    await db.execute(
        "INSERT INTO maestro_queues (type, dedupe_key, payload)"
        " SELECT %(t)s, 'big-' || g, '{}'::jsonb FROM generate_series(1, %(n)s) AS g",
        {"t": T, "n": BACKLOG},
    )
    watch = GrowthWatch(db)
    with psycopg.connect(queue_dsn, autocommit=True) as other:
        with other.transaction():
            other.execute("LOCK TABLE maestro_queues IN SHARE UPDATE EXCLUSIVE MODE")
            started = trio.current_time()
            with caplog.at_level(logging.WARNING, logger="dataplane.maintenance.growth"):
                assert await watch.check() == []
            assert trio.current_time() - started < 5  # the lock timeout, not the call's
    assert any("lock timeout" in r.getMessage() for r in caplog.records)
    assert await watch.check() == []  # not before its retry delay
    await trio.sleep(RETRY_SECONDS)
    assert await watch.check() == ["maestro_queues"]
