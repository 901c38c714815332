"""Postgres stopped and restarted under load: the BFF and the workers recover
without being restarted, and the promises hold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
import trio

from dataplane.db import DatabaseConfig, open_bridge, open_database
from dataplane.dev.embedded import FAST_SETTINGS, EmbeddedPostgres
from dataplane.queue.migrations import migrate
from tests.chaos.harness import Outcome, Stack, check_promises, drive, one_request


@pytest.fixture
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    """A server of this test's own: it is going to be stopped."""
    server = EmbeddedPostgres(tmp_path_factory.mktemp("chaos-pg") / "data", settings=FAST_SETTINGS)
    server.start()

    async def prepare() -> None:
        async with open_bridge(), open_database(DatabaseConfig(server.dsn(), pool_size=1)) as db:
            await migrate(db)

    trio.run(prepare)
    try:
        yield server
    finally:
        server.destroy()


async def test_postgres_restart_under_load(own_server: EmbeddedPostgres, tmp_path: Path) -> None:
    stack = Stack(tmp_path, own_server.dsn())
    try:
        bff = await stack.add_bff()
        await stack.add_worker()
        await stack.add_worker()
        outcomes: list = []

        async def load() -> None:
            # ~4.5 s of requests (12 at a time, 50-300 ms each): the load must still run
            # when the server stops at 2 s, also on a fast host (150 were done by then).
            outcomes.extend(await drive([bff.base], 300, concurrency=12))

        during = Outcome()  # a request made while the server is down, whatever the load's timing

        async def post_during_outage() -> None:
            async with httpx.AsyncClient(timeout=httpx.Timeout(30, connect=5)) as http:
                await one_request(http, [bff.base], {"ms": 1}, during)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(load)
            await trio.sleep(2)  # wall-clock: the stack runs under real load for a while first
            await trio.to_thread.run_sync(own_server.stop, "fast")
            nursery.start_soon(post_during_outage)
            await trio.sleep(1.5)  # wall-clock: the outage lasts this long for every process
            await trio.to_thread.run_sync(own_server.start)
        assert during.post_attempts > 1, "a POST while the server was down got through at once"
        outcomes.append(during)
        for proc in [*stack.bffs, *stack.workers]:
            assert proc.proc.poll() is None, "a process died instead of recovering"
        with psycopg.connect(own_server.dsn()) as conn:
            rows = {
                str(r[0]): {"status": r[1], "last_error": r[2], "dequeue_count": r[3]}
                for r in conn.execute(
                    "SELECT id, status, last_error, dequeue_count FROM maestro_queues"
                )
            }
        check_promises(outcomes, rows)
        assert len(rows) == len({o.job_id for o in outcomes})  # identical sleeps coalesce
        assert sum(o.post_attempts > 1 for o in outcomes) > 0, "the outage was never felt"
        bff_log = stack.bffs[0].output()
        assert "connection lost" in bff_log and "reconnected" in bff_log
    finally:
        stack.stop()
