"""LeanConnection (psycopg without a loop timer per wait): statements, errors and a
cancelled statement behave as with psycopg's own wait."""

from __future__ import annotations

import time

import pytest

from dataplane.db import Database
from dataplane.db.waiting import LeanConnection
from dataplane.errors import DatabaseError, DatabaseUnavailable
from tests.conftest import wait_until


async def test_the_pool_runs_its_statements_on_lean_connections(db: Database) -> None:
    assert await db.fetchone("SELECT 1 AS one") == {"one": 1}
    assert db._idle and all(isinstance(conn, LeanConnection) for conn in db._idle)
    big = await db.fetchone("SELECT repeat('x', 3000000) AS big")  # many reads for one answer
    assert big is not None and len(big["big"]) == 3_000_000
    with pytest.raises(DatabaseError, match="22012"):  # division_by_zero, and the conn is fine
        await db.fetchone("SELECT 1 / 0")
    assert await db.fetchone("SELECT 2 AS two") == {"two": 2}


async def test_a_timed_out_statement_is_cancelled_on_the_server(db: Database) -> None:
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable, match="timed out"):
        await db.fetchone("SELECT pg_sleep(30) AS lean_cancel_in_test", call_timeout=0.3)
    assert time.monotonic() - started < 6

    async def gone() -> bool:
        rows = await db.fetchall(
            "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE %(p)s"
            " AND pid <> pg_backend_pid()",
            {"p": "%lean_cancel_in_test%"},
        )
        return not rows

    await wait_until(gone, within=5)  # psycopg's cancel request reached the server
