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
from tests.acceptance.conftest import start_bff
from tests.acceptance.test_bff import post
from tests.conftest import wait_until
from tests.helpers import read_sse


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
