"""The BFF's plane supervises itself, and a BFF that cannot start says why.

A plane task that fails (a bug: no input can make the pump fail any more, so the
tests put one in the sweep) takes the plane down; it is built again after a backoff,
its waiting streams end without a final event (EventSource reconnects), and
meanwhile /readyz and every plane route answer 503 saying why. A plane that keeps
failing makes /healthz answer 503. A startup error is logged with its reason and
fails /readyz and /healthz (it used to be Hypercorn's bare "lifespan error", with
every plane route answering "the data plane is starting" for ever)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from dataplane.bff import plane as plane_module
from dataplane.bff.reply.pump import ReplyPump
from dataplane.dev.embedded import free_port
from tests.acceptance.test_bff import STAFF, post
from tests.conftest import wait_until
from tests.helpers import BffProcess, read_sse
from tests.real_plane import start_bff


class Fault:
    """A bug in the pump's sweep, on while ``on``; counts the times it struck."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = False
        self.struck = 0
        sweep = ReplyPump.sweep

        async def faulty(pump: ReplyPump) -> None:
            if self.on:
                self.struck += 1
                raise RuntimeError("injected fault in the sweep")
            await sweep(pump)

        monkeypatch.setattr(ReplyPump, "sweep", faulty)


@pytest.fixture
def fault(monkeypatch: pytest.MonkeyPatch) -> Fault:
    monkeypatch.setattr(plane_module, "RESTART_DELAYS", (2.0,))
    return Fault(monkeypatch)


async def test_a_failed_plane_is_rebuilt_and_says_why_meanwhile(
    bff_env: dict[str, str],
    nursery: trio.Nursery,
    fault: Fault,
    spawn_worker: Callable[..., Any],
) -> None:
    base, _app, shutdown = await start_bff(nursery)  # sweeps every second (bff_env)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        job = (await post(http, "probe", "echo", {"value": "survives"})).json()
        streamed: list[Any] = []

        async def stream() -> None:
            streamed.append(await read_sse(http, job["streamUrl"]))

        async with trio.open_nursery() as streams:
            streams.start_soon(stream)
            await trio.sleep(0.3)
            fault.on = True
            await wait_until(lambda: fault.struck >= 1, within=5)
            fault.on = False
            ready = await http.get("/readyz")  # the plane restarts 2 s after it failed
            assert ready.status_code == 503
            assert "injected fault in the sweep" in ready.json()["reason"]
            refused = await post(http, "probe", "echo", {"value": "meanwhile"})
            assert refused.status_code == 503 and "restarts" in refused.text
            assert (await http.get("/healthz")).status_code == 200  # one failure: alive
        status, _, events = streamed[0]
        assert status == 200 and [e.name for e in events] == ["queued"]  # ended, no final

        async def ready() -> bool:
            return (await http.get("/readyz")).status_code == 200

        await wait_until(ready, within=10)
        await spawn_worker()
        _, _, events = await read_sse(http, job["streamUrl"], {"Last-Event-ID": "1"})
        assert events[-1].name == "done" and events[-1].json["result"]["echo"] == "survives"
    shutdown.set()


async def test_a_plane_that_keeps_failing_is_not_healthy_until_it_serves_again(
    bff_env: dict[str, str], nursery: trio.Nursery, fault: Fault
) -> None:
    base, _app, shutdown = await start_bff(nursery)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        fault.on = True
        await wait_until(lambda: fault.struck >= plane_module.UNHEALTHY_AFTER, within=20)

        async def unhealthy() -> bool:
            return (await http.get("/healthz")).status_code == 503

        await wait_until(unhealthy, within=5)
        body = (await http.get("/healthz")).json()
        assert body["status"] == "failing" and "injected fault" in body["reason"]
        fault.on = False

        async def ready() -> bool:
            return (await http.get("/readyz")).status_code == 200

        await wait_until(ready, within=10)
        assert (await http.get("/healthz")).status_code == 200
    shutdown.set()


@pytest.fixture
def spawn_bff(bff_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., BffProcess]]:
    procs: list[BffProcess] = []

    def spawn(**env: str) -> BffProcess:
        log = str(tmp_path / f"bff-{len(procs)}.log")
        proc = BffProcess({**bff_env, **env}, log, port=free_port(), args=("-k", "trio"))
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        proc.stop()


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        (
            {
                "DATAPLANE_SURFACES": "tests.unit.surface_fixtures:GOOD,"
                "tests.unit.surface_fixtures:TWIN"
            },
            "good",
        ),
        ({"DATAPLANE_NOTIFY_SECRET": "too short"}, "DATAPLANE_NOTIFY_SECRET"),
    ],
)
async def test_a_bff_that_cannot_start_says_why(
    spawn_bff: Callable[..., BffProcess], env: dict[str, str], reason: str
) -> None:
    bff = spawn_bff(**env)
    async with httpx.AsyncClient(base_url=bff.base, timeout=5) as http:

        async def answering() -> bool:
            try:
                return (await http.get("/readyz")).status_code == 503
            except httpx.HTTPError:
                return False

        await wait_until(answering, within=30, interval=0.1)
        ready = (await http.get("/readyz")).json()
        assert "could not start" in ready["reason"] and reason in ready["reason"]
        health = await http.get("/healthz")
        assert health.status_code == 503 and reason in health.json()["reason"]
        refused = await post(http, "probe", "echo", {"value": 1}, STAFF)
        assert refused.status_code == 503 and reason in refused.json()["error"]["message"]
    output = bff.output()
    assert "could not start" in output and reason in output
