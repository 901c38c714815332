"""A real BFF (Hypercorn serving the Quart-Trio app in this process) and real
``dataplane worker`` processes, on the test's own queue DB: a plugin (tests/conftest.py
lists it), so tests/acceptance/ and tests/smoke/ both see its fixtures."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from tests.helpers import JWT_SECRET, NOTIFY_SECRET, WorkerProcess


@pytest.fixture
def bff_env(queue_dsn: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {
        "MAESTRO_QUEUES_URL": queue_dsn,
        "DATAPLANE_JWT_SECRET": JWT_SECRET,
        "DATAPLANE_PROBE": "1",
        "DATAPLANE_SWEEP_SECONDS": "1",
        "DATAPLANE_NOTIFY_SECRET": NOTIFY_SECRET,
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("DATAPLANE_QUEUE_SUFFIX", "DATAPLANE_JWT_PUBLIC_KEY", "DATAPLANE_STREAM_SECRET"):
        monkeypatch.delenv(key, raising=False)
    return env


async def start_bff(nursery: trio.Nursery) -> tuple[str, Any, trio.Event]:
    """Serve a fresh app on a free port; returns (base URL, quart app, shutdown event)."""
    from dataplane.bff.app import REQUIRE_TRIO, create_app
    from dataplane.http import RequireTrio

    quart_app = create_app()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    shutdown = trio.Event()
    binds = await nursery.start(
        functools.partial(
            serve, RequireTrio(quart_app, REQUIRE_TRIO), config, shutdown_trigger=shutdown.wait
        )
    )
    return binds[0], quart_app, shutdown


@pytest.fixture
async def bff(bff_env: dict[str, str], nursery: trio.Nursery) -> AsyncIterator[str]:
    base, _app, shutdown = await start_bff(nursery)
    yield base
    shutdown.set()


@pytest.fixture
async def http(bff: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=bff, timeout=30) as client:
        yield client


@pytest.fixture
def spawn_worker(queue_dsn: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    procs: list[WorkerProcess] = []

    async def spawn(queue_type: str = "surface-probe", **env: str) -> WorkerProcess:
        full = {
            "MAESTRO_QUEUES_URL": queue_dsn,
            "SURFACE_QUEUE_TYPE": queue_type,
            "DATAPLANE_PROBE": "1",
            "DATAPLANE_NOTIFY_SECRET": NOTIFY_SECRET,
            **env,
        }
        proc = WorkerProcess(full, str(tmp_path / f"worker-{len(procs)}.log"))
        procs.append(proc)
        await proc.wait_ready()
        return proc

    yield spawn
    for proc in procs:
        proc.stop()
