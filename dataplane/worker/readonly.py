"""The worker's boot proof that its client-DB credential cannot write.

The credential it holds for the client DB must not be able to write anything, by
any route Postgres offers: not as the login role, not as any role it is a member of
(with or without ``INHERIT``, so not after ``SET ROLE`` either), not through a
``SECURITY DEFINER`` function it can call whose owner can write. For each of those
roles the statement ``ro_write_privileges`` looks at role attributes (superuser,
``CREATEDB``, ``CREATEROLE``, ``REPLICATION``, ``BYPASSRLS``), write-capable
predefined roles, ``CREATE``/``TEMPORARY`` on the database, ``CREATE`` on schemas,
table, column and sequence privileges, ``UPDATE`` on large objects, ``EXECUTE`` on
the functions that create, write or unlink large objects (``lo_create``,
``lo_from_bytea``, ``lo_put``, ``lowrite``, ``lo_unlink``...: Postgres grants them to
PUBLIC, so a client DB must revoke them), ``lo_compat_privileges`` (on, it skips the
large objects' privilege checks), and ownership of anything in the database. It
answers one row per hole, the gravest first; the worker refuses to boot naming the
first.
"""

from __future__ import annotations

from dataplane.db import Database, q
from dataplane.errors import ConfigError


async def prove_read_only(db: Database) -> None:
    """Raise :class:`ConfigError` naming the first way the credential could write.

    One query on ``db`` (under its call timeout); database errors propagate.
    """
    rows = await db.fetchall(q("ro_write_privileges"))
    if rows:
        first = rows[0]
        hole = f"{first['kind']} {first['name']}"
        if first["detail"]:
            hole += f" {first['detail']}"
        more = f", and {len(rows) - 1} more" if len(rows) > 1 else ""
        raise ConfigError(
            f"CLIENT_DB_URL can write ({hole}{more}); the worker needs a read-only credential"
        )
