"""The worker's read-only proof against real roles: every way a credential can write,
and every way it could change how the worker's sessions run.

Each case creates a login role in the demo client DB that is read-only (``USAGE`` on
``lms``, ``SELECT`` on its tables, like ``dataplane_ro``), proves that it passes,
adds exactly one hole, shows that the hole really writes, and proves that
:func:`open_client_database` now refuses it, naming the hole. The settings cases have
the role give itself session defaults (as any role may) and show that the worker's
sessions do not take them. Roles and the case's own schema are dropped afterwards;
``dataplane_ro`` is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio
from dataplane_lms.demo_db import create_demo_db
from psycopg.conninfo import conninfo_to_dict

from dataplane.core.errors import ConfigError, DatabaseError
from dataplane.db import Connection, DatabaseConfig, with_params
from dataplane.queue import QueueClient
from dataplane.worker.readonly import open_client_database
from tests.conftest import admin_execute, wait_until
from tests.helpers import WorkerProcess, submit


@dataclass(frozen=True)
class Hole:
    id: str
    grant: tuple[str, ...]  # run as the superuser; {role} {writer} {schema} {db} {tag} {lo}
    named: str  # what the refusal must name
    writes: tuple[str, ...] = ()  # run as {role}: proof that the hole writes
    min_version: int = 0  # server_version_num


HOLES = [
    Hole(
        "column-update",
        ("GRANT UPDATE (email) ON lms.users TO {role}",),
        "column lms.users.email",
        ("UPDATE lms.users SET email = email WHERE id = (SELECT min(id) FROM lms.users)",),
    ),
    Hole(
        "column-insert",
        ("GRANT INSERT (id, name, created_at) ON lms.clients TO {role}",),
        "column lms.clients.created_at",
        ("INSERT INTO lms.clients (id, name, created_at) VALUES ('{tag}', 'E', now())",),
    ),
    Hole(
        "member-noinherit",
        ("ALTER ROLE {role} NOINHERIT", "GRANT {writer} TO {role}"),
        "table lms.clients as role {writer}",
        (
            "SET ROLE {writer}",
            "INSERT INTO lms.clients (id, name, created_at) VALUES ('{tag}', 'E', now())",
        ),
    ),
    Hole(
        "member-inherit-false",
        ("GRANT {writer} TO {role} WITH INHERIT FALSE, SET TRUE",),
        "table lms.clients as role {writer}",
        (
            "SET ROLE {writer}",
            "INSERT INTO lms.clients (id, name, created_at) VALUES ('{tag}', 'E', now())",
        ),
        min_version=160000,
    ),
    Hole(
        "member-nested",
        (
            "CREATE ROLE {role}_mid NOINHERIT",
            "GRANT {writer} TO {role}_mid",
            "GRANT {role}_mid TO {role}",
        ),
        "table lms.clients as role {writer}",
        (
            "SET ROLE {writer}",
            "INSERT INTO lms.clients (id, name, created_at) VALUES ('{tag}', 'E', now())",
        ),
    ),
    Hole(
        # the session starts as a read-only member role; SET ROLE NONE gets the login role back
        "member-behind-a-role-setting",
        (
            "CREATE ROLE {role}_mid NOLOGIN",
            "GRANT {role}_mid TO {role}",
            "GRANT {writer} TO {role}",
            "ALTER ROLE {role} SET role = '{role}_mid'",
        ),
        "table lms.clients",
        (
            "SET ROLE NONE",
            "INSERT INTO lms.clients (id, name, created_at) VALUES ('{tag}', 'E', now())",
        ),
    ),
    Hole(
        "security-definer-superuser-owner",
        (
            "CREATE FUNCTION {schema}.scribble() RETURNS void LANGUAGE sql SECURITY DEFINER"
            " AS $$ INSERT INTO {schema}.scratch VALUES (1) $$",
            "REVOKE EXECUTE ON FUNCTION {schema}.scribble() FROM PUBLIC",
            "GRANT EXECUTE ON FUNCTION {schema}.scribble() TO {role}",
        ),
        "SECURITY DEFINER function {schema}.scribble() runs as postgres",
        ("SELECT {schema}.scribble()",),
    ),
    Hole(
        "security-definer-writer-owner",
        (
            "GRANT USAGE ON SCHEMA {schema} TO {writer}",
            "GRANT INSERT ON {schema}.scratch TO {writer}",
            "CREATE FUNCTION {schema}.scribble() RETURNS void LANGUAGE sql SECURITY DEFINER"
            " AS $$ INSERT INTO {schema}.scratch VALUES (1) $$",
            "ALTER FUNCTION {schema}.scribble() OWNER TO {writer}",
            "REVOKE EXECUTE ON FUNCTION {schema}.scribble() FROM PUBLIC",
            "GRANT EXECUTE ON FUNCTION {schema}.scribble() TO {role}",
        ),
        "SECURITY DEFINER function {schema}.scribble() runs as {writer}",
        ("SELECT {schema}.scribble()",),
    ),
    Hole(
        "sequence-update",
        ("GRANT UPDATE ON SEQUENCE {schema}.counter TO {role}",),
        "sequence {schema}.counter",
        ("SELECT setval('{schema}.counter', 42)",),
    ),
    Hole(
        "sequence-usage",
        ("GRANT USAGE ON SEQUENCE {schema}.counter TO {role}",),
        "sequence {schema}.counter",
        ("SELECT nextval('{schema}.counter')",),
    ),
    Hole(
        "createdb",
        ("ALTER ROLE {role} CREATEDB",),
        "attribute CREATEDB",
        ("CREATE DATABASE {role}_db", "DROP DATABASE {role}_db"),
    ),
    Hole(
        "createrole",
        ("ALTER ROLE {role} CREATEROLE",),
        "attribute CREATEROLE",
        ("CREATE ROLE {role}_made", "DROP ROLE {role}_made"),
    ),
    Hole("replication", ("ALTER ROLE {role} REPLICATION",), "attribute REPLICATION"),
    Hole("bypassrls", ("ALTER ROLE {role} BYPASSRLS",), "attribute BYPASSRLS"),
    Hole("superuser", ("ALTER ROLE {role} SUPERUSER",), "attribute SUPERUSER"),
    Hole(
        "database-temporary",
        ('GRANT TEMPORARY ON DATABASE "{db}" TO {role}',),
        "database TEMPORARY",
        ("CREATE TEMP TABLE evil (x int)", "INSERT INTO evil VALUES (1)"),
    ),
    Hole(
        "database-create",
        ('GRANT CREATE ON DATABASE "{db}" TO {role}',),
        "database CREATE",
        ("CREATE SCHEMA {role}_evil", "DROP SCHEMA {role}_evil"),
    ),
    Hole(
        "schema-create",
        ("GRANT CREATE ON SCHEMA {schema} TO {role}",),
        "schema CREATE {schema}",
        ("CREATE TABLE {schema}.evil (x int)", "INSERT INTO {schema}.evil VALUES (1)"),
    ),
    Hole(
        "table-insert",
        ("GRANT INSERT ON lms.clients TO {role}",),
        "table lms.clients",
        ("INSERT INTO lms.clients (id, name, created_at) VALUES ('{tag}', 'E', now())",),
    ),
    Hole(
        "owner-without-privileges",
        (
            "CREATE TABLE {schema}.owned (x int)",
            "ALTER TABLE {schema}.owned OWNER TO {role}",
            "REVOKE ALL ON {schema}.owned FROM {role}",
        ),
        "owns table {schema}.owned",
        ("GRANT INSERT ON {schema}.owned TO {role}", "INSERT INTO {schema}.owned VALUES (1)"),
    ),
    Hole(
        "predefined-write-all-data",
        ("GRANT pg_write_all_data TO {role} WITH INHERIT FALSE",),
        "predefined role pg_write_all_data",
        (
            "SET ROLE pg_write_all_data",
            "INSERT INTO lms.clients (id, name, created_at) VALUES ('{tag}', 'E', now())",
        ),
        min_version=160000,
    ),
    Hole(
        "predefined-write-server-files",
        ("GRANT pg_write_server_files TO {role}",),
        "predefined role pg_write_server_files",
    ),
    Hole(
        "large-object-function",
        ("GRANT EXECUTE ON FUNCTION pg_catalog.lo_from_bytea(oid, bytea) TO {role}",),
        "large-object function pg_catalog.lo_from_bytea(oid, bytea)",
        ("SELECT lo_from_bytea(0, '\\x2a')",),
    ),
    Hole(
        # as Postgres ships: every role may create, write and unlink large objects
        "large-object-functions-of-public",
        ("GRANT EXECUTE ON FUNCTION pg_catalog.lo_create(oid) TO PUBLIC",),
        "large-object function pg_catalog.lo_create(oid)",
        ("SELECT lo_create(0)",),
    ),
    Hole(
        "large-object-update",
        (
            "SELECT lo_from_bytea({lo}, 'kept')",
            "GRANT SELECT, UPDATE ON LARGE OBJECT {lo} TO {role}",
            "GRANT EXECUTE ON FUNCTION pg_catalog.lo_put(oid, bigint, bytea) TO {role}",
        ),
        "large object UPDATE {lo}",
        ("SELECT lo_put({lo}, 0, 'lost')",),
    ),
    Hole(
        "large-object-update-of-public",
        ("SELECT lo_from_bytea({lo}, 'kept')", "GRANT UPDATE ON LARGE OBJECT {lo} TO PUBLIC"),
        "large object UPDATE {lo}",
    ),
    Hole(
        "large-object-compat-privileges",
        (
            "SELECT lo_from_bytea({lo}, 'kept')",  # the superuser's, no grants
            "ALTER ROLE {role} SET lo_compat_privileges = on",
            "GRANT EXECUTE ON FUNCTION pg_catalog.lo_put(oid, bigint, bytea) TO {role}",
        ),
        "setting lo_compat_privileges on",
        ("SELECT lo_put({lo}, 0, 'lost')",),
    ),
    Hole(
        "table-maintain",
        ("GRANT MAINTAIN ON lms.clients TO {role}",),
        "table lms.clients",
        ("LOCK TABLE lms.clients IN ACCESS EXCLUSIVE MODE",),
        min_version=170000,
    ),
]


# What the demo DB revokes from PUBLIC (as every client DB must), restored after each case.
LARGE_OBJECT_WRITERS = (
    "pg_catalog.lo_creat(integer)",
    "pg_catalog.lo_create(oid)",
    "pg_catalog.lo_from_bytea(oid, bytea)",
    "pg_catalog.lo_put(oid, bigint, bytea)",
    "pg_catalog.lowrite(integer, bytea)",
    "pg_catalog.lo_truncate(integer, integer)",
    "pg_catalog.lo_truncate64(integer, bigint)",
    "pg_catalog.lo_unlink(oid)",
)


@dataclass
class Case:
    """The names one case uses, and the statements that make and unmake them."""

    admin_dsn: str  # superuser, on the demo DB
    db: str
    role: str
    writer: str
    schema: str
    tag: str
    lo: int  # a large object's oid

    @property
    def dsn(self) -> str:
        return with_params(self.admin_dsn, user=self.role, password=self.role)

    def fill(self, statement: str) -> str:
        return statement.format(
            role=self.role,
            writer=self.writer,
            schema=self.schema,
            db=self.db,
            tag=self.tag,
            lo=self.lo,
        )

    def admin(self, *statements: str) -> None:
        admin_execute(self.admin_dsn, *(self.fill(s) for s in statements))

    def as_role(self, *statements: str, commit: bool = False) -> None:
        """Run ``statements`` as the case's role in one transaction, rolled back unless
        ``commit`` (statements that cannot run in a transaction run in autocommit)."""
        autocommit = commit or any(
            s.split()[0] in ("CREATE", "DROP") and "DATABASE" in s for s in statements
        )
        with psycopg.connect(self.dsn, autocommit=autocommit) as conn:
            for statement in statements:
                conn.execute(self.fill(statement))  # type: ignore[call-overload]
            if not autocommit:
                conn.rollback()


@pytest.fixture
def case(demo_db: tuple[str, str]) -> Iterator[Case]:
    admin_dsn = demo_db[0]
    db = conninfo_to_dict(admin_dsn)["dbname"]
    tag = uuid.uuid4().hex[:10]
    lo = 1_000_000 + int(tag[:6], 16)
    c = Case(admin_dsn, str(db), f"ro_hole_{tag}", f"ro_writer_{tag}", f"ro_holes_{tag}", tag, lo)
    c.admin(
        # the case's role: read-only like dataplane_ro, with a password to log in
        "CREATE ROLE {role} LOGIN PASSWORD '{role}'",
        "GRANT USAGE ON SCHEMA lms TO {role}",
        "GRANT SELECT ON ALL TABLES IN SCHEMA lms TO {role}",
        'REVOKE TEMPORARY ON DATABASE "{db}" FROM {role}',
        # a role that can write
        "CREATE ROLE {writer} NOLOGIN",
        "GRANT USAGE ON SCHEMA lms TO {writer}",
        "GRANT INSERT ON lms.clients TO {writer}",
        # the case's own schema, readable by the role: a table and a sequence
        "CREATE SCHEMA {schema}",
        "CREATE TABLE {schema}.scratch (x int)",
        "CREATE SEQUENCE {schema}.counter",
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT ON {schema}.scratch, {schema}.counter TO {role}",
    )
    try:
        yield c
    finally:
        c.admin(
            "DROP SCHEMA IF EXISTS {schema} CASCADE",
            "DELETE FROM lms.clients WHERE id = '{tag}'",
            "SELECT lo_unlink(oid) FROM pg_largeobject_metadata WHERE oid = {lo}",
            f"REVOKE EXECUTE ON FUNCTION {', '.join(LARGE_OBJECT_WRITERS)} FROM PUBLIC",
        )
        for who in (c.role, f"{c.role}_mid", f"{c.role}_made", c.writer):
            c.admin(
                f"DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = '{who}') THEN "
                f"EXECUTE 'DROP OWNED BY {who}'; EXECUTE 'DROP ROLE {who}'; END IF; END $$"
            )


async def _prove(dsn: str, bridge: Any) -> None:
    """What the worker does at boot with ``DATAPLANE_CLIENT_DB_URL``."""
    async with open_client_database(DatabaseConfig(dsn, pool_size=1), loop=bridge):
        pass


def _server_version(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.info.server_version


async def test_the_demo_read_only_role_passes(demo_db: tuple[str, str], bridge: Any) -> None:
    await _prove(demo_db[1], bridge)


async def test_an_older_demo_db_gets_the_large_object_lock_down(
    case: Case, demo_db: tuple[str, str], bridge: Any
) -> None:
    case.admin("GRANT EXECUTE ON FUNCTION pg_catalog.lo_create(oid) TO PUBLIC")  # as it was
    with pytest.raises(ConfigError, match=r"large-object function pg_catalog\.lo_create\(oid\)"):
        await _prove(demo_db[1], bridge)
    await create_demo_db(
        with_params(case.admin_dsn, dbname="postgres"),
        name=case.db,
        progress=lambda _: None,
        loop=bridge,
    )
    await _prove(demo_db[1], bridge)


async def test_a_superuser_is_refused(demo_db: tuple[str, str], bridge: Any) -> None:
    with pytest.raises(
        ConfigError, match=r"^DATAPLANE_CLIENT_DB_URL can write \(attribute SUPERUSER"
    ):
        await _prove(demo_db[0], bridge)


@pytest.mark.parametrize("hole", HOLES, ids=[h.id for h in HOLES])
async def test_every_hole_is_refused_by_name(hole: Hole, case: Case, bridge: Any) -> None:
    if _server_version(case.admin_dsn) < hole.min_version:
        pytest.skip(f"needs server_version_num >= {hole.min_version}")
    await _prove(case.dsn, bridge)  # read-only as made
    case.admin(*hole.grant)
    if hole.writes:
        case.as_role(*hole.writes)  # the hole is real: this wrote
    with pytest.raises(ConfigError) as refused:
        await _prove(case.dsn, bridge)
    message = str(refused.value)
    assert message.startswith(f"DATAPLANE_CLIENT_DB_URL can write ({case.fill(hole.named)}"), (
        message
    )
    assert "\n" not in message


async def test_a_security_definer_function_of_a_read_only_owner_is_fine(
    case: Case, bridge: Any
) -> None:
    case.admin(
        "CREATE ROLE {role}_mid NOLOGIN",  # read-only: SELECT on the scratch table only
        "GRANT USAGE ON SCHEMA {schema} TO {role}_mid",
        "GRANT SELECT ON {schema}.scratch TO {role}_mid",
        "CREATE FUNCTION {schema}.peek() RETURNS bigint LANGUAGE sql SECURITY DEFINER"
        " AS $$ SELECT count(*) FROM {schema}.scratch $$",
        "ALTER FUNCTION {schema}.peek() OWNER TO {role}_mid",
        "REVOKE CREATE ON SCHEMA {schema} FROM {role}_mid",
    )
    # The owner owns its function (it could drop it), but the caller cannot become it.
    await _prove(case.dsn, bridge)


async def test_a_writer_behind_two_security_definer_functions_is_found(
    case: Case, bridge: Any
) -> None:
    case.admin(
        # {role}_mid cannot write by itself, but it can call the writer's function.
        "CREATE ROLE {role}_mid NOLOGIN",
        "GRANT USAGE ON SCHEMA {schema} TO {writer}, {role}_mid",
        "GRANT INSERT ON {schema}.scratch TO {writer}",
        "CREATE FUNCTION {schema}.inner_write() RETURNS void LANGUAGE sql SECURITY DEFINER"
        " AS $$ INSERT INTO {schema}.scratch VALUES (2) $$",
        "ALTER FUNCTION {schema}.inner_write() OWNER TO {writer}",
        "REVOKE EXECUTE ON FUNCTION {schema}.inner_write() FROM PUBLIC",
        "GRANT EXECUTE ON FUNCTION {schema}.inner_write() TO {role}_mid",
        "CREATE FUNCTION {schema}.outer_call() RETURNS void LANGUAGE sql SECURITY DEFINER"
        " AS $$ SELECT {schema}.inner_write() $$",
        "ALTER FUNCTION {schema}.outer_call() OWNER TO {role}_mid",
        "REVOKE EXECUTE ON FUNCTION {schema}.outer_call() FROM PUBLIC",
        "GRANT EXECUTE ON FUNCTION {schema}.outer_call() TO {role}",
    )
    case.as_role("SELECT {schema}.outer_call()")
    with pytest.raises(ConfigError) as refused:
        await _prove(case.dsn, bridge)
    assert f"SECURITY DEFINER function {case.schema}.outer_call()" in str(refused.value)


def test_the_worker_process_refuses_a_column_grant_with_one_line(
    case: Case, queue_dsn: str
) -> None:
    case.admin("GRANT UPDATE (email) ON lms.users TO {role}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATAPLANE_"))}
    env.update(
        MAESTRO_QUEUES_URL=queue_dsn,
        SURFACE_QUEUE_TYPE="surface-users",
        DATAPLANE_CLIENT_DB_URL=case.dsn,
        DATAPLANE_ALLOW_OWNER="1",  # the queue DB's superuser: the client DB is the test
    )
    result = subprocess.run(
        [sys.executable, "-m", "dataplane", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    # The refusal is one line (the log's lines, e.g. DATAPLANE_ALLOW_OWNER's warning, aside).
    lines = [line for line in result.stderr.splitlines() if line.startswith("dataplane ")]
    assert lines == [
        "dataplane worker: DATAPLANE_CLIENT_DB_URL can write (column lms.users.email); "
        "the worker needs a read-only credential"
    ], result.stderr


# The settings ---------------------------------------------------------------------


def _sabotage(version: int) -> dict[str, str]:
    """Session defaults a role may give itself that would stop or slow every worker."""
    found = {
        "statement_timeout": "1ms",
        "lock_timeout": "1ms",
        "idle_in_transaction_session_timeout": "1ms",
        "idle_session_timeout": "1ms",  # 14+
        "exit_on_error": "on",
    }
    if version >= 170000:
        found["transaction_timeout"] = "1ms"
    return found


async def test_the_worker_runs_on_its_own_settings_whatever_the_role_sets_itself(
    case: Case, bridge: Any, caplog: pytest.LogCaptureFixture
) -> None:
    sabotage = _sabotage(_server_version(case.admin_dsn))
    case.as_role(
        *(f"ALTER ROLE {{role}} SET {k} = '{v}'" for k, v in sabotage.items()), commit=True
    )

    async def in_a_transaction(conn: Connection) -> None:
        async with conn.transaction():
            await conn.execute("SELECT 1")
            await asyncio.sleep(0.05)  # idle in the transaction, between two statements
            await conn.execute("SELECT 1")

    config = DatabaseConfig(case.dsn, pool_size=1)
    async with open_client_database(config, loop=bridge) as db:
        row = await db.fetchone(
            "SELECT " + ", ".join(f"current_setting('{k}') AS {k}" for k in sabotage)
        )
        assert row == {k: "off" if k == "exit_on_error" else "0" for k in sabotage}
        await db.fetchone("SELECT pg_sleep(0.05)")  # past a 1 ms statement_timeout
        await db.run(in_a_transaction)
        with pytest.raises(DatabaseError, match="division by zero"):
            await db.fetchone("SELECT 1 / 0 AS x")  # exit_on_error would end the session
        await trio.sleep(0.05)  # idle past a 1 ms idle_session_timeout
        assert await db.fetchone("SELECT 1 AS one") == {"one": 1}
        stats = db.statistics()
    assert (stats.connects, stats.discarded) == (1, 0)  # one session all along
    assert "sets its own statement_timeout (1ms); the worker's sessions use 0" in caplog.text


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("search_path", "pg_catalog"),  # lms.users no longer answers to "users"
        ("TimeZone", "Pacific/Chatham"),  # dates of timestamps move
        ("default_transaction_isolation", "serializable"),
        ("transform_null_equals", "on"),  # x = NULL means x IS NULL
        ("client_encoding", "LATIN1"),
        ("DateStyle", "German"),
    ],
)
async def test_a_setting_the_role_gives_itself_that_changes_answers_is_refused(
    name: str, value: str, case: Case, bridge: Any
) -> None:
    case.as_role(f"ALTER ROLE {{role}} SET {name} = '{value}'", commit=True)
    with pytest.raises(ConfigError) as refused:
        await _prove(case.dsn, bridge)
    assert str(refused.value).startswith(
        f"DATAPLANE_CLIENT_DB_URL's role sets its own {name} ({value}, by ALTER ROLE ... SET)"
    ), refused.value


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("timezone_abbreviations", "India"),  # 'IST' parsed as India Standard Time
        ("row_security", "off"),
        ("xmlbinary", "hex"),
        ("quote_all_identifiers", "on"),
        ("synchronize_seqscans", "off"),
    ],
)
async def test_any_other_setting_the_role_gives_itself_is_refused_unless_harmless(
    name: str, value: str, case: Case, bridge: Any
) -> None:
    """An allow-list, not a deny-list: the defaults above booted and served before."""
    case.as_role(f"ALTER ROLE {{role}} SET {name} = '{value}'", commit=True)
    with pytest.raises(ConfigError) as refused:
        await _prove(case.dsn, bridge)
    assert str(refused.value).startswith(
        f"DATAPLANE_CLIENT_DB_URL's role sets {name.lower()} ({value}, by ALTER ROLE ... SET"
    ), refused.value
    case.as_role(
        f"ALTER ROLE {{role}} RESET {name}", "ALTER ROLE {role} SET work_mem = '8MB'", commit=True
    )
    await _prove(case.dsn, bridge)  # how fast, not what: it boots


async def test_a_database_default_that_changes_answers_is_refused(case: Case, bridge: Any) -> None:
    case.admin("ALTER DATABASE \"{db}\" SET timezone_abbreviations = 'India'")
    try:
        with pytest.raises(
            ConfigError, match=r"^DATAPLANE_CLIENT_DB_URL's database sets timezone_abbrev"
        ):
            await _prove(case.dsn, bridge)
    finally:
        case.admin('ALTER DATABASE "{db}" RESET timezone_abbreviations')


async def test_a_setting_the_role_gives_itself_in_this_database_is_refused(
    case: Case, bridge: Any
) -> None:
    case.as_role("ALTER ROLE {role} IN DATABASE \"{db}\" SET search_path = 'public'", commit=True)
    with pytest.raises(
        ConfigError, match=r"^DATAPLANE_CLIENT_DB_URL's role sets its own search_path"
    ):
        await _prove(case.dsn, bridge)


async def test_the_servers_the_databases_and_the_urls_settings_are_kept(
    case: Case, bridge: Any
) -> None:
    case.admin('ALTER DATABASE "{db}" SET search_path = lms, public')
    try:
        dsn = with_params(case.dsn, options=r"-c TimeZone=Asia/Kolkata -c lock_timeout=5s")
        async with open_client_database(DatabaseConfig(dsn, pool_size=2), loop=bridge) as db:
            # After boot the role changes its own defaults: new sessions do not take them.
            case.as_role(
                "ALTER ROLE {role} SET search_path = 'public'",
                "ALTER ROLE {role} SET TimeZone = 'UTC'",
                "ALTER ROLE {role} SET lock_timeout = '1ms'",
                commit=True,
            )
            seen: list[dict[str, Any] | None] = []

            async def look() -> None:  # two at once: the second opens a new session
                seen.append(
                    await db.fetchone(
                        "SELECT current_setting('search_path') AS path,"
                        " current_setting('TimeZone') AS tz,"
                        " current_setting('lock_timeout') AS lock, pg_sleep(0.1)::text AS _,"
                        " (SELECT count(*) FROM users) AS users"
                    )
                )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(look)
                nursery.start_soon(look)
            assert db.statistics().connects == 2
    finally:
        case.admin('ALTER DATABASE "{db}" RESET search_path')
    assert len(seen) == 2
    for row in seen:
        assert row is not None and row["users"] > 0
        assert (row["path"], row["tz"], row["lock"]) == ("lms, public", "Asia/Kolkata", "5s")


async def test_a_pooler_that_drops_the_startup_options_is_refused(case: Case, bridge: Any) -> None:
    """Through a real TCP proxy that strips ``options`` from the startup packet, as a
    pooler may: a later ``ALTER ROLE ... SET`` would reach the worker's sessions."""
    params = conninfo_to_dict(case.admin_dsn)
    target = f"{params['host']}/.s.PGSQL.{params['port']}"
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_options_dropping_proxy, target)
        dsn = with_params(
            case.dsn, host="127.0.0.1", port=port, sslmode="disable", gssencmode="disable"
        )
        with pytest.raises(ConfigError) as refused:
            await _prove(dsn, bridge)
        nursery.cancel_scope.cancel()
    message = str(refused.value)
    assert message.startswith(
        "DATAPLANE_CLIENT_DB_URL's sessions do not start with the worker's settings ("
    ), message
    assert "pooler that passes options on" in message


async def _options_dropping_proxy(
    target: str, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    async def relay(source: trio.abc.Stream, sink: trio.abc.Stream) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await source.receive_some(65536):
                await sink.send_all(data)

    async def receive_exactly(stream: trio.abc.Stream, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = await stream.receive_some(n - len(data))
            if not chunk:
                raise trio.BrokenResourceError("closed mid-message")
            data += chunk
        return data

    async def serve(client: trio.SocketStream) -> None:
        async with client, await trio.open_unix_socket(target) as server:
            length = int.from_bytes(await receive_exactly(client, 4), "big")
            body = await receive_exactly(client, length - 4)
            words = body[4:].split(b"\0")  # key, value, ..., "", ""
            pairs = [
                (k, v) for k, v in zip(words[0:-2:2], words[1:-2:2], strict=True) if k != b"options"
            ]
            packed = body[:4] + b"".join(k + b"\0" + v + b"\0" for k, v in pairs) + b"\0"
            await server.send_all((len(packed) + 4).to_bytes(4, "big") + packed)
            async with trio.open_nursery() as both:
                both.start_soon(relay, client, server)
                await relay(server, client)
                both.cancel_scope.cancel()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(serve, listeners)


async def test_the_worker_process_serves_whatever_timeouts_the_role_sets_itself(
    case: Case, queue: QueueClient, queue_dsn: str, tmp_path: Path
) -> None:
    sabotage = _sabotage(_server_version(case.admin_dsn))
    case.as_role(
        *(f"ALTER ROLE {{role}} SET {k} = '{v}'" for k, v in sabotage.items()), commit=True
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATAPLANE_"))}
    env.update(
        MAESTRO_QUEUES_URL=queue_dsn,
        SURFACE_QUEUE_TYPE="surface-users",
        DATAPLANE_CLIENT_DB_URL=case.dsn,
        DATAPLANE_ALLOW_OWNER="1",  # the queue DB's superuser: the client DB is the test
    )
    worker = WorkerProcess(env, str(tmp_path / "worker.log"))
    try:
        await worker.wait_ready()
        enq = await submit(queue, "users", "list", {"limit": 3})

        async def done() -> bool:
            row = await queue.get(enq.job_id)
            return row is not None and row.status == "done"

        await wait_until(done, within=20)
        row = await queue.get(enq.job_id)
        assert row is not None and len(row.result["data"]["rows"]) == 3, row
    finally:
        worker.stop()
