"""A BFF started before ``dataplane migrate`` says so and refuses work with a 503.

On Kubernetes and under compose the migration is a Job or a one-shot service that may
finish after the BFF is up. Until it has run, /readyz answers 503 naming the missing
migrations (a proxy keeps the BFF out of its rotation) and a POST answers 503 with
``Retry-After`` and the reason, not a 500 from an undefined table. Once the migrations
are in, the same BFF becomes ready and serves without a restart."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
import trio

from dataplane.db import DatabaseConfig, open_database
from dataplane.queue.migrations import migrate
from tests.acceptance.test_bff import post
from tests.conftest import wait_until
from tests.helpers import read_sse
from tests.real_plane import start_bff


async def test_an_unmigrated_queue_db_is_not_ready_and_refuses_with_503(
    bff_env: dict[str, str],
    fresh_db: Callable[[str | None], str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    spawn_worker: Callable[..., Awaitable[Any]],
    bridge: Any,
) -> None:
    empty = fresh_db(None)
    monkeypatch.setenv("MAESTRO_QUEUES_URL", empty)
    base, _app, _shutdown = await start_bff(nursery)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        ready = await http.get("/readyz")
        assert ready.status_code == 503, ready.text
        body = ready.json()
        assert body["checks"]["migrated"] is False
        assert "dataplane migrate" in body["reason"]
        refused = await post(http, "probe", "echo", {"value": "too early"})
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"]
        assert "dataplane migrate" in refused.json()["error"]["message"]

        async with open_database(DatabaseConfig(empty), loop=bridge) as db:
            assert await migrate(db)

        async def ready_now() -> bool:
            return (await http.get("/readyz")).status_code == 200

        await wait_until(ready_now, within=10)
        await spawn_worker(MAESTRO_QUEUES_URL=empty)
        accepted = await post(http, "probe", "echo", {"value": "now"})
        assert accepted.status_code == 202, accepted.text
        status, _, events = await read_sse(http, accepted.json()["streamUrl"])
        assert status == 200 and events[-1].name == "done"


async def test_a_partly_migrated_schema_is_a_503_and_readyz_notices_it(
    bff_env: dict[str, str],
    queue_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    bridge: Any,
) -> None:
    """Issue 38 item 9: with migration 0010 undone (its column dropped, its record gone)
    a DELETE met 42703 and answered 500, and /readyz, once it had seen the schema
    migrated, never looked again. Now every "schema older than the code" error is a 503
    with Retry-After, and /readyz reads the migrations again every SCHEMA_RECHECK."""
    from dataplane.bff import site

    monkeypatch.setattr(site, "SCHEMA_RECHECK", 0.3)
    base, _app, shutdown = await start_bff(nursery)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        await wait_until(lambda: _status(http, "/readyz", 200), within=10)
        body = (await post(http, "probe", "echo", {"value": "pending"})).json()
        async with open_database(DatabaseConfig(queue_dsn), loop=bridge) as db:
            await db.execute("ALTER TABLE maestro_queues DROP COLUMN withdrawn")
            await db.execute("DELETE FROM dataplane_migrations WHERE version LIKE '0010%'")
        refused = await http.delete(body["pollUrl"])
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"]
        assert "dataplane migrate" in refused.json()["error"]["message"]
        await wait_until(lambda: _status(http, "/readyz", 503), within=10)
        ready = (await http.get("/readyz")).json()
        assert ready["checks"]["migrated"] is False and "0010" in ready["reason"]
    shutdown.set()


async def _status(http: httpx.AsyncClient, path: str, status: int) -> bool:
    return (await http.get(path)).status_code == status
