"""The worker's client DB: a credential proven unable to write, in sessions it set up.

:func:`open_client_database` is how the worker opens its client DB (``DATAPLANE_CLIENT_DB_URL``).
It refuses to boot (:class:`ConfigError`, one line naming why) unless both hold:

**The credential cannot write anything, by any route Postgres offers**: not as the
login role (``session_user``), not as any role it is a member of (with or without
``INHERIT``, so not after ``SET ROLE`` either), not through a ``SECURITY DEFINER``
function it can call whose owner can write. For each of those roles the statement
``ro_write_privileges`` looks at role attributes (superuser, ``CREATEDB``,
``CREATEROLE``, ``REPLICATION``, ``BYPASSRLS``), write-capable predefined roles,
``CREATE``/``TEMPORARY`` on the database, ``CREATE`` on schemas, table, column and
sequence privileges, ``UPDATE`` on large objects, ``EXECUTE`` on the functions that
create, write or unlink large objects (``lo_create``, ``lo_from_bytea``, ``lo_put``,
``lowrite``, ``lo_unlink``...: Postgres grants them to PUBLIC, so a client DB must
revoke them), ``lo_compat_privileges`` (on, it skips the large objects' privilege
checks), and ownership of anything in the database. It answers one row per hole, the
gravest first; the refusal names the first (:func:`prove_read_only`).

**The credential cannot change how the worker's sessions run.** Any role may give
itself session defaults (``ALTER ROLE self [IN DATABASE d] SET ...``), and they apply
to every session it opens later: ``statement_timeout = '1ms'`` would stop every
worker, ``search_path`` or ``TimeZone`` would change answers. Startup ``options``
outrank them, so every connection starts with:

* :data:`PINNED` at the worker's values (Postgres's own defaults), where the server
  knows them: no role switched to (``role``), no server-side timeouts (the worker's
  call timeouts bound every call, and no transaction outlives a call),
  ``exit_on_error`` off. A role default they override is logged;
* :data:`KEPT` (what a query answers and how the driver reads it: ``search_path``,
  ``TimeZone``, ``DateStyle``, ``client_encoding``, isolation...) at the values the
  server gives at boot without the role's defaults (its configuration, the database's
  settings, the URL's ``options``), read in a session that pins the others. A role
  default for one of them refuses the boot: the worker cannot tell which value was
  meant (put it in the URL's ``options``);
* ``default_transaction_read_only`` on.

Every other setting is an allow-list: a role's or the database's default for a setting
neither pinned nor kept refuses the boot (``timezone_abbreviations`` would parse 'IST'
as India, ``row_security`` or ``synchronize_seqscans`` change which rows come back and
in what order), unless it is in :data:`HARMLESS`: settings of how fast a query runs
and how the server logs it, never of what it answers.

The URL's own ``options`` override the first two; nothing overrides the third. The
server's version comes first, from a connection that runs no statement (a name the
server does not know would refuse the connection, and a role's
``idle_session_timeout`` could end one that waits). Then ``ro_session_settings``
checks on the pool that every pin came with the connection (source ``client``): a
pooler that does not pass ``options`` on fails the boot (PgBouncer refuses them or,
told to ignore them, drops them), since through it a later ``ALTER ROLE ... SET``
would reach new sessions.

**What the proof cannot see.** It reads privileges once, at boot: a grant made
later is refused at the next boot. It cannot see what no privilege governs: writes
through functions that are not ``SECURITY DEFINER`` but reach outside the database
(``dblink``/``postgres_fdw`` with another credential, functions in untrusted
languages such as ``plpython3u`` and C functions of extensions, which act as the
server's OS user); ``NOTIFY``, advisory locks, transaction ids it consumes,
``pg_cancel_backend``/``pg_terminate_backend`` of its own role's sessions (other
workers' included), temp files, server log lines (``RAISE LOG``), CPU, I/O, memory
and connection slots; settings it does not pin (planner and memory settings: how
fast, not what), which reach sessions opened after the role sets them; and its own
password: ``ALTER ROLE self PASSWORD`` needs no privilege, cannot be revoked, and
locks every later connection out.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from dataplane.core.errors import ConfigError
from dataplane.db import Connection, Database, DatabaseConfig, open_database, q

log = logging.getLogger(__name__)

# Pinned at these values (Postgres's defaults) whatever the server or the role says,
# on servers that know them (server_version_num): an unknown name in the startup
# options would refuse the connection.
PINNED: Mapping[str, tuple[int, str]] = {
    "role": (0, "none"),  # run as the login role, not as one it set for itself
    "statement_timeout": (0, "0"),  # the worker's call timeouts bound every call
    "lock_timeout": (0, "0"),
    "idle_in_transaction_session_timeout": (0, "0"),  # no transaction outlives a call
    "idle_session_timeout": (140000, "0"),  # the pool keeps idle sessions
    "transaction_timeout": (170000, "0"),
    "exit_on_error": (0, "off"),  # one failed statement does not end the session
}
# Pinned at the value the server gives at boot, without the role's own defaults.
KEPT = (
    "search_path",  # what a query's names mean
    "default_transaction_isolation",  # what a transaction sees
    "default_transaction_deferrable",
    "TimeZone",  # how values are written out and read back
    "DateStyle",
    "IntervalStyle",
    "extra_float_digits",
    "client_encoding",
    "bytea_output",
    "standard_conforming_strings",  # what a query's text means
    "transform_null_equals",
    "array_nulls",
    "xmloption",
    "default_text_search_config",
    "lc_monetary",
    "lc_numeric",
    "lc_time",
    "gin_fuzzy_search_limit",
)
READ_ONLY = "default_transaction_read_only"  # always on (DatabaseConfig.read_only)
# Defaults a role or the database may set without refusing the boot: how fast, how much
# memory, what the server logs; never what a query answers. Exact names, and prefixes.
HARMLESS = frozenset(
    {
        "application_name",
        "work_mem",
        "hash_mem_multiplier",
        "maintenance_work_mem",
        "temp_buffers",
        "effective_cache_size",
        "effective_io_concurrency",
        "maintenance_io_concurrency",
        "random_page_cost",
        "seq_page_cost",
        "default_statistics_target",
        "from_collapse_limit",
        "join_collapse_limit",
        "plan_cache_mode",
        "constraint_exclusion",
        "cursor_tuple_fraction",
        "max_parallel_workers_per_gather",
        "min_parallel_table_scan_size",
        "min_parallel_index_scan_size",
        "parallel_leader_participation",
        "track_io_timing",
        "track_functions",
    }
)
HARMLESS_PREFIXES = ("enable_", "cpu_", "parallel_", "geqo", "jit", "log_", "auto_explain.")
CHECKED = [*PINNED, *KEPT, READ_ONLY]
ROLE_SOURCES = frozenset({"user", "database user"})  # ALTER ROLE ... [IN DATABASE ...] SET


@asynccontextmanager
async def open_client_database(
    config: DatabaseConfig, *, loop: Any = None
) -> AsyncIterator[Database]:
    """The worker's client DB pool, in pinned sessions, once the credential is proven
    read-only; :class:`ConfigError` naming the first reason it is not.

    Three pools in turn, one connection apiece at boot: the server's version (read at
    connect, before any statement a role's timeout could end); the settings the server
    gives, in sessions that pin :data:`PINNED`; then the pool itself, checked and
    proven (two queries). Each query runs under the call timeout; database errors
    propagate.
    """
    first = replace(config, read_only=True, pool_size=1, settings=pinned_on(0))
    async with open_database(first, loop=loop) as db:
        version = await db.run(_server_version)
    first = replace(first, settings=pinned_on(version))
    async with open_database(first, loop=loop) as db:
        kept = keep(await db.fetchall(q("ro_session_settings"), {"names": CHECKED}))
        check_defaults(await db.fetchall(q("ro_session_defaults")))
    pinned = replace(config, read_only=True, settings=(*first.settings, *kept))
    async with open_database(pinned, loop=loop) as db:
        check_pinned(await db.fetchall(q("ro_session_settings"), {"names": CHECKED}), pinned)
        await prove_read_only(db)
        yield db


async def _server_version(conn: Connection) -> int:
    return conn.info.server_version  # from the connection's start: no statement


def pinned_on(version: int) -> tuple[tuple[str, str], ...]:
    """:data:`PINNED` as a server of ``server_version_num`` ``version`` knows it."""
    return tuple((name, value) for name, (since, value) in PINNED.items() if version >= since)


def keep(rows: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    """The :data:`KEPT` settings, from ``ro_session_settings`` in a session that pinned
    the others; refuses one the role set for itself, and logs a pinned one it did."""
    kept: list[tuple[str, str]] = []
    for row in rows:
        name, role_value = row["name"], row["role_value"]
        if name in KEPT:
            if row["source"] in ROLE_SOURCES:
                raise ConfigError(
                    f"DATAPLANE_CLIENT_DB_URL's role sets its own {name} ({role_value}, by"
                    " ALTER ROLE ... SET), which the credential may change at will; RESET it, or"
                    f" set it in DATAPLANE_CLIENT_DB_URL's options (options=-c {name}=...)"
                )
            kept.append((name, row["setting"]))
            continue
        pin = "on" if name == READ_ONLY else PINNED[name][1]
        if role_value is not None and role_value != pin:
            log.warning(
                "DATAPLANE_CLIENT_DB_URL's role sets its own %s (%s); the worker's sessions use %s",
                name,
                role_value,
                pin,
            )
    return tuple(kept)


def check_defaults(rows: Sequence[Mapping[str, Any]]) -> None:
    """Raise :class:`ConfigError` for a role's or the database's default that is neither
    pinned, kept (:func:`keep` judges those) nor :data:`HARMLESS`."""
    handled = {name.lower() for name in CHECKED} | {"lo_compat_privileges"}  # the proof's
    for row in rows:
        name = row["name"]
        if name in handled or name in HARMLESS or name.startswith(HARMLESS_PREFIXES):
            continue
        by = (
            "ALTER ROLE ... SET, which the credential may change at will"
            if row["scope"] == "role"
            else "ALTER DATABASE ... SET"
        )
        raise ConfigError(
            f"DATAPLANE_CLIENT_DB_URL's {row['scope']} sets {name} ({row['value']}, by {by}), which"
            " can change what a query answers; RESET it, or set it in DATAPLANE_CLIENT_DB_URL's"
            f" options (options=-c {name}=...)"
        )


def check_pinned(rows: Sequence[Mapping[str, Any]], config: DatabaseConfig) -> None:
    """Raise :class:`ConfigError` unless every pinned setting came with the connection."""
    expected = {name for name, _ in config.settings} | {READ_ONLY}
    for row in rows:
        if row["name"] in expected and row["source"] != "client":
            raise ConfigError(
                f"DATAPLANE_CLIENT_DB_URL's sessions do not start with the worker's settings"
                f" ({row['name']} comes from {row['source']}, not the connection's"
                " options); connect the worker to the client DB directly, or through a"
                " pooler that passes options on"
            )
        if row["name"] == READ_ONLY and row["setting"] != "on":
            raise ConfigError(
                f"DATAPLANE_CLIENT_DB_URL's sessions are not read-only ({READ_ONLY} off)"
            )


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
            f"DATAPLANE_CLIENT_DB_URL can write ({hole}{more}); the worker needs a read-only"
            " credential"
        )
