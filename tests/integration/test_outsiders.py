"""A role that may merely connect to the queue DB cannot steer the fleet's elections,
nor its workers' liveness.

Advisory locks need no privilege: a connect-only role used to hold
``pg_try_advisory_lock(hashtext('dataplane.maintenance'))`` (or the sampler's) and
silently stop maintenance and the depth gauges everywhere. The elections are rows of
``dataplane_elections`` now, which such a role can neither take nor hold; worker
liveness is rows of ``maestro_workers``, which it can neither keep alive nor end. The
workers' on-call lock stays an advisory lock (Postgres hands it to one waiter): a worker
that finds it held by a role not the plane's answers every notify, warns and counts it.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dataplane.db import Database, close_to_public
from dataplane.dev.embedded import free_port
from dataplane.maintenance.leader import Leader
from dataplane.maintenance.retention import RetentionConfig
from dataplane.maintenance.sampler import QueueSampler
from dataplane.maintenance.schedule import Maintenance
from dataplane.queue import QueueClient
from dataplane.queue.migrations import migrate
from dataplane.worker.claims.liveness import Liveness, Rescue
from tests.conftest import connect_only_role, wait_until
from tests.helpers import WorkerProcess, complete, liveness_lapsed, submit

OLD_LOCKS = ("dataplane.maintenance", "dataplane.queue_sampler")


@pytest.fixture
def outsider(queue_dsn: str, pg_admin_dsn: str) -> Iterator[str]:
    """The DSN of a LOGIN role with no grant but CONNECT on the queue DB."""
    with connect_only_role(queue_dsn, pg_admin_dsn) as dsn:
        yield dsn


async def test_a_connect_only_role_cannot_stop_maintenance(
    queue: QueueClient, db: Database, outsider: str
) -> None:
    enq = await submit(queue, "probe", "echo", {"value": 1})
    (job,) = await queue.claim("surface-probe", "w")
    await complete(queue, job, {"data": 1})
    with psycopg.connect(outsider, autocommit=True) as conn:
        for key in OLD_LOCKS:  # what stopped maintenance and the sampler before
            conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                "INSERT INTO dataplane_elections (name, holder, until)"
                " VALUES ('maintenance', 'outsider', now() + interval '1 day')"
            )
        result = await Maintenance(db, retention=RetentionConfig(done_seconds=0)).run_once()
        assert result is not None and result.elected and result.done_deleted == 1
        assert await queue.get(enq.job_id) is None

        leader = Leader(db, term=1.0, renew=0.1)
        sampler = QueueSampler(db, interval=0.05, types=["surface-probe"])
        leader.add(sampler.run)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leader.run)
            await wait_until(lambda: sampler.samples >= 1, within=10)
            assert leader.leading
            nursery.cancel_scope.cancel()
        assert leader.leading is False and sampler.sampling is False  # stepped down


async def test_a_connect_only_role_can_neither_keep_nor_end_a_worker_s_liveness(
    queue: QueueClient, db: Database, outsider: str
) -> None:
    """It cannot keep a dead worker's row alive (its claims held until their leases
    end), nor make a live worker's row lapse or go (its claims taken over while it runs
    them), nor rescue a claim by hand."""
    dead = Liveness(db, "dead", "surface-probe", opens=None, beat=0.05, lapse=0.3)
    live = Liveness(db, "live", "surface-probe", opens=None, beat=0.05, lapse=30)
    await dead.beat_once()
    await live.beat_once()
    for n in range(2):
        await submit(queue, "probe", "sleep", {"ms": n})
    (held_by_dead,) = await queue.claim("surface-probe", "dead")
    (held_by_live,) = await queue.claim("surface-probe", "live")
    later = "now() + interval '1 day'"
    with psycopg.connect(outsider, autocommit=True) as conn:
        for statement in (
            f"UPDATE maestro_workers SET alive_until = {later} WHERE worker_id = 'dead'",
            "INSERT INTO maestro_workers (worker_id, type, alive_until)"
            f" VALUES ('dead', 'surface-probe', {later}) ON CONFLICT (worker_id)"
            " DO UPDATE SET alive_until = excluded.alive_until",
            "UPDATE maestro_workers SET alive_until = now() - interval '1 day'"
            " WHERE worker_id = 'live'",
            "DELETE FROM maestro_workers WHERE worker_id = 'live'",
            "SELECT worker_id, opens FROM maestro_workers",
            "UPDATE maestro_queues SET lease_expires_at = now(), available_at = now()"
            " WHERE locked_by = 'live'",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)  # type: ignore[call-overload]

    await wait_until(lambda: liveness_lapsed(db, "dead"), within=5)
    assert await live.beat_once() == [Rescue("dead", "surface-probe", 1)]
    (taken,) = await queue.claim("surface-probe", "live", limit=2)  # the dead one's only
    assert taken.id == held_by_dead.id
    assert await queue.renew([held_by_live]) == {held_by_live.id}  # still the live one's


def _metric(port: int, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name)]
    return sum(values)


async def test_a_worker_answers_notifies_while_an_outsider_holds_its_call(
    queue: QueueClient, queue_dsn: str, outsider: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        "MAESTRO_QUEUES_URL": queue_dsn,
        "SURFACE_QUEUE_TYPE": "surface-probe",
        "DATAPLANE_PROBE": "1",
        "DATAPLANE_METRICS": "1",
        "DATAPLANE_METRICS_PORT": str(port),
        "DATAPLANE_METRICS_HOST": "127.0.0.1",
    }
    with psycopg.connect(outsider, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_advisory_lock(hashtext('dataplane.session_lock'),"
            " hashtext('oncall:surface-probe'))"
        )
        worker = WorkerProcess(env, str(tmp_path / "worker.log"))
        try:
            await worker.wait_ready()
            role = conninfo_to_dict(outsider)["user"]
            await wait_until(lambda: f"held by role '{role}'" in worker.output(), within=15)
            assert _metric(port, "dataplane_outsider_locks_total") >= 1
            enq = await submit(queue, "probe", "echo", {"value": 1})
            await wait_until(lambda: _done(queue, enq.job_id), within=10)
            conn.execute(
                "SELECT pg_advisory_unlock(hashtext('dataplane.session_lock'),"
                " hashtext('oncall:surface-probe'))"
            )
            await wait_until(lambda: "taken back from" in worker.output(), within=15)
        finally:
            worker.stop()


async def test_a_worker_waiting_for_its_call_survives_losing_the_wait(
    queue: QueueClient, queue_dsn: str, outsider: str, pg_admin_dsn: str, tmp_path: Path
) -> None:
    """The wait for the on-call lock runs beside the holder check in a nursery: its
    connection's loss reached the worker as an ExceptionGroup, which the retry did not
    catch, and the worker exited 1 (a Postgres restart or failover ended workers)."""
    env = {
        "MAESTRO_QUEUES_URL": queue_dsn,
        "SURFACE_QUEUE_TYPE": "surface-probe",
        "DATAPLANE_PROBE": "1",
    }
    waiting = (
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        " AND pid <> pg_backend_pid()"
    )
    with psycopg.connect(outsider, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_advisory_lock(hashtext('dataplane.session_lock'),"
            " hashtext('oncall:surface-probe'))"
        )
        worker = WorkerProcess(env, str(tmp_path / "worker.log"))
        try:
            await worker.wait_ready()
            with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
                await wait_until(lambda: bool(admin.execute(waiting).fetchall()), within=10)
                admin.execute(f"SELECT pg_terminate_backend(pid) FROM ({waiting}) AS w")
            await wait_until(lambda: "on-call lock: " in worker.output(), within=10)
            await trio.sleep(1)
            assert worker.proc.poll() is None, worker.output()[-2000:]
            enq = await submit(queue, "probe", "echo", {"value": 2})
            await wait_until(lambda: _done(queue, enq.job_id), within=10)
        finally:
            worker.stop()


async def _done(queue: QueueClient, job_id: object) -> bool:
    row = await queue.get(job_id)  # type: ignore[arg-type]
    return row is not None and row.status == "done"


async def test_migrate_warns_while_the_queue_db_is_open_to_public(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="dataplane.queue.migrations")
    await migrate(db)  # nothing pending: the check runs all the same
    assert "the queue DB is open to PUBLIC" in caplog.text
    await close_to_public(db)
    caplog.clear()
    await migrate(db)
    assert "open to PUBLIC" not in caplog.text


def test_demo_db_does_not_print_the_password_it_was_given(demo_db: tuple[str, str]) -> None:
    """compose's demo-db container logs what the command prints: the read-only DSN goes
    there without its password (the caller chose it)."""
    admin_dsn, ro_dsn = demo_db
    password = conninfo_to_dict(ro_dsn)["password"]
    name = conninfo_to_dict(admin_dsn)["dbname"]
    admin = make_conninfo(admin_dsn, dbname="postgres")
    args = ["demo-db", "--admin-dsn", admin, "--name", name, "--ro-password", password]
    done = subprocess.run(
        [sys.executable, "-m", "dataplane", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    printed = conninfo_to_dict(done.stdout.strip())
    assert printed["password"] == "***" and printed["dbname"] == name
    assert f"password={password}" not in done.stderr
