"""``maestro_queue_depth(type)`` (migration 0011), the number KEDA scales workers on:
ready rows plus rows in flight, per queue type, against a real Postgres."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.db import Database
from dataplane.queue import QueueClient
from tests.conftest import admin_execute
from tests.helpers import complete

T = "surface-probe"
DEV = "surface-probe-dev"

# (status, available_at relative to now, lease relative to now, counted?)
STATES = [
    ("pending", "-1 second", None, True),  # ready
    ("pending", "+30 seconds", None, False),  # in its failure backoff
    ("in_progress", "+60 seconds", "+60 seconds", True),  # in flight, lease live
    ("in_progress", "-1 second", "-1 second", True),  # lease lapsed: ready again
    ("done", "-1 second", None, False),
    ("poison", "-1 second", None, False),
    ("cancelled", "-1 second", None, False),
]


async def _insert(db: Database, queue_type: str, status: str, at: str, lease: str | None) -> None:
    await db.execute(
        "INSERT INTO maestro_queues (type, status, dedupe_key, payload, available_at,"
        " lease_expires_at, locked_by)"
        " VALUES (%(t)s, %(s)s, %(k)s, '{}', now() + %(at)s::interval,"
        " now() + %(lease)s::interval, CASE WHEN %(lease)s::text IS NULL THEN NULL ELSE 'w' END)",
        {"t": queue_type, "s": status, "k": uuid.uuid4().hex, "at": at, "lease": lease},
    )


async def _depth(db: Database, queue_type: str) -> int:
    row = await db.fetchone("SELECT maestro_queue_depth(%(t)s) AS n", {"t": queue_type})
    assert row is not None
    return int(row["n"])


async def test_depth_counts_ready_and_in_flight_rows_of_its_type_only(db: Database) -> None:
    assert await _depth(db, T) == 0
    for status, at, lease, _ in STATES:
        await _insert(db, T, status, at, lease)
    await _insert(db, DEV, "pending", "-1 second", None)  # the dev tier is another type
    await _insert(db, "surface-other", "in_progress", "+60 seconds", "+60 seconds")
    assert await _depth(db, T) == sum(counted for *_, counted in STATES) == 3
    assert await _depth(db, DEV) == 1
    assert await _depth(db, "surface-nothing") == 0


async def test_a_claim_moves_rows_from_ready_to_in_flight_and_completion_ends_them(
    db: Database, queue: QueueClient
) -> None:
    for _ in range(5):
        await _insert(db, T, "pending", "-1 second", None)
    claimed = (await queue.claim_batch(T, "worker-a", limit=3)).jobs
    assert len(claimed) == 3
    assert await _depth(db, T) == 5  # 2 ready + 3 in flight: a worker is still needed
    for job in claimed:
        await complete(queue, job, {"ok": True})
    assert await _depth(db, T) == 2


def _role_dsn(admin_dsn: str, dbname: str, role: str) -> str:
    params: dict[str, Any] = conninfo_to_dict(admin_dsn)
    params.update(dbname=dbname, user=role, password="scaler-pass")
    return make_conninfo(**params)


async def test_a_role_granted_only_execute_can_count_and_public_cannot(
    db: Database, pg_admin_dsn: str, queue_dsn: str
) -> None:
    await _insert(db, T, "pending", "-1 second", None)
    dbname = conninfo_to_dict(queue_dsn)["dbname"]
    scaler, stranger = f"scaler_{uuid.uuid4().hex[:8]}", f"stranger_{uuid.uuid4().hex[:8]}"
    admin_execute(
        pg_admin_dsn,
        f"CREATE ROLE {scaler} LOGIN PASSWORD 'scaler-pass'",
        f"CREATE ROLE {stranger} LOGIN PASSWORD 'scaler-pass'",
    )
    try:
        admin_execute(queue_dsn, f"GRANT EXECUTE ON FUNCTION maestro_queue_depth(text) TO {scaler}")
        with psycopg.connect(_role_dsn(pg_admin_dsn, dbname, scaler)) as conn:
            row = conn.execute("SELECT maestro_queue_depth(%s)", (T,)).fetchone()
            assert row == (1,)
            try:
                conn.execute("SELECT count(*) FROM maestro_queues")
                raise AssertionError("the scaler's role must not read the table")
            except psycopg.errors.InsufficientPrivilege:
                conn.rollback()
        with psycopg.connect(_role_dsn(pg_admin_dsn, dbname, stranger)) as conn:
            try:
                conn.execute("SELECT maestro_queue_depth(%s)", (T,))
                raise AssertionError("PUBLIC must not count a queue")
            except psycopg.errors.InsufficientPrivilege:
                pass
    finally:
        admin_execute(
            queue_dsn, f"REVOKE EXECUTE ON FUNCTION maestro_queue_depth(text) FROM {scaler}"
        )
        admin_execute(pg_admin_dsn, f"DROP ROLE {scaler}", f"DROP ROLE {stranger}")


async def test_a_callers_temp_table_does_not_shadow_the_queue(db: Database, queue_dsn: str) -> None:
    """SECURITY DEFINER with the migrator's search_path put pg_temp first: a caller's
    TEMP table named maestro_queues answered instead (100000). 0013 pins it, pg_temp
    last; and every SECURITY DEFINER function of the schema is pinned so."""
    await _insert(db, T, "pending", "-1 second", None)
    with psycopg.connect(queue_dsn) as conn:
        conn.execute(
            "CREATE TEMP TABLE maestro_queues AS"
            " SELECT %s::text AS type, 'pending'::text AS status, now() AS available_at"
            " FROM generate_series(1, 100000)",
            (T,),
        )
        assert conn.execute("SELECT maestro_queue_depth(%s)", (T,)).fetchone() == (1,)
        definers = conn.execute(
            "SELECT p.proname, p.proconfig FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE p.prosecdef AND n.nspname = current_schema()"
        ).fetchall()
    assert definers, "maestro_queue_depth is SECURITY DEFINER"
    for name, config in definers:
        paths = [c for c in config or [] if c.startswith("search_path=")]
        assert paths and paths[0].endswith("pg_temp"), (name, config)
