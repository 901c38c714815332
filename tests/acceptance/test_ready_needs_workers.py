"""``DATAPLANE_READY_NEEDS_WORKERS=1``: a BFF's /readyz waits for a worker per surface.

Issue 44 item 5: under compose the proxy's /readyz answered 200 about 25 s before the
workers served, and a ``Prefer: wait=2`` POST in that window got 202 (no worker to
answer it). With the setting (compose.yaml sets it for its BFFs) a real ``dataplane
bff`` answers 503 ``no ready worker for surface-...`` naming every served type (probe and
the demo LMS's four) without a real ``dataplane worker`` holding or waiting for its
on-call lock; a type drops out of the reason once its worker runs, and with all five
/readyz is 200; once seen, the
type stays seen (a full worker lets the lock go: a busy fleet must not leave the
rotation), and a POST with ``Prefer: wait=2`` is answered at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from dataplane.dev.embedded import free_port
from tests.conftest import wait_until
from tests.helpers import BffProcess, bearer, token

LMS = ["surface-accounting", "surface-learnerviews", "surface-skills", "surface-users"]
TYPES = sorted([*LMS, "surface-probe"])


async def _readyz(http: httpx.AsyncClient) -> httpx.Response:
    return await http.get("/readyz")


async def test_readyz_waits_for_a_worker_of_each_surface(
    bff_env: dict[str, str],
    spawn_worker: Callable[..., Any],
    demo_db: tuple[str, str],
    tmp_path: Path,
) -> None:
    bff = BffProcess(
        {**bff_env, "DATAPLANE_READY_NEEDS_WORKERS": "1"},
        str(tmp_path / "bff.log"),
        port=free_port(),
        command=("-m", "dataplane", "bff"),
    )
    try:
        async with httpx.AsyncClient(base_url=bff.base, timeout=10) as http:

            async def answers() -> bool:
                try:
                    return (await _readyz(http)).status_code in (200, 503)
                except httpx.HTTPError:
                    return False

            await wait_until(answers, within=30)

            async def waits_for_workers() -> bool:
                body = (await _readyz(http)).json()
                return body["checks"].get("workers") is False

            await wait_until(waits_for_workers, within=30)  # the plane is up, migrated
            not_ready = await _readyz(http)
            assert not_ready.status_code == 503, not_ready.text
            assert not_ready.json()["reason"] == f"no ready worker for {', '.join(TYPES)}"

            workers = [await spawn_worker("surface-probe")]

            async def probe_seen() -> bool:
                reason = (await _readyz(http)).json().get("reason", "")
                return reason == f"no ready worker for {', '.join(LMS)}"

            await wait_until(probe_seen, within=10)
            for queue_type in LMS:
                workers.append(await spawn_worker(queue_type, DATAPLANE_CLIENT_DB_URL=demo_db[1]))

            async def ready() -> bool:
                return (await _readyz(http)).status_code == 200

            await wait_until(ready, within=10)
            assert (await _readyz(http)).json()["checks"]["workers"] is True
            answered = await http.post(
                "/api/probe/q",
                json={"operation": "echo", "params": {"value": "ready"}},
                headers={**bearer(token(staff=True)), "Prefer": "wait=2"},
            )
            assert answered.status_code == 200, answered.text

            for worker in workers:
                worker.stop()  # seen once: stays ready (the proxy's rotation is not load's)
            assert (await _readyz(http)).status_code == 200
    finally:
        bff.stop()
    assert "Traceback" not in bff.output()
