"""Migrations: ordered, recorded, idempotent, safe from two processes at once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import trio

from dataplane.core.errors import ConfigError
from dataplane.db import DatabaseConfig, open_database
from dataplane.queue.migrations import available, migrate

EXPECTED_TABLES = {"maestro_queues", "surface_result_blobs", "worker_runs", "dataplane_migrations"}


async def _schema(dsn: str, loop: Any) -> dict[str, object]:
    async with open_database(DatabaseConfig(dsn, pool_size=1), loop=loop) as db:
        tables = await db.fetchall(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        )
        indexes = await db.fetchall(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"
        )
        versions = await db.fetchall("SELECT version FROM dataplane_migrations ORDER BY 1")
        options = await db.fetchone(
            "SELECT reloptions FROM pg_class WHERE relname = 'maestro_queues'"
        )
    return {
        "tables": {t["tablename"] for t in tables},
        "indexes": [i["indexname"] for i in indexes],
        "versions": [v["version"] for v in versions],
        "options": options["reloptions"] if options else None,
    }


async def test_migrate_twice_applies_once(
    fresh_db: Callable[[str | None], str], bridge: Any
) -> None:
    dsn = fresh_db(None)
    async with open_database(DatabaseConfig(dsn, pool_size=1), loop=bridge) as db:
        first = await migrate(db)
        second = await migrate(db)
    assert first == [m.version for m in available()]
    assert second == []
    schema = await _schema(dsn, bridge)
    assert EXPECTED_TABLES <= schema["tables"]  # type: ignore[operator]
    assert schema["versions"] == first
    assert "fillfactor=70" in schema["options"]  # type: ignore[operator]
    assert any(o.startswith("autovacuum_vacuum_scale_factor") for o in schema["options"])  # type: ignore[union-attr]
    assert {"maestro_queues_dedupe_live", "maestro_queues_claim"} <= set(schema["indexes"])  # type: ignore[arg-type]


async def test_two_processes_migrating_at_once_leave_one_schema(
    fresh_db: Callable[[str | None], str], bridge: Any
) -> None:
    dsn = fresh_db(None)
    env = {**os.environ, "MAESTRO_QUEUES_URL": dsn}
    procs: list[subprocess.CompletedProcess[bytes]] = []

    async def run_one() -> None:
        procs.append(
            await trio.run_process(
                [sys.executable, "-m", "dataplane", "migrate"],
                env=env,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        )

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_one)
            nursery.start_soon(run_one)
    assert [p.returncode for p in procs] == [0, 0], [p.stderr for p in procs]
    applied = sorted(p.stdout.decode() for p in procs)
    # One process applied everything, the other found nothing pending.
    assert applied[0].startswith("applied 0 migration(s)")
    assert applied[1].startswith(f"applied {len(available())} migration(s)")
    schema = await _schema(dsn, bridge)
    assert schema["versions"] == [m.version for m in available()]
    assert EXPECTED_TABLES <= schema["tables"]  # type: ignore[operator]


async def test_an_edited_applied_migration_is_refused(
    fresh_db: Callable[[str | None], str], bridge: Any, tmp_path: Any
) -> None:
    dsn = fresh_db(None)
    mig = tmp_path / "migrations"
    mig.mkdir()
    (mig / "0001_a.sql").write_text("CREATE TABLE a (x int);")
    async with open_database(DatabaseConfig(dsn, pool_size=1), loop=bridge) as db:
        assert await migrate(db, mig) == ["0001_a"]
        (mig / "0001_a.sql").write_text("CREATE TABLE a (x bigint);")
        with pytest.raises(ConfigError, match="changed after it was applied"):
            await migrate(db, mig)


async def test_a_failing_migration_leaves_nothing_half_applied(
    fresh_db: Callable[[str | None], str], bridge: Any, tmp_path: Any
) -> None:
    dsn = fresh_db(None)
    mig = tmp_path / "migrations"
    mig.mkdir()
    (mig / "0001_ok.sql").write_text("CREATE TABLE ok (x int);")
    (mig / "0002_bad.sql").write_text("CREATE TABLE half (x int); SELECT * FROM missing_table;")
    async with open_database(DatabaseConfig(dsn, pool_size=1), loop=bridge) as db:
        with pytest.raises(Exception, match="missing_table"):
            await migrate(db, mig)
        tables = {r["tablename"] for r in await db.fetchall("SELECT tablename FROM pg_tables")}
        assert "ok" in tables and "half" not in tables
        versions = await db.fetchall("SELECT version FROM dataplane_migrations")
        assert [v["version"] for v in versions] == ["0001_ok"]
