"""The plane's database roles: one per kind of process, none of them the owner.

``sql/roles.sql`` defines the NOLOGIN group roles (``dataplane_bff``,
``dataplane_worker``, ``dataplane_capcom``, ``dataplane_scaler``, ``dataplane_viewer``,
``dataplane_operator``) and grants each exactly what its process's statements need;
``dataplane migrate`` applies it after the migrations (:func:`apply_roles`), and
``dataplane roles`` prints it for a DBA when the migrating role may not create roles. A
login role joins one group (``GRANT dataplane_worker TO worker_login``).

The role that migrates owns the schema. A runtime process (BFF, worker, capcom) refuses
to run as a superuser or as a role that can act as the owner of ``maestro_queues``
(:func:`refuse_owner`): surface code runs in the workers, and an owner or superuser
credential there could alter tables, read every tenant's results, or run programs on
the database server. ``DATAPLANE_ALLOW_OWNER=1`` lifts the refusal for a single-user
development database (the tests' embedded server), never for a fleet.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from typing import LiteralString

from psycopg import sql as pgsql

from dataplane.core.errors import ConfigError, DatabaseError, DatabaseUnavailable
from dataplane.core.settings import from_env, setting
from dataplane.db import Connection, Database, q
from dataplane.db.sql import sql_root

log = logging.getLogger(__name__)

ROLES_TIMEOUT = 60.0  # seconds: GRANTs wait for no table lock, but for the migrators'

GROUPS = {
    "bff": "dataplane_bff",
    "worker": "dataplane_worker",
    "capcom": "dataplane_capcom",
    "scaler": "dataplane_scaler",
    "viewer": "dataplane_viewer",
    "operator": "dataplane_operator",
}


@dataclass(frozen=True, slots=True)
class RoleSettings:
    # Development only: a runtime process may connect as a superuser or the owner.
    allow_owner: bool = setting("DATAPLANE_ALLOW_OWNER", False)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``dataplane roles``: the SQL of :data:`GROUPS` and their grants, for a DBA."""
    sub.add_parser(
        "roles",
        help="print the SQL that creates the plane's roles and grants each its privileges "
        "(`dataplane migrate` applies it when it may create roles)",
    )


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(roles_sql())
    return 0


def roles_sql() -> LiteralString:
    """The text of ``sql/roles.sql`` (our own file, not input)."""
    text: LiteralString = (sql_root() / "roles.sql").read_text()
    return text


async def apply_roles(db: Database) -> bool:
    """Create the group roles (when this role may) and grant each its privileges; False,
    having said what to run, when the roles are missing and this role cannot create
    them."""
    row = await db.fetchone(q("roles_state"), {"names": list(GROUPS.values())})
    assert row is not None
    if row["missing"] and not row["may_create"]:
        log.warning(
            "the plane's roles %s do not exist and %s may not create them: a DBA runs the"
            " SQL that `dataplane roles` prints, then `dataplane migrate` again",
            ", ".join(row["missing"]),
            row["me"],
        )
        return False
    await db.run(_apply_locked, call_timeout=ROLES_TIMEOUT)
    return True


async def _apply_locked(conn: Connection) -> None:
    # Under the migrators' lock: two migrators granting at once could collide.
    await conn.execute(q("migration_lock"))
    try:
        await conn.execute(roles_sql())
    finally:
        if not conn.closed and not conn.broken:
            await conn.execute(q("migration_unlock"))


async def refuse_owner(db: Database, process: str) -> None:
    """Raise :class:`ConfigError` when ``db``'s role is a superuser or may act as the
    schema's owner, unless ``DATAPLANE_ALLOW_OWNER`` is set (then warn)."""
    try:
        row = await db.fetchone(q("runtime_role"))
    except DatabaseUnavailable:
        raise  # the caller retries as for any unreachable database
    except DatabaseError as exc:
        raise ConfigError(f"{process}: cannot read its own role: {exc}") from None
    assert row is not None
    what = "a superuser" if row["superuser"] else "the schema's owner" if row["owner"] else None
    if what is None:
        return
    group = GROUPS.get(process, "dataplane_" + process)
    message = (
        f"{process}: connects to the queue DB as {row['me']!r}, {what}: a runtime process"
        f" runs as a login role that is a member of {group} only (GRANT {group} TO <login>;"
        " `dataplane roles` prints the grants)"
    )
    if from_env(RoleSettings).allow_owner:
        log.warning("%s; allowed by DATAPLANE_ALLOW_OWNER (development only)", message)
        return
    raise ConfigError(message)


async def ensure_login(db: Database, login: str, process: str, password: str) -> None:
    """A LOGIN role ``login`` with ``password``, a member of ``process``'s group (run by
    a role that may create roles: ``dataplane dev``, the tests)."""
    names = {
        "login": pgsql.Identifier(login),
        "group": pgsql.Identifier(GROUPS[process]),
        "password": pgsql.Literal(password),
    }
    exists = await db.fetchone(q("role_exists"), {"name": login}) is not None
    for name in ("role_login_alter", "role_login_grant") if exists else ("role_login_create",):
        await db.execute(pgsql.SQL(q(name)).format(**names))
