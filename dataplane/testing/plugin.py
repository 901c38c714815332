"""The pytest plugin of :mod:`dataplane.testing` (entry point ``pytest11``: loaded in
every pytest run where ``dataplane`` is installed; ``-p dataplane.testing`` loads it
where it is not, ``-p no:dataplane.testing`` leaves it out).

Fixtures, each requested only by the tests that use it (nothing starts otherwise):

* ``dataplane_databases`` (session): the PostgreSQL server and its databases;
* ``dataplane_queue_dsn``: a fresh, migrated queue DB for this test;
* ``dataplane_surfaces``: the surfaces under test (override it, or mark the test
  ``@pytest.mark.dataplane(surfaces=...)``); default: every installed surface;
* ``dataplane_client_db_sql``: SQL building the client DB (override it, or the
  marker's ``client_db_sql=``); default: the surfaces' package builds its own;
* ``dataplane_client_dsn``: the read-only DSN of that client DB, or None;
* ``dataplane_kit``: the test's workers and queue (:class:`~dataplane.testing.Kit`);
* ``run_operation``: ``await run_operation(surface, operation, params, auth=...)``;
* ``plane``: a real BFF and the workers (:class:`~dataplane.testing.Plane`).

The async fixtures need pytest-trio (``trio_mode = true``, or ``@pytest.mark.trio``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from dataplane.compat import install_process
from dataplane.db import open_bridge
from dataplane.testing.answers import Answer
from dataplane.testing.databases import Databases, open_server
from dataplane.testing.kit import Kit, open_kit
from dataplane.testing.plane import Plane, open_plane
from dataplane.testing.surfaces import SurfacesSpec, UnderTest, under_test

MARKER = "dataplane"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(surfaces=..., client_db_sql=...): what dataplane.testing's fixtures "
        "serve this test (instead of overriding dataplane_surfaces / dataplane_client_db_sql)",
    )


def _marked(request: pytest.FixtureRequest, name: str) -> tuple[bool, Any]:
    marker = request.node.get_closest_marker(MARKER)
    if marker is None or name not in marker.kwargs:
        return False, None
    return True, marker.kwargs[name]


@pytest.fixture(scope="session")
def dataplane_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Databases]:
    """The session's server (``DATAPLANE_TEST_DSN``, or an embedded one) and databases."""
    install_process()  # the plane's own connections: as every entry point installs them
    with open_server(tmp_path_factory.mktemp("dataplane-pg")) as admin_dsn:
        databases = Databases(admin_dsn)
        try:
            yield databases
        finally:
            databases.close()


@pytest.fixture
def dataplane_queue_dsn(dataplane_databases: Databases) -> Iterator[str]:
    """A superuser's DSN of a fresh copy of the migrated queue DB, dropped after the test."""
    name = dataplane_databases.create(dataplane_databases.template())
    yield dataplane_databases.dsn(name)
    dataplane_databases.drop(name)


@pytest.fixture
def dataplane_surfaces(request: pytest.FixtureRequest) -> SurfacesSpec:
    """The surfaces under test: a Surface, a SurfacePackage, ``"module:attribute"``, a
    list of them, or None (every installed surface)."""
    found, value = _marked(request, "surfaces")
    return value if found else None


@pytest.fixture
def dataplane_client_db_sql(request: pytest.FixtureRequest) -> str | None:
    """SQL that builds the client DB (run once a session), or None."""
    found, value = _marked(request, "client_db_sql")
    return value if found else None


@pytest.fixture
def dataplane_under_test(dataplane_surfaces: SurfacesSpec) -> UnderTest:
    return under_test(dataplane_surfaces)


@pytest.fixture
def dataplane_client_dsn(
    dataplane_databases: Databases,
    dataplane_under_test: UnderTest,
    dataplane_client_db_sql: str | None,
) -> str | None:
    """The read-only DSN of the client DB: from ``dataplane_client_db_sql``, else from
    the first builder of the surfaces' packages; None when no surface needs one."""
    if dataplane_client_db_sql is not None:
        return dataplane_databases.client_from_sql(dataplane_client_db_sql)
    if not dataplane_under_test.needs_client_db or not dataplane_under_test.builders:
        return None
    return dataplane_databases.client_from_builder(dataplane_under_test.builders[0])


@pytest.fixture
async def dataplane_kit(
    dataplane_queue_dsn: str, dataplane_under_test: UnderTest, dataplane_client_dsn: str | None
) -> AsyncIterator[Kit]:
    async with (
        open_bridge() as loop,
        open_kit(loop, dataplane_queue_dsn, dataplane_under_test, dataplane_client_dsn) as kit,
    ):
        yield kit


@pytest.fixture
def run_operation(dataplane_kit: Kit) -> Callable[..., Awaitable[Answer]]:
    """``await run_operation(surface, operation, params=None, *, auth=None)``: the
    :class:`~dataplane.testing.Answer` a browser would get, through the real worker."""
    return dataplane_kit.run_operation


@pytest.fixture
async def plane(
    dataplane_kit: Kit, dataplane_queue_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Plane]:
    """A real BFF and the kit's workers: ``await plane.query(surface, operation, params,
    auth=...)``, ``plane.enqueued(...)``, ``plane.executions(...)``, ``plane.http``."""
    async with open_plane(dataplane_kit, dataplane_queue_dsn, monkeypatch) as running:
        yield running
