"""Administrative statements: creating a database when it is missing, closing it to
PUBLIC."""

from __future__ import annotations

from psycopg import sql as pgsql

from dataplane.db.pool import Database
from dataplane.db.sql import q


async def ensure_database(admin: Database, name: str) -> bool:
    """Create database ``name`` unless it exists (on a superuser connection); True if it
    was created."""
    if await admin.fetchone(q("database_exists"), {"name": name}) is not None:
        return False
    await admin.execute(pgsql.SQL(q("database_create")).format(name=pgsql.Identifier(name)))
    return True


async def open_to_public(db: Database) -> tuple[bool, str]:
    """Whether every role may connect to ``db``'s database (PUBLIC holds CONNECT, the
    default), and the database's name."""
    row = await db.fetchone(q("database_open_to_public"))
    assert row is not None
    return bool(row["open"]), str(row["name"])


async def close_to_public(db: Database) -> None:
    """Only roles granted CONNECT (and superusers) may connect to ``db``'s database (run
    by its owner). LISTEN needs no privilege: a role that may connect hears every job id
    on the done channels (their answers are sealed: ``dataplane.queue.notices.seal``)."""
    await db.execute(q("database_close_to_public"))
