"""Queue failure paths on a real Postgres: client-DB errors fail the attempt, a lapsed
last claim poisons at claim time, maintenance runs however busy the worker is and in
one process at a time, and claims are fair across clients."""

from __future__ import annotations

import inspect
import logging
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trio
from dataplane_lms import users

from dataplane.db import Database, DatabaseConfig, Notification, open_database, with_params
from dataplane.maintenance.retention import RetentionConfig
from dataplane.maintenance.schedule import Maintenance
from dataplane.operator import jobs
from dataplane.operator.audit import Operator
from dataplane.queue import QueueClient, done_channel
from dataplane.queue.envelope import Auth
from dataplane.surfaces.manifest import Operation, OperationContext, surface_of
from telemetry.failures import AttemptFailure
from tests.conftest import wait_until
from tests.helpers import STAFF, complete, envelope, submit
from tests.integration.test_worker import running_worker


@asynccontextmanager
async def role_without_users(admin_dsn: str) -> AsyncIterator[str]:
    """A read-only credential on the demo DB that may not read ``lms.users``."""
    role = f"ro_nousers_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
        conn.execute(f"GRANT USAGE ON SCHEMA lms TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA lms TO {role}")
        conn.execute(f"REVOKE SELECT ON lms.users FROM {role}")
    try:
        yield with_params(admin_dsn, user=role, password="pw")
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


async def test_a_client_db_error_fails_the_attempt_then_poisons(
    queue: QueueClient, db: Database, demo_db: tuple[str, str]
) -> None:
    async with (
        role_without_users(demo_db[0]) as dsn,
        open_database(DatabaseConfig(dsn, pool_size=2, read_only=True)) as client_db,
    ):
        listener = db.listener([done_channel("surface-users")])
        async with trio.open_nursery() as nursery:
            await nursery.start(listener.run)
            async with running_worker(queue, users.SURFACE, client_db, fail_backoff_seconds=0) as (
                worker,
                _,
            ):
                enq = await submit(queue, "users", "list", {"limit": 5}, max_dequeues=2)
                with trio.fail_after(10):
                    event = await listener.events.receive()
                await wait_until(lambda: worker.statistics().poisoned == 1, within=5)
            nursery.cancel_scope.cancel()
    assert event == Notification(done_channel("surface-users"), str(enq.job_id))
    row = await queue.get(enq.job_id)
    assert row is not None and row.status == "poison" and row.dequeue_count == 2
    assert "DatabaseError" in (row.last_error or "")
    assert "permission denied" in (row.last_error or "")
    assert "pw" not in (row.last_error or "")  # no credentials in the error text
    stats = worker.statistics()
    assert stats.failed == 1 and stats.poisoned == 1


def _lookup(table: dict[str, Any], key: str) -> Any:
    return table[key]  # KeyError: the innermost frame of the surface's code


async def _boom(ctx: OperationContext) -> Any:
    return _lookup({}, ctx.params.get("key", "oops"))


async def _hang(ctx: OperationContext) -> Any:
    await trio.sleep_forever()  # past its 0.2 s timeout: cancelled here


def _ping(n: int) -> Any:
    return _pong(n - 1) if n else {}["deep"]


def _pong(n: int) -> Any:
    return _ping(n - 1)  # alternating frames: nothing for the formatter to fold


async def _deep(ctx: OperationContext) -> Any:
    return _ping(400)


async def _unstorable(ctx: OperationContext) -> Any:
    raise ValueError("a NUL \x00 and a lone surrogate \ud800")  # neither fits in jsonb


ANY_PARAMS = {"type": "object"}
OOPS = surface_of(
    Operation("boom", 1, ANY_PARAMS, _boom),
    Operation("hang", 1, ANY_PARAMS, _hang, timeout_seconds=0.2),
    Operation("deep", 1, ANY_PARAMS, _deep),
    Operation("unstorable", 1, ANY_PARAMS, _unstorable),
    id="oops",
    needs_client_db=False,
)
HERE = Path(__file__).resolve()
SHOWN = HERE.relative_to(HERE.parents[2]).as_posix()  # tests/integration/test_failure_paths.py


def _line_of(function: Any, text: str) -> int:
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


async def test_every_failed_attempt_keeps_its_record_and_logs_its_traceback_once(
    queue: QueueClient, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler of a surface of its own (this file) raises: each attempt's record is on
    the row (attempt, worker, qualified type, message, the bounded traceback with the
    surface's frames marked, the innermost surface frame, when); each attempt is logged
    once, at ERROR, with its traceback. A timeout's frame is where the handler was when
    it was cancelled; a deep traceback keeps its innermost frames within 16 KiB. An
    operator's retry keeps the records: attempts count from 1 again, later in time. A
    message Postgres cannot store as it is (a NUL, a lone surrogate) is kept escaped."""
    caplog.set_level(logging.INFO)
    async with running_worker(queue, OOPS, fail_backoff_seconds=0) as (worker, _):
        boom = await submit(queue, "oops", "boom", {}, max_dequeues=2)
        hang = await submit(queue, "oops", "hang", {}, max_dequeues=1)
        deep = await submit(queue, "oops", "deep", {}, max_dequeues=1)
        odd = await submit(queue, "oops", "unstorable", {}, max_dequeues=1)
        await wait_until(lambda: worker.statistics().poisoned == 4, within=15)
        await jobs.retry(db, Operator("ops", "cli"), jobs.JobFilter(job_id=boom.job_id))
        await wait_until(lambda: worker.statistics().poisoned == 5, within=15)

    records = await _records(db, boom.job_id)
    assert [r.attempt for r in records] == [1, 2, 1, 2]  # the retry's start again
    stamps = [r.at for r in records]
    assert all(stamps) and stamps == sorted(stamps)  # type: ignore[type-var]
    frame = f"{SHOWN}:{_line_of(_lookup, 'table[key]')} in _lookup"
    for record in records:
        assert (record.worker, record.type, record.message) == ("w-test", "KeyError", "'oops'")
        assert record.frame == frame
        lines = record.traceback.splitlines()
        assert lines[0] == "Traceback (most recent call last):" and lines[-1] == "KeyError: 'oops'"
        marked = [line for line in lines if line.startswith("> File")]
        assert marked == [
            f'> File "{HERE}", line {_line_of(_boom, "_lookup(")}, in _boom',
            f'> File "{HERE}", line {_line_of(_lookup, "table[key]")}, in _lookup',
        ]
        assert any(line.startswith('  File "') and "executor.py" in line for line in lines)

    (timeout,) = await _records(db, hang.job_id)
    assert timeout.type == "dataplane.worker.pipeline.handler.HandlerTimeout"
    assert timeout.message == "TIMEOUT: hang ran past its 0.2s timeout; cancelled"
    assert timeout.frame == f"{SHOWN}:{_line_of(_hang, 'sleep_forever')} in _hang"

    (deep_one,) = await _records(db, deep.job_id)
    assert len(deep_one.traceback.encode()) <= 16 * 1024
    first, *_, last = deep_one.traceback.splitlines()
    assert re.fullmatch(r"\[\d+ outer frame\(s\) cut: the traceback is over 16 KiB, .*\]", first)
    assert last == "KeyError: 'deep'"
    assert deep_one.frame == f"{SHOWN}:{_line_of(_ping, 'deep')} in _ping"

    # Escaped, not lost (before, job_fail refused the text and the job went round).
    (unstorable,) = await _records(db, odd.job_id)
    assert unstorable.message == "a NUL \\x00 and a lone surrogate \\ud800"

    logged = [r for r in caplog.records if r.name == "dataplane.worker.failures"]
    assert len(logged) == 4 + 1 + 1 + 1  # once per attempt, no more
    for record in logged:
        assert record.levelno == logging.ERROR
    first_boom, *_ = [r for r in logged if r.__dict__["job_id"] == str(boom.job_id)]
    fields = first_boom.__dict__
    assert fields["attempt"] == 1 and fields["error_type"] == "KeyError"
    assert (fields["surface"], fields["operation"]) == ("oops", "boom")
    assert fields["traceback"] == records[0].traceback
    assert first_boom.getMessage() == (
        f"job {boom.job_id} (oops.boom, attempt 1/2) failed at {frame}: KeyError: 'oops'"
    )


async def _records(db: Database, job_id: uuid.UUID) -> list[AttemptFailure]:
    row = await db.fetchone("SELECT errors FROM maestro_queues WHERE id = %(id)s", {"id": job_id})
    assert row is not None and row["errors"] is not None
    return [r for r in map(AttemptFailure.from_json, row["errors"]) if r is not None]


async def test_a_lapsed_last_claim_becomes_poison_at_the_next_claim(
    queue: QueueClient, db: Database
) -> None:
    enq = await submit(queue, "probe", "echo", {"value": 1}, max_dequeues=1)
    (held,) = await queue.claim("surface-probe", "dies", lease_seconds=0.05)
    listener = db.listener([done_channel("surface-probe")])
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        await trio.sleep(0.1)  # wall clock: the lease must lapse in Postgres' time
        assert await queue.claim("surface-probe", "rescuer") == []
        with trio.fail_after(5):
            event = await listener.events.receive()
        nursery.cancel_scope.cancel()
    assert event.payload == str(held.id)
    row = await queue.get(enq.job_id)
    assert row is not None and row.status == "poison" and row.completed_at is not None


async def _done_rows(db: Database) -> int:
    row = await db.fetchone("SELECT count(*) AS n FROM maestro_queues WHERE status = 'done'")
    assert row is not None
    return int(row["n"])


async def test_a_worker_that_is_never_idle_still_reaps(queue: QueueClient, db: Database) -> None:
    retention = RetentionConfig(done_seconds=0)
    async with running_worker(
        queue, maintenance_seconds=0.2, retention=retention, shutdown_grace_seconds=0
    ) as (worker, _):
        for i in range(3):
            await submit(queue, "probe", "echo", {"value": i})
        await wait_until(lambda: worker.statistics().done == 3, within=10)
        busy = await submit(queue, "probe", "sleep", {"ms": 30_000})
        await wait_until(lambda: worker.statistics().in_flight == 1, within=10)
        await wait_until(lambda: _done_rows_is_zero(db), within=10)
        await wait_until(lambda: worker.maintenance.passes >= 1, within=5)
        assert worker.statistics().in_flight == 1  # busy all along
        row = await queue.get(busy.job_id)
        assert row is not None and row.status == "in_progress"


async def _done_rows_is_zero(db: Database) -> bool:
    return await _done_rows(db) == 0


async def test_maintenance_runs_in_one_process_at_a_time(
    queue: QueueClient, db: Database, queue_dsn: str
) -> None:
    enq = await submit(queue, "probe", "echo", {"value": 1})
    (job,) = await queue.claim("surface-probe", "w")
    await complete(queue, job, {"data": 1})
    first = Maintenance(db, retention=RetentionConfig(done_seconds=0))
    second = Maintenance(db, retention=RetentionConfig(done_seconds=0))
    # Another process holds the election: neither pass runs.
    with psycopg.connect(queue_dsn, autocommit=True) as other:
        take = "INSERT INTO dataplane_elections (name, holder, until)"
        other.execute(take + " VALUES ('maintenance', 'other', now() + interval '1 hour')")
        skipped = [await first.run_once(), await second.run_once()]
        assert all(r is not None and not r.elected for r in skipped)
        assert await queue.get(enq.job_id) is not None
        # The other process steps down.
        other.execute("UPDATE dataplane_elections SET until = now() WHERE name = 'maintenance'")
    # The next turn is elected and reaps.
    result = await first.run_once()
    assert result is not None and result.elected and result.done_deleted == 1
    assert await queue.get(enq.job_id) is None
    assert (first.passes, first.skipped, second.passes, second.skipped) == (1, 1, 0, 1)


async def test_claims_take_each_clients_oldest_job_in_turn(queue: QueueClient) -> None:
    flood = [await submit(queue, "probe", "echo", {"value": i}, STAFF) for i in range(30)]
    other_auth = Auth(client="globex", user_id="9", actor_email="", staff=False, branches=("g",))
    late = await submit(queue, "probe", "echo", {"value": "late"}, other_auth)
    first = await queue.claim("surface-probe", "w", limit=1)
    second = await queue.claim("surface-probe", "w", limit=1)
    claimed = [j.id for j in first + second]
    assert late.job_id in claimed  # not behind the 30 older jobs of the flooding client
    assert flood[0].job_id in claimed  # and the flood's oldest goes first
    batch = await queue.claim("surface-probe", "w", limit=5)
    assert [j.id for j in batch] == [e.job_id for e in flood[1:6]]  # FIFO within a client


async def test_the_cancel_statement_counts_requesters(queue: QueueClient) -> None:
    env = envelope("probe", "echo", {"value": "c"})
    first = await queue.enqueue("surface-probe", env.dedupe_key, env.to_json())
    again = await queue.enqueue("surface-probe", env.dedupe_key, env.to_json())
    assert again.coalesced and again.job_id == first.job_id
    assert (await queue.cancel(first.job_id, "alice", "surface-probe")).status == "pending"
    again_alice = await queue.cancel(first.job_id, "alice", "surface-probe")  # withdraws once
    assert (again_alice.status, again_alice.requesters) == ("withdrawn", 1)
    assert (await queue.cancel(first.job_id, "bob", "surface-probe")).status == "cancelled"
    assert (await queue.cancel(first.job_id, "carol", "surface-probe")).status is None
    fresh = await queue.enqueue("surface-probe", env.dedupe_key, env.to_json())
    assert fresh.job_id != first.job_id and not fresh.coalesced
