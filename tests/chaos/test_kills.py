"""Processes killed for real under load: workers and BFFs with SIGKILL, and the
BFF's LISTEN connection again and again."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psycopg
import trio

from tests.chaos.harness import Outcome, Stack, check_promises, drive
from tests.conftest import wait_until


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
