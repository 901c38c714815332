"""The demo LMS client DB: :func:`create_demo_db` builds the seeded database of
``sql/client_demo/`` and its read-only ``dataplane_ro`` role (``dataplane demo-db``,
``dataplane dev``, the tests)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psycopg import sql as pgsql

from dataplane.db import DatabaseConfig, ensure_database, open_database, with_params
from dataplane_lms.sql import SQL_DIR, q

log = logging.getLogger(__name__)

DEMO_DB_NAME = "dataplane_demo"
DEMO_RO_ROLE = "dataplane_ro"
SEED_TIMEOUT = 600.0  # seconds for one seed file


def demo_files() -> list[Path]:
    return sorted((SQL_DIR / "client_demo").glob("*.sql"))


async def create_demo_db(
    admin_dsn: str,
    *,
    name: str = DEMO_DB_NAME,
    ro_password: str = DEMO_RO_ROLE,
    progress: Callable[[str], None] = print,
    loop: Any = None,
) -> str:
    """Create, seed and lock down the demo client DB (once); return the read-only DSN."""
    admin_cfg = DatabaseConfig(admin_dsn, pool_size=1, application_name="demo-db")
    async with open_database(admin_cfg, loop=loop) as admin:
        if await ensure_database(admin, name):
            progress(f"created database {name}")
    target = with_params(admin_dsn, dbname=name)
    cfg = DatabaseConfig(target, pool_size=1, application_name="demo-db", call_timeout=SEED_TIMEOUT)
    async with open_database(cfg, loop=loop) as db:
        if await db.fetchone(q("demo_db_seeded")) is not None:
            progress(f"demo database {name} is already seeded")
            # The role file is idempotent: an older demo DB gets today's lock-down.
            await db.execute(demo_files()[-1].read_text())  # our own seed file
        else:
            files = demo_files()
            if not files:
                # Imported here, where it is raised: a release whose public API lacks
                # it (before 0.1.0's reshape) still loads this package (rolling upgrades
                # run two releases beside one install of it).
                from dataplane import ConfigError

                raise ConfigError("no sql/client_demo/*.sql files found")
            for i, path in enumerate(files, 1):
                started = time.monotonic()
                progress(f"[{i}/{len(files)}] {path.name} ...")
                await db.execute(path.read_text())  # our own seed file
                progress(
                    f"[{i}/{len(files)}] {path.name} done in {time.monotonic() - started:.1f}s"
                )
            await db.execute(q("demo_db_mark_seeded"))
        stmt = pgsql.SQL(q("demo_role_password")).format(password=pgsql.Literal(ro_password))
        await db.execute(stmt)
    return with_params(target, user=DEMO_RO_ROLE, password=ro_password)
