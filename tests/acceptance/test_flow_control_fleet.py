"""Flow control across a fleet: three real ``dataplane worker`` processes and a burst of
``probe.bounded`` (``max_concurrency=2``) never run more than 2 of it at once, audited
by the rows; meanwhile ``probe.echo``, of the same surface, keeps its idle latency. A
worker killed holding both slots frees them when its liveness lapses, not its leases."""

from __future__ import annotations

import signal
import statistics
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import trio

from dataplane.db import Database
from dataplane.queue import QueueClient
from tests.conftest import wait_until
from tests.helpers import WorkerProcess, submit

BURST = 300
BOUND = 2  # probe.bounded's max_concurrency
JOB_MS = 20  # each bounded job sleeps this long

# Every start and end of an attempt of probe.bounded, stamped by the statement that
# makes it (clock_timestamp(), inside the claim or the completion): a start is stamped
# after its claim counted the running rows, an end before its completion commits, so
# [start, end] lies within the time the row was running, and the claims' count of
# running rows must keep these intervals overlapping at most BOUND deep.
AUDIT = [
    "CREATE TABLE flow_audit (job_id uuid, event text, at timestamptz)",
    """CREATE FUNCTION flow_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.status = 'in_progress' THEN
            INSERT INTO flow_audit VALUES (NEW.id, 'start', clock_timestamp());
        ELSIF OLD.status = 'in_progress' THEN
            INSERT INTO flow_audit VALUES (NEW.id, 'end', clock_timestamp());
        END IF;
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER flow_audit AFTER UPDATE OF status, dequeue_count ON maestro_queues
    FOR EACH ROW WHEN (NEW.payload ->> 'operation' = 'bounded'
                       AND (OLD.status IS DISTINCT FROM NEW.status
                            OR OLD.dequeue_count IS DISTINCT FROM NEW.dequeue_count))
    EXECUTE FUNCTION flow_audit()""",
]


async def _waits_ms(db: Database, ids: list[uuid.UUID]) -> list[float]:
    """Each job's queue wait by its row: enqueue to claim, on the queue DB's clock."""
    rows = await db.fetchall(
        "SELECT extract(epoch FROM claimed_at - created_at) * 1000 AS ms FROM maestro_queues"
        " WHERE id = ANY (%(ids)s) AND status = 'done'",
        {"ids": ids},
    )
    assert len(rows) == len(ids)
    return [float(r["ms"]) for r in rows]


async def _echoes(queue: QueueClient, count: int, tag: str) -> list[uuid.UUID]:
    """``count`` echo jobs one after another, each once the last is done (idle-like)."""
    ids = []
    for i in range(count):
        job = [(await submit(queue, "probe", "echo", {"value": f"{tag}-{i}"})).job_id]
        ids += job
        await wait_until(partial(_done, queue, job), within=10, interval=0.005)
        await trio.sleep(0.05)
    return ids


async def _done(queue: QueueClient, ids: list[uuid.UUID]) -> bool:
    row = await queue.db.fetchone(
        "SELECT count(*) AS n FROM maestro_queues WHERE id = ANY (%(ids)s) AND status = 'done'",
        {"ids": ids},
    )
    return row is not None and row["n"] == len(ids)


def _max_overlap(events: list[dict[str, Any]]) -> int:
    deepest = running = 0
    for event in sorted(events, key=lambda e: (e["at"], e["event"] == "start")):
        running += 1 if event["event"] == "start" else -1
        deepest = max(deepest, running)
    return deepest


async def test_three_workers_run_a_bounded_burst_at_most_two_at_a_time(
    queue: QueueClient, spawn_worker: Callable[..., Any]
) -> None:
    for statement in AUDIT:
        await queue.db.execute(statement)
    workers: list[WorkerProcess] = [await spawn_worker() for _ in range(3)]
    with trio.fail_after(55):
        idle = await _echoes(queue, 10, "idle")
        burst = [
            (await submit(queue, "probe", "bounded", {"ms": JOB_MS, "nonce": str(i)})).job_id
            for i in range(BURST)
        ]
        during = await _echoes(queue, 15, "busy")
        drained = await _done(queue, burst)
        await wait_until(lambda: _done(queue, burst), within=45, interval=0.1)

    events = [dict(r) for r in await queue.db.fetchall("SELECT * FROM flow_audit")]
    assert sum(e["event"] == "start" for e in events) == BURST  # one attempt each
    assert sum(e["event"] == "end" for e in events) == BURST
    assert _max_overlap(events) == BOUND  # never more, and the bound was reached
    holders = await queue.db.fetchall(
        "SELECT DISTINCT locked_by FROM maestro_queues WHERE id = ANY (%(ids)s)", {"ids": burst}
    )
    assert len(holders) >= 2  # the bound is the fleet's: several workers took slots
    assert not drained  # the echoes below were measured while the burst was queued

    idle_ms, during_ms = await _waits_ms(queue.db, idle), await _waits_ms(queue.db, during)
    print(
        f"echo queue wait p50 idle {statistics.median(idle_ms):.1f} ms, during the burst "
        f"{statistics.median(during_ms):.1f} ms (max {max(during_ms):.1f} ms)"
    )
    assert statistics.median(during_ms) <= max(3 * statistics.median(idle_ms), 15)
    assert max(during_ms) < 250
    for worker in workers:
        assert "Traceback" not in worker.output()


async def _bounded_running(queue: QueueClient) -> list[str]:
    """Who holds the running (unexpired lease) attempts of probe.bounded."""
    rows = await queue.db.fetchall(
        "SELECT locked_by FROM maestro_queues WHERE status = 'in_progress'"
        " AND lease_expires_at > now() AND payload ->> 'operation' = 'bounded'"
    )
    return [r["locked_by"] for r in rows]


async def _holders_are(queue: QueueClient, pids: list[str]) -> bool:
    holders = await _bounded_running(queue)
    return len(holders) == len(pids) and all(p in h for p, h in zip(pids, holders, strict=True))


async def test_a_killed_worker_s_bounded_slots_free_within_15_s(
    queue: QueueClient, spawn_worker: Callable[..., Any]
) -> None:
    """kill -9 of the worker holding both of probe.bounded's slots, with the seed's
    120 s lease: a fresh worker claims the operation's jobs within 15 s of the kill, when
    the killed worker's liveness lapses (before: not until its leases ended, 110 s and
    more measured), and the bound still holds."""
    first = await spawn_worker()
    for i in range(4):
        await submit(queue, "probe", "bounded", {"ms": 60_000, "nonce": str(i)})
    pid = f":{first.proc.pid}:"
    await wait_until(lambda: _holders_are(queue, [pid, pid]), within=10)  # both slots taken
    first.signal(signal.SIGKILL)
    at = trio.current_time()
    first.wait(10)
    fresh = await spawn_worker()
    fresh_pid = f":{fresh.proc.pid}:"
    await wait_until(lambda: _holders_are(queue, [fresh_pid, fresh_pid]), within=20)
    took = trio.current_time() - at
    print(f"kill -9 -> probe.bounded's slots taken by a fresh worker in {took:.1f} s")
    assert took < 15
    assert len(await _bounded_running(queue)) == BOUND
    assert "2 running claim(s) rescued" in fresh.output()
