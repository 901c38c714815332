"""``dataplane worker`` as a real process: the read-only credential, SIGTERM."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from dataplane.core.errors import DatabaseError
from dataplane.db import Database, DatabaseConfig, open_database
from dataplane.queue import QueueClient
from tests.acceptance.test_worker_process import _in_progress, _status, probe_env
from tests.conftest import wait_until
from tests.helpers import WorkerProcess, submit


async def test_sigterm_finishes_in_flight_work_and_exits_zero(
    queue: QueueClient, queue_dsn: str, tmp_path: Path
) -> None:
    worker = WorkerProcess(probe_env(queue_dsn), str(tmp_path / "w.log"))
    try:
        await worker.wait_ready()
        enq = await submit(queue, "probe", "sleep", {"ms": 800})
        await wait_until(lambda: _in_progress(queue, enq.job_id), within=10)
        worker.signal(signal.SIGTERM)
        # It says it is stopping (the claimer is stopped by then) while its job still runs:
        # a job enqueued now, its wake-up heard by a live worker, must stay pending.
        await wait_until(lambda: " stopping: " in worker.output(), within=10)
        late = await submit(queue, "probe", "echo", {"value": "late"})
        assert worker.wait(20) == 0, worker.output()
        row = await queue.get(enq.job_id)
        assert row is not None and row.status == "done" and row.dequeue_count == 1
        # It stopped claiming: the job enqueued after the signal stays pending.
        assert await _status(queue, late.job_id) == "pending"
    finally:
        worker.stop()


async def test_the_read_only_credential_cannot_write(demo_db: tuple[str, str], bridge: Any) -> None:
    config = DatabaseConfig(demo_db[1], pool_size=1, read_only=True)
    async with open_database(config, loop=bridge) as ro:
        await _assert_refused(ro, "INSERT INTO lms.clients (id, name) VALUES ('evil', 'Evil')")
        await _assert_refused(ro, "UPDATE lms.users SET active = false")
        await _assert_refused(ro, "DELETE FROM lms.enrollments")
        await _assert_refused(ro, "TRUNCATE lms.invoices")
        await _assert_refused(ro, "CREATE TABLE lms.evil (x int)")
        await _assert_refused(ro, "CREATE TABLE public.evil (x int)")
        await _assert_refused(ro, "CREATE TEMP TABLE evil (x int)")
        # Even when it asks for a read-write transaction, privileges still refuse.
        await _assert_refused(
            ro, "BEGIN READ WRITE; INSERT INTO lms.clients (id, name) VALUES ('e', 'E'); COMMIT"
        )
        row = await ro.fetchone("SELECT count(*) AS n FROM lms.clients")
        assert row is not None and row["n"] == 4


async def _assert_refused(db: Database, statement: str) -> None:
    with pytest.raises(DatabaseError) as info:
        await db.execute(statement)
    assert info.value.sqlstate in ("25006", "42501"), info.value
    await db.execute("ROLLBACK")  # leave no aborted transaction behind
