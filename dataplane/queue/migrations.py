"""Schema migrations: the ordered ``sql/migrations/NNNN_name.sql`` files.

Each file is applied once, in its own transaction together with its record in
``dataplane_migrations``; a session-level advisory lock serialises migrators, so
running twice, or from two processes at once, leaves one correct schema. A file
whose text changed after it was applied is an error (its checksum is recorded).
After them, every run applies ``sql/roles.sql`` (:mod:`dataplane.queue.roles`).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, LiteralString

from dataplane.core.errors import ConfigError, DatabaseError
from dataplane.db import Connection, Database, open_to_public, q
from dataplane.db.sql import sql_root
from dataplane.queue.roles import apply_roles

log = logging.getLogger(__name__)

MIGRATE_TIMEOUT = 300.0  # seconds: a migration may rewrite a large table


@dataclass(frozen=True, slots=True)
class Migration:
    version: str
    path: Path

    @property
    def text(self) -> LiteralString:
        return self.path.read_text()  # our own migration file, not input

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def available(directory: Path | None = None) -> list[Migration]:
    """Migration files in version order."""
    directory = directory or sql_root() / "migrations"
    found = [Migration(p.stem, p) for p in sorted(directory.glob("*.sql"))]
    if not found:
        raise ConfigError(f"no migrations found in {directory}")
    return found


async def migrate(db: Database, directory: Path | None = None) -> list[str]:
    """Apply every pending migration, then (for the release's own migrations) the
    roles' grants (:func:`~dataplane.queue.roles.apply_roles`); return the versions
    applied by this call."""
    migrations = available(directory)
    applied: list[str] = await db.run(_apply, migrations, call_timeout=MIGRATE_TIMEOUT)
    for version in applied:
        log.info("migration applied: %s", version)
    if directory is None:  # the release's schema: its roles' grants (sql/roles.sql)
        await apply_roles(db)
    await warn_if_open_to_public(db)
    return applied


async def warn_if_open_to_public(db: Database) -> bool:
    """Warn when every role may connect to the queue DB; return whether it may."""
    is_open, name = await open_to_public(db)
    if not is_open:
        return False
    log.warning(
        "the queue DB is open to PUBLIC: any role that may log in can connect, LISTEN to"
        ' job ids and take advisory locks. Close it: REVOKE CONNECT ON DATABASE "%s" FROM'
        " PUBLIC, then GRANT CONNECT on it to the roles of the plane's processes",
        name,
    )
    return True


UNDEFINED_TABLE = "42P01"


async def pending(db: Database, *, call_timeout: float | None = None) -> list[str]:
    """The migrations this release ships that ``db`` has not applied (all of them when it
    was never migrated). A database migrated further, by a newer release, has none."""
    try:
        kw: dict[str, Any] = {} if call_timeout is None else {"call_timeout": call_timeout}
        rows = await db.fetchall(q("migration_applied"), **kw)
    except DatabaseError as exc:
        if exc.sqlstate != UNDEFINED_TABLE:
            raise
        rows = []
    done = {row["version"] for row in rows}
    return [m.version for m in available() if m.version not in done]


async def _apply(conn: Connection, migrations: list[Migration]) -> list[str]:
    await conn.execute(q("migration_lock"))
    try:
        await conn.execute(q("migration_table"))
        cur = await conn.execute(q("migration_applied"))
        done = {row["version"]: row["checksum"] for row in await cur.fetchall()}
        newly: list[str] = []
        for m in migrations:
            if m.version in done:
                if done[m.version] != m.checksum:
                    raise ConfigError(
                        f"migration {m.version} changed after it was applied "
                        "(write a new migration instead of editing an applied one)"
                    )
                continue
            async with conn.transaction():
                await conn.execute(m.text)
                await conn.execute(
                    q("migration_record"), {"version": m.version, "checksum": m.checksum}
                )
            newly.append(m.version)
        return newly
    finally:
        if not conn.closed and not conn.broken:
            await conn.execute(q("migration_unlock"))
