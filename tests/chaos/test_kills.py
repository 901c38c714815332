"""Processes killed for real under load: workers and BFFs with SIGKILL, and the
BFF's LISTEN connection again and again; a worker killed, or stopped and resumed,
mid-job with the seed's 120 s lease, its job done by another within seconds."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import trio

from dataplane.queue import QueueClient
from tests.chaos.harness import Outcome, Stack, check_promises, drive
from tests.conftest import wait_until
from tests.helpers import WorkerProcess, submit

TARGET = 15.0  # seconds from a worker's death to its job done by another (issue 55)


def _rows(dsn: str) -> dict[str, dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        return {
            str(r[0]): {"status": r[1], "last_error": r[2], "dequeue_count": r[3]}
            for r in conn.execute(
                "SELECT id, status, last_error, dequeue_count FROM maestro_queues"
            )
        }


async def test_two_bffs_two_workers_one_of_each_killed(queue_dsn: str, tmp_path: Path) -> None:
    stack = Stack(tmp_path, queue_dsn)
    try:
        bffs = [await stack.add_bff(), await stack.add_bff()]
        workers = [await stack.add_worker(), await stack.add_worker()]
        outcomes: list[Outcome] = []

        async def load() -> None:
            outcomes.extend(
                await drive([b.base for b in bffs], 200, concurrency=16, sleep_ms=(100, 400))
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(load)
            await trio.sleep(2)  # wall-clock: kill mid-load, after 2 s of real load
            workers[0].signal(signal.SIGKILL)
            bffs[0].kill()  # Hypercorn's parent and the worker process serving
        rows = _rows(queue_dsn)
        check_promises(outcomes, rows)
        assert workers[0].proc.poll() is not None and bffs[0].proc.poll() is not None
        assert any(r["dequeue_count"] >= 2 for r in rows.values()), "no job was re-driven"
    finally:
        stack.stop()


async def test_listen_connection_killed_again_and_again(queue_dsn: str, tmp_path: Path) -> None:
    stack = Stack(tmp_path, queue_dsn)
    try:
        bff = await stack.add_bff()
        await stack.add_worker()
        outcomes: list[Outcome] = []
        kills = 0

        async def load() -> None:
            outcomes.extend(await drive([bff.base], 150, concurrency=16))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(load)
            with psycopg.connect(queue_dsn, autocommit=True) as admin:
                for _ in range(4):
                    await trio.sleep(0.5)  # wall-clock: the load runs on a while between kills

                    def kill_listener() -> bool:
                        killed = admin.execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                            " WHERE application_name = 'dataplane-bff'"
                            " AND (query LIKE 'LISTEN%%' OR query = 'SELECT 1')"
                        ).fetchall()
                        return bool(killed)

                    # Wait for the pump to be listening again, then cut it once more.
                    await wait_until(kill_listener, within=15, interval=0.1)
                    kills += 1
        check_promises(outcomes, _rows(queue_dsn))
        assert kills >= 4
        # A kill that lands while the pump is re-issuing LISTEN shows up as a failed
        # attempt ("cannot listen") rather than a reconnect: count both.
        log = bff.output()
        assert log.count("reconnected") + log.count("cannot listen") >= 2, log[-2000:]
        assert log.count("reconnected") >= 1
    finally:
        stack.stop()


async def _holder(queue: QueueClient, job_id: Any, workers: list[WorkerProcess]) -> WorkerProcess:
    """The worker process whose claim holds the job now (its id names its pid)."""
    row = await queue.get(job_id)
    assert row is not None and row.status == "in_progress" and row.locked_by
    (holder,) = [w for w in workers if f":{w.proc.pid}:" in row.locked_by]
    return holder


async def _in_progress(queue: QueueClient, job_id: Any) -> bool:
    row = await queue.get(job_id)
    return row is not None and row.status == "in_progress"


async def _done(queue: QueueClient, job_id: Any) -> bool:
    row = await queue.get(job_id)
    return row is not None and row.status == "done"


async def test_a_killed_worker_s_job_is_done_by_another_within_15_s(
    queue: QueueClient, spawn_worker: Callable[..., Any]
) -> None:
    """kill -9 of the worker running a job, with the seed's 120 s lease: the other
    worker's liveness beat finds the killed one lapsed, makes its claim claimable, and
    runs the job to the end within 15 s of the kill (before: the lease, 120 s)."""
    workers = [await spawn_worker(), await spawn_worker()]  # default lease and liveness
    enq = await submit(queue, "probe", "sleep", {"ms": 1500})
    await wait_until(lambda: _in_progress(queue, enq.job_id), within=10)
    killed = await _holder(queue, enq.job_id, workers)
    (other,) = [w for w in workers if w is not killed]
    killed.signal(signal.SIGKILL)
    at = trio.current_time()
    killed.wait(10)
    await wait_until(lambda: _done(queue, enq.job_id), within=TARGET + 5)
    took = trio.current_time() - at
    print(f"kill -9 -> the job done by the other worker in {took:.1f} s")
    row = await queue.get(enq.job_id)
    assert row is not None and row.dequeue_count == 2 and row.result["data"] == {"slept_ms": 1500}
    assert row.locked_by is not None and f":{other.proc.pid}:" in row.locked_by
    assert took < TARGET
    assert "1 running claim(s) rescued" in other.output()


async def test_a_stopped_worker_s_job_is_taken_over_and_its_return_is_fenced(
    queue: QueueClient, spawn_worker: Callable[..., Any]
) -> None:
    """SIGSTOP of the worker running a job: its liveness lapses and the other worker
    takes the job over and finishes it. SIGCONT: its completion is refused by the fence
    (the answer stays the other's), it beats again, and it serves the next job."""
    workers = [await spawn_worker(), await spawn_worker()]
    enq = await submit(queue, "probe", "sleep", {"ms": 3000})
    await wait_until(lambda: _in_progress(queue, enq.job_id), within=10)
    stopped = await _holder(queue, enq.job_id, workers)
    (other,) = [w for w in workers if w is not stopped]
    stopped.signal(signal.SIGSTOP)
    try:
        await wait_until(lambda: _done(queue, enq.job_id), within=TARGET + 10)
    finally:
        stopped.signal(signal.SIGCONT)
    taken_over = await queue.get(enq.job_id)
    assert taken_over is not None and taken_over.dequeue_count == 2
    assert taken_over.locked_by is not None and f":{other.proc.pid}:" in taken_over.locked_by
    await wait_until(lambda: "its completion fenced out" in stopped.output(), within=15)
    await wait_until(lambda: "beating again after" in stopped.output(), within=15)
    after = await queue.get(enq.job_id)
    assert after is not None
    assert (after.locked_by, after.dequeue_count, after.result) == (
        taken_over.locked_by,
        2,
        taken_over.result,
    )

    other.signal(signal.SIGTERM)  # gracefully: the resumed worker is the only one left
    assert other.wait(30) == 0
    nxt = await submit(queue, "probe", "echo", {"value": "after"})
    await wait_until(lambda: _done(queue, nxt.job_id), within=15)
    row = await queue.get(nxt.job_id)
    assert row is not None and row.locked_by is not None
    assert f":{stopped.proc.pid}:" in row.locked_by
    assert stopped.proc.poll() is None
