"""The plane's roles against real Postgres: each line of docs/design.md's role table.

Every group role of ``sql/roles.sql`` gets a login member; each statement a process of
that kind runs (or must never run) is tried as it, in a transaction rolled back after.
Then a BFF, a worker and capcom run as their own logins with no escape hatch, and
serve; and a runtime process refuses a superuser's or the owner's credential.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.core.errors import ConfigError
from dataplane.db import Database, DatabaseConfig, open_database
from dataplane.dev.embedded import free_port
from dataplane.queue import QueueClient
from dataplane.queue.roles import GROUPS, refuse_owner
from tests.conftest import admin_execute, wait_until
from tests.helpers import (
    JWT_SECRET,
    NOTIFY_SECRET,
    BffProcess,
    WorkerProcess,
    bearer,
    capcom_process,
    read_sse,
    submit,
    token,
)

JOB = "(SELECT id FROM maestro_queues LIMIT 1)"
CLAIM = "SELECT * FROM maestro_claim('surface-probe', 'w1', 1, 30)"
FLOW_CLAIM = (  # with flow bounds: it locks (and may create) rows of maestro_flow
    "SELECT * FROM maestro_claim('surface-probe', 'w1', 1, 30, '{\"sleep\": {\"max\": 2}}')"
)
ENQUEUE = (
    "INSERT INTO maestro_queues (type, dedupe_key, payload, max_dequeues, client)"
    " VALUES ('surface-probe', 'k-' || gen_random_uuid(), '{}', 3, 'acme')"
)
REPORT = (
    "INSERT INTO worker_runs (job_id, type, operation, outcome, wall_ms, cpu_ms, rss_bytes,"
    " queue_wait_ms, cache, coalesced, dequeue_count, worker_id, finished_at)"
    " VALUES (gen_random_uuid(), 't', 'op', 'done', 1, 1, 1, 1, 'miss', false, 1, 'w', now())"
)
PAUSED_READ = "SELECT 1 FROM maestro_paused WHERE type = 'surface-probe'"
ELECT = "INSERT INTO dataplane_elections (name, holder, until) VALUES ('x', 'h', now())"
BEAT = (  # a worker's liveness row (migration 0024)
    "INSERT INTO maestro_workers (worker_id, type, alive_until)"
    " VALUES ('w9', 'surface-probe', now() + interval '10 s')"
)
DENIED_TO_ALL = [
    "ALTER TABLE maestro_queues ADD COLUMN extra int",
    "TRUNCATE maestro_queues",
    "CREATE TABLE planted (i int)",
    "DROP FUNCTION maestro_claim(text, text, integer, double precision, jsonb)",
    "SELECT version FROM dataplane_migrations; DELETE FROM dataplane_migrations",
]

# (process, statement, allowed): the role table of docs/design.md, line by line.
CASES: list[tuple[str, str, bool]] = [
    ("bff", ENQUEUE, True),
    ("bff", "SELECT id, payload, result FROM maestro_queues", True),
    ("bff", f"UPDATE maestro_queues SET requesters = requesters + 1 WHERE id = {JOB}", True),
    ("bff", f"UPDATE maestro_queues SET status = 'cancelled' WHERE id = {JOB}", True),
    ("bff", f"UPDATE maestro_queues SET requested_by = '{{a}}' WHERE id = {JOB}", True),
    ("bff", "SELECT content_type FROM surface_result_blobs", True),
    ("bff", "SELECT version FROM dataplane_migrations", True),
    # The last withdrawal cancels, running or not, saying the requesters did (0025)...
    (
        "bff",
        "UPDATE maestro_queues SET status = 'cancelled', completed_at = now(),"
        f" cancelled_by = 'requesters', cancelled_running = true WHERE id = {JOB}",
        True,
    ),
    # ...but it never names an operator, nor touches a lease or a claim.
    ("bff", f"UPDATE maestro_queues SET cancelled_operator = 'ops' WHERE id = {JOB}", False),
    ("bff", f"UPDATE maestro_queues SET lease_expires_at = NULL WHERE id = {JOB}", False),
    ("bff", f"UPDATE maestro_queues SET dequeue_count = 0 WHERE id = {JOB}", False),
    ("worker", f"UPDATE maestro_queues SET cancelled_by = 'requesters' WHERE id = {JOB}", False),
    ("bff", "ANALYZE maestro_queues", False),
    ("bff", CLAIM, False),
    ("bff", FLOW_CLAIM, False),
    ("bff", "SELECT * FROM maestro_flow", False),
    ("bff", f"UPDATE maestro_queues SET result = '{{}}' WHERE id = {JOB}", False),
    ("bff", f"UPDATE maestro_queues SET locked_by = 'me' WHERE id = {JOB}", False),
    ("bff", "DELETE FROM maestro_queues", False),
    ("bff", "SELECT * FROM worker_runs", False),
    ("bff", REPORT, False),
    ("bff", ELECT, False),
    ("worker", CLAIM, True),
    ("worker", FLOW_CLAIM, True),
    ("worker", "DELETE FROM maestro_flow", False),
    (
        "worker",
        f"UPDATE maestro_queues SET result = '{{}}', status = 'done' WHERE id = {JOB}",
        True,
    ),
    ("worker", "DELETE FROM maestro_queues WHERE status = 'done'", True),
    ("worker", "DELETE FROM surface_result_blobs", True),
    ("worker", ELECT, True),
    ("worker", "UPDATE dataplane_elections SET until = now()", True),
    ("worker", "ANALYZE maestro_queues", True),  # the growth watch, where the leader leads
    ("worker", ENQUEUE, False),
    ("worker", f"UPDATE maestro_queues SET requesters = 9 WHERE id = {JOB}", False),
    ("worker", f"UPDATE maestro_queues SET requested_by = '{{a}}' WHERE id = {JOB}", False),
    ("worker", f"UPDATE maestro_queues SET payload = '{{}}' WHERE id = {JOB}", False),
    ("worker", "SELECT * FROM worker_runs", False),
    ("worker", REPORT, False),
    ("capcom", REPORT, True),
    ("capcom", "SELECT * FROM worker_runs", False),
    ("capcom", "SELECT id FROM maestro_queues", False),
    ("capcom", "SELECT job_id FROM surface_result_blobs", False),
    ("scaler", "SELECT maestro_queue_depth('surface-probe')", True),
    ("scaler", "SELECT id FROM maestro_queues", False),
    ("scaler", "SELECT * FROM worker_runs", False),
    ("scaler", "SELECT * FROM dataplane_elections", False),
    ("scaler", CLAIM, False),
    ("viewer", "SELECT * FROM worker_runs", True),
    (
        "viewer",
        "SELECT id, type, status, client, created_at, completed_at FROM maestro_queues",
        True,
    ),
    ("viewer", "SELECT maestro_queue_depth('surface-probe')", True),
    ("viewer", "SELECT payload FROM maestro_queues", False),
    ("viewer", "SELECT result FROM maestro_queues", False),
    ("viewer", "SELECT last_error FROM maestro_queues", False),
    ("viewer", "SELECT errors FROM maestro_queues", False),  # tracebacks: tenants' data
    ("viewer", "SELECT data FROM surface_result_blobs", False),
    ("viewer", f"UPDATE maestro_queues SET status = 'done' WHERE id = {JOB}", False),
    ("viewer", "DELETE FROM worker_runs", False),
    ("viewer", "SELECT * FROM maestro_flow", False),
    ("viewer", "SELECT type FROM maestro_paused", True),
    ("viewer", "SELECT * FROM dataplane_audit", False),
    ("viewer", "SELECT * FROM dataplane_overview", True),
    ("operator", "SELECT * FROM dataplane_overview", True),
    ("bff", "SELECT * FROM dataplane_overview", False),
    ("worker", "SELECT * FROM dataplane_overview", False),
    ("operator", "SELECT payload, result, last_error FROM maestro_queues", True),
    ("operator", "SELECT errors FROM maestro_queues", True),
    ("operator", f"UPDATE maestro_queues SET errors = NULL WHERE id = {JOB}", False),
    ("worker", f"UPDATE maestro_queues SET errors = '[]' WHERE id = {JOB}", True),
    ("bff", f"UPDATE maestro_queues SET errors = '[]' WHERE id = {JOB}", False),
    ("operator", "SELECT * FROM worker_runs", True),
    ("operator", "SELECT * FROM dataplane_audit", True),
    (
        "operator",
        "INSERT INTO dataplane_audit (actor, via, action, target, rows)"
        " VALUES ('a', 'cli', 'retry', '{}', 0)",
        True,
    ),
    ("operator", f"SELECT id FROM maestro_queues WHERE id = {JOB} FOR UPDATE", True),
    (
        "operator",
        "UPDATE maestro_queues SET status = 'cancelled', completed_at = now(),"
        " lease_expires_at = NULL, cancelled_by = 'operator', cancelled_operator = 'ops',"
        f" cancelled_running = true WHERE id = {JOB}",
        True,
    ),
    ("operator", f"UPDATE maestro_queues SET result = '{{}}' WHERE id = {JOB}", False),
    ("operator", f"UPDATE maestro_queues SET payload = '{{}}' WHERE id = {JOB}", False),
    ("operator", ENQUEUE, False),
    ("operator", "UPDATE dataplane_audit SET rows = 9", False),
    ("operator", "DELETE FROM dataplane_audit", False),
    ("operator", "SELECT data FROM surface_result_blobs", False),
    ("operator", CLAIM, False),
    ("operator", "SELECT * FROM maestro_flow", False),
    ("worker", "SELECT * FROM dataplane_audit", False),
    ("bff", "SELECT * FROM dataplane_audit", False),
    # Operators' actions (migration 0018): bulk retry and discard, pause and resume.
    ("worker", "SELECT type FROM maestro_paused", True),  # the claim reads it
    ("worker", "INSERT INTO maestro_paused (type, paused_by) VALUES ('surface-x', 'w')", False),
    ("worker", "DELETE FROM maestro_paused", False),
    ("bff", "SELECT type FROM maestro_paused", False),
    ("bff", "INSERT INTO maestro_paused (type, paused_by) VALUES ('surface-x', 'b')", False),
    ("viewer", "DELETE FROM maestro_paused", False),
    ("operator", PAUSED_READ, True),
    (
        "operator",
        "UPDATE maestro_queues SET status = 'pending', dequeue_count = 0, available_at = now(),"
        " locked_by = NULL, lease_expires_at = NULL, completed_at = NULL, claimed_at = NULL,"
        f" progress = NULL WHERE id = {JOB}",
        True,
    ),
    ("operator", f"UPDATE maestro_queues SET result = '{{}}' WHERE id = {JOB}", False),
    ("operator", f"UPDATE maestro_queues SET payload = '{{}}' WHERE id = {JOB}", False),
    ("operator", f"UPDATE maestro_queues SET last_error = 'x' WHERE id = {JOB}", False),
    ("operator", f"UPDATE maestro_queues SET requesters = 9 WHERE id = {JOB}", False),
    ("operator", ENQUEUE, False),
    ("operator", "DELETE FROM maestro_queues WHERE status = 'poison'", True),
    ("operator", "DELETE FROM surface_result_blobs WHERE job_id = gen_random_uuid()", True),
    ("operator", "SELECT id, job_id FROM surface_result_blobs", True),
    (
        "operator",
        "INSERT INTO surface_result_blobs (job_id, content_type, data, size,"
        " expires_at) VALUES (gen_random_uuid(), 't', 'x', 1, now())",
        False,
    ),
    (
        "operator",
        "INSERT INTO maestro_paused (type, paused_by) VALUES ('surface-x', 'o')"
        " ON CONFLICT (type) DO NOTHING",
        True,
    ),
    ("operator", "DELETE FROM maestro_paused WHERE type = 'surface-x'", True),
    ("operator", "UPDATE maestro_paused SET paused_by = 'someone else'", False),
    (
        "operator",
        "INSERT INTO maestro_paused (type, paused_at, paused_by)"
        " VALUES ('surface-x', now() - interval '1 day', 'o')",
        False,
    ),
    ("operator", "UPDATE maestro_flow SET type = type", False),
    # Worker liveness (migration 0024): only workers write it; operators read it.
    ("worker", BEAT, True),
    ("worker", "UPDATE maestro_workers SET alive_until = now()", True),
    ("worker", "DELETE FROM maestro_workers", True),
    ("operator", "SELECT worker_id, type, opens, alive_until FROM maestro_workers", True),
    ("operator", BEAT, False),
    ("operator", "UPDATE maestro_workers SET alive_until = now()", False),
    ("operator", "DELETE FROM maestro_workers", False),
    ("bff", "SELECT worker_id FROM maestro_workers", False),
    ("bff", BEAT, False),
    ("capcom", BEAT, False),
    ("scaler", "SELECT worker_id FROM maestro_workers", False),
    ("viewer", "SELECT worker_id FROM maestro_workers", False),
    ("viewer", "DELETE FROM maestro_workers", False),
]
CASES += [(process, stmt, False) for process in GROUPS for stmt in DENIED_TO_ALL]


@pytest.fixture
def logins(queue_dsn: str, pg_admin_dsn: str) -> Iterator[dict[str, str]]:
    """A DSN per process kind: a LOGIN role that is a member of that kind's group only."""
    suffix = secrets.token_hex(4)
    dsns = {}
    statements = []
    for process, group in GROUPS.items():
        name, password = f"{process}_{suffix}", secrets.token_urlsafe(16)
        statements.append(f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE {group}")
        dsns[process] = make_conninfo(queue_dsn, user=name, password=password)
    admin_execute(pg_admin_dsn, *statements)
    try:
        yield dsns
    finally:
        names = [conninfo_to_dict(dsn)["user"] for dsn in dsns.values()]
        listed = ", ".join(f"'{n}'" for n in names)
        admin_execute(
            pg_admin_dsn,
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename IN ({listed})",
            *(f"DROP ROLE {n}" for n in names),
        )


def _note_denied(denied: list[str], diag: psycopg.errors.Diagnostic) -> None:
    if "permission denied" in (diag.message_primary or ""):
        denied.append(diag.message_primary or "")


async def test_each_role_may_do_what_its_process_does_and_nothing_else(
    queue: QueueClient, logins: dict[str, str]
) -> None:
    await submit(queue, "probe", "echo", {"value": 1})
    wrong = []
    for process, statement, allowed in CASES:
        with psycopg.connect(logins[process]) as conn:
            # A refused ANALYZE is a warning, not an error: "permission denied to analyze".
            denied: list[str] = []
            conn.add_notice_handler(partial(_note_denied, denied))
            try:
                conn.execute(statement)
                granted = not denied
            except psycopg.errors.InsufficientPrivilege:
                granted = False
            conn.rollback()
        if granted != allowed:
            wrong.append(f"{process}: {statement} -> {'allowed' if granted else 'refused'}")
    assert not wrong, "\n".join(wrong)


async def test_the_operator_role_cancels_a_running_job_audited(
    db: Database, queue: QueueClient, logins: dict[str, str]
) -> None:
    from dataplane.operator import Operator, cancel

    job = (await submit(queue, "probe", "sleep", {"ms": 1})).job_id
    await queue.claim("surface-probe", "w1")
    async with open_database(DatabaseConfig(logins["operator"], pool_size=1), loop=db.loop) as ops:
        outcome = await cancel(ops, Operator("ops@acme.example", "console"), job)
    assert outcome.status_before == "in_progress"
    assert (await queue.get(job)).status == "cancelled"  # type: ignore[union-attr]


async def test_the_bff_role_cancels_a_running_job_its_last_requester_withdraws(
    db: Database, queue: QueueClient, logins: dict[str, str]
) -> None:
    job = (await queue.enqueue("surface-probe", "k", {}, requester="alice")).job_id
    await queue.claim("surface-probe", "w1")
    async with open_database(DatabaseConfig(logins["bff"], pool_size=1), loop=db.loop) as bff:
        outcome = await QueueClient(bff).cancel(job, "alice", "surface-probe")
    assert (outcome.status, outcome.running) == ("cancelled", True)
    row = await queue.get(job)
    assert row is not None and row.status == "cancelled" and row.locked_by == "w1"


async def test_a_runtime_process_refuses_a_superuser_or_the_owner(
    db: Database,
    queue_dsn: str,
    pg_admin_dsn: str,
    logins: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATAPLANE_ALLOW_OWNER", "0")
    with pytest.raises(ConfigError, match="a superuser"):
        await refuse_owner(db, "worker")
    owner = f"owner_{secrets.token_hex(4)}"
    admin_execute(pg_admin_dsn, f"CREATE ROLE {owner} LOGIN PASSWORD 'pw-{owner}'")
    try:
        with psycopg.connect(queue_dsn, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE maestro_queues OWNER TO {owner}")
        dsn = make_conninfo(queue_dsn, user=owner, password=f"pw-{owner}")
        async with open_database(DatabaseConfig(dsn, pool_size=1), loop=db.loop) as as_owner:
            with pytest.raises(ConfigError, match="the schema's owner"):
                await refuse_owner(as_owner, "bff")
        for process in ("bff", "worker", "capcom"):
            cfg = DatabaseConfig(logins[process], pool_size=1)
            async with open_database(cfg, loop=db.loop) as own:
                await refuse_owner(own, process)  # its own role: no refusal
        monkeypatch.setenv("DATAPLANE_ALLOW_OWNER", "1")
        await refuse_owner(db, "worker")  # the development escape hatch
    finally:
        with psycopg.connect(queue_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE maestro_queues OWNER TO CURRENT_USER")
        admin_execute(pg_admin_dsn, f"DROP ROLE {owner}")


async def test_a_worker_given_the_superuser_does_not_boot(queue_dsn: str, tmp_path: Path) -> None:
    env = {
        "MAESTRO_QUEUES_URL": queue_dsn,
        "SURFACE_QUEUE_TYPE": "surface-probe",
        "DATAPLANE_PROBE": "1",
        "DATAPLANE_ALLOW_OWNER": "0",
    }
    worker = WorkerProcess(env, str(tmp_path / "worker.log"))
    try:
        assert worker.wait(within=60) != 0
        assert "a superuser" in worker.output() and " serving " not in worker.output()
    finally:
        worker.stop()


async def test_the_fleet_serves_with_a_role_per_process(
    db: Database, logins: dict[str, str], tmp_path: Path
) -> None:
    """A BFF, a worker and capcom, each as its own login and none allowed the owner's:
    a request is answered, and capcom stores the worker's report; a failed attempt's
    record is written by the worker's fail statement."""
    capcom_token = secrets.token_urlsafe(24)
    common = {"DATAPLANE_ALLOW_OWNER": "0", "DATAPLANE_PROBE": "1"}
    capcom = capcom_process(
        {**common, "DATAPLANE_CAPCOM_DB_URL": logins["capcom"]},
        str(tmp_path / "capcom.log"),
        capcom_token,
    )
    worker = bff = None
    try:
        await capcom.wait_ready()
        worker = WorkerProcess(
            {
                **common,
                "MAESTRO_QUEUES_URL": logins["worker"],
                "SURFACE_QUEUE_TYPE": "surface-probe",
                "DATAPLANE_NOTIFY_SECRET": NOTIFY_SECRET,
                "DATAPLANE_CAPCOM_URL": capcom.base,
                "DATAPLANE_CAPCOM_TOKEN": capcom_token,
                "DATAPLANE_FAIL_BACKOFF_SECONDS": "0",
            },
            str(tmp_path / "worker.log"),
        )
        bff = BffProcess(
            {
                **common,
                "MAESTRO_QUEUES_URL": logins["bff"],
                "DATAPLANE_JWT_SECRET": JWT_SECRET,
                "DATAPLANE_NOTIFY_SECRET": NOTIFY_SECRET,
            },
            str(tmp_path / "bff.log"),
            port=free_port(),
            command=("-m", "dataplane", "bff"),
        )
        await worker.wait_ready()
        await bff.wait_ready()
        headers = bearer(token("acme", staff=True))
        async with httpx.AsyncClient(base_url=bff.base, timeout=30) as http:
            resp = await http.post(
                "/api/probe/q", json={"operation": "echo", "params": {"value": 7}}, headers=headers
            )
            assert resp.status_code == 202, resp.text
            status, _, events = await read_sse(http, resp.json()["streamUrl"])
            assert status == 200 and events[-1].name == "done", events
            assert events[-1].json["result"] == {"echo": 7, "client": "acme"}
            failing = await http.post(
                "/api/probe/q", json={"operation": "fail", "params": {"times": 1}}, headers=headers
            )
            _, _, events = await read_sse(http, failing.json()["streamUrl"])
        assert events[-1].name == "done", events  # the second attempt succeeded
        row = await db.fetchone(
            "SELECT errors FROM maestro_queues WHERE id = %(id)s", {"id": failing.json()["jobId"]}
        )
        assert row is not None and [e["attempt"] for e in row["errors"]] == [1]
        reports = "SELECT count(*) AS n FROM worker_runs"
        await wait_until(lambda: _count(db, reports), within=15)
        for proc in (bff, worker, capcom):
            assert "DATAPLANE_ALLOW_OWNER" not in proc.output()
    finally:
        for proc in (bff, worker):
            if proc is not None:
                proc.stop()
        capcom.stop()


async def _count(db: Database, statement: str) -> bool:
    row = await db.fetchone(statement)  # type: ignore[arg-type]
    return row is not None and int(row["n"]) > 0
