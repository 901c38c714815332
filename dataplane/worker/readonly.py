"""The worker's boot proof that its client-DB credential cannot write.

The credential it holds for the client DB must not be able to write anything it
can see: no INSERT, UPDATE, DELETE or TRUNCATE on any table, no CREATE on any
schema or on the database, not a superuser. The worker refuses to boot otherwise.
"""

from __future__ import annotations

from dataplane.db import Database, q
from dataplane.errors import ConfigError


async def prove_read_only(db: Database) -> None:
    """Raise :class:`ConfigError` listing what the credential could write."""
    rows = await db.fetchall(q("ro_write_privileges"))
    if rows:
        shown = ", ".join(f"{r['kind']} {r['name']}" for r in rows[:5])
        more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
        raise ConfigError(
            f"CLIENT_DB_URL can write ({shown}{more}); the worker needs a read-only credential"
        )
