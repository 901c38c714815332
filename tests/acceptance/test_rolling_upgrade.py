"""Rolling upgrades: the previous release's BFF and worker beside this release's, under load.

``deploy/PREVIOUS_RELEASE`` names the previous release's commit; its source (``git
archive`` of ``dataplane``, ``telemetry`` and ``sql``) runs from a temp dir with
``PYTHONPATH`` pointing at it, in this venv: releases share one lock. A checkout without
that commit (a shallow clone) fails the test, saying so.

The README's order (Deploy, "Upgrade": migrate, then the BFFs, then the workers) passes
through this release's BFF beside the previous release's worker; the reverse order (a
rollback, or the workers first) through the previous BFF beside this worker. Both run
here, each step as a rollout does it: start the new process, wait until it is ready,
take the old one out of rotation and SIGTERM it. Meanwhile 8 clients, each at most one
request every 50 ms, POST echo and sleep jobs to the BFFs in rotation and follow each
stream to its final event; a stream cut by a stopping BFF reconnects to a live one with
``Last-Event-ID``, as EventSource does. Nothing is lost: every accepted request is
answered with its own answer, every row ends ``done``, each stopped process exits 0, and
each mixed step answered requests while it lasted.
"""

from __future__ import annotations

import io
import itertools
import os
import signal
import subprocess
import sys
import tarfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import trio

from dataplane.dev.embedded import free_port
from tests.helpers import BffProcess, WorkerProcess, bearer, read_sse, token

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 8  # concurrent clients
PACE = 0.05  # seconds each client waits between its requests
HOLD = 25  # answers each step must see before the next (at least)
STREAM_WITHIN = 60.0  # seconds a request may take to be answered, reconnects included


def previous_release_commit() -> str:
    lines = (ROOT / "deploy" / "PREVIOUS_RELEASE").read_text().splitlines()
    return next(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def extract_previous_release(dest: Path) -> Path:
    """The previous release's source under ``dest``; fails (never skips) without it."""
    commit = previous_release_commit()
    found = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.fail(
            f"deploy/PREVIOUS_RELEASE names commit {commit}, which this checkout does not "
            f"have ({found.stderr.strip() or 'git failed'}): the rolling-upgrade test runs "
            "that release's source. In a shallow clone, `git fetch --unshallow` (or fetch "
            "that commit) first."
        )
    paths = ["dataplane", "telemetry", "sql"]
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, *paths],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    where = subprocess.run(
        [sys.executable, "-c", "import dataplane, telemetry; print(dataplane.__file__)"],
        env={**os.environ, **old_release_env(dest)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where == str(dest / "dataplane" / "__init__.py"), where  # the old code, not ours
    return dest


def old_release_env(tree: Path) -> dict[str, str]:
    """The environment that runs ``tree``'s code: first on the path, and no current
    directory before it (``python -m`` would put this checkout's first). It serves the
    built-in ``probe`` alone (``DATAPLANE_SURFACES=,`` names no package): the surface
    packages installed in this venv are this release's, which may declare what the
    previous release's ``Operation`` does not know (``result=``, ``max_concurrency=``);
    in a real rollout each release's image brings its own."""
    return {"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1", "DATAPLANE_SURFACES": ","}


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_previous_release(tmp_path_factory.mktemp("previous-release"))


def request_of(i: int) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Request ``i``: (operation, params, the answer's result); every 4th sleeps, so jobs
    are in flight when a worker is stopped."""
    if i % 4 == 0:
        ms = 200 + i % 300
        return "sleep", {"ms": ms}, {"slept_ms": ms}
    return "echo", {"value": {"i": i}}, {"echo": {"i": i}, "client": "acme"}


@dataclass
class Load:
    """Clients POSTing to the BFFs in ``bffs`` (in rotation) and following each stream."""

    bffs: list[str]
    auth: dict[str, str] = field(default_factory=lambda: bearer(token(staff=True)))
    step: str = "start"
    stopping: bool = False
    accepted: int = 0
    answered: Counter[str] = field(default_factory=Counter)  # answers per step
    reconnects: int = 0
    problems: list[str] = field(default_factory=list)
    _numbers: Iterator[int] = field(default_factory=itertools.count)
    _turn: Iterator[int] = field(default_factory=itertools.count)

    def pick(self) -> str:
        return self.bffs[next(self._turn) % len(self.bffs)]

    async def run(self, http: httpx.AsyncClient) -> None:
        async with trio.open_nursery() as clients:
            for _ in range(CLIENTS):
                clients.start_soon(self.client, http)

    async def client(self, http: httpx.AsyncClient) -> None:
        while not self.stopping:
            await self.one(http, next(self._numbers))
            await trio.sleep(PACE)

    async def one(self, http: httpx.AsyncClient, i: int) -> None:
        operation, params, expected = request_of(i)
        with trio.move_on_after(STREAM_WITHIN) as scope:
            body = await self.post(http, operation, params)
            self.accepted += 1
            final = await self.follow(http, body["streamUrl"])
            if final.name != "done" or final.json.get("result") != expected:
                self.problems.append(f"request {i}: {final.name} {final.get('data')}")
            else:
                self.answered[self.step] += 1
        if scope.cancelled_caught:
            self.problems.append(f"request {i} ({operation}): no answer in {STREAM_WITHIN}s")

    async def post(self, http: httpx.AsyncClient, operation: str, params: Any) -> Any:
        while True:  # a BFF going away refuses or drops the connection: the next one
            base = self.pick()
            try:
                resp = await http.post(
                    f"{base}/api/probe/q",
                    json={"operation": operation, "params": params},
                    headers=self.auth,
                )
            except httpx.TransportError:
                await trio.sleep(0.05)
                continue
            if resp.status_code == 503:  # a BFF stopping or not yet ready
                await trio.sleep(0.05)
                continue
            assert resp.status_code in (200, 202), resp.text
            return resp.json()

    async def follow(self, http: httpx.AsyncClient, stream_url: str) -> Any:
        """The stream's final event, reconnecting (``Last-Event-ID``) while it has none."""
        last = 0
        while True:
            headers = {"Last-Event-ID": str(last)} if last else {}
            try:
                status, _, events = await read_sse(http, self.pick() + stream_url, headers)
            except httpx.TransportError:
                events, status = [], 0
            for event in events:
                last = max(last, int(event.get("id", 0)))
            if events and events[-1].name in ("done", "error"):
                return events[-1]
            assert status != 204, f"{stream_url}: told to stop before its final event"
            self.reconnects += 1
            await trio.sleep(0.1)  # EventSource waits `retry:` (2 s); a test need not

    async def hold(self, step: str) -> None:
        """Run ``step`` until it has answered ``HOLD`` requests."""
        self.step = step
        with trio.fail_after(60):
            while self.answered[step] < HOLD:  # noqa: ASYNC110 (counted by many tasks)
                await trio.sleep(0.05)


@dataclass
class Fleet:
    """The BFFs and workers of one test, old (``previous`` on PYTHONPATH) or new."""

    env: dict[str, str]
    previous: Path
    logs: Path
    started: list[BffProcess | WorkerProcess] = field(default_factory=list)

    def _env(self, old: bool) -> dict[str, str]:
        return {**self.env, **(old_release_env(self.previous) if old else {})}

    async def bff(self, *, old: bool) -> BffProcess:
        name = f"bff-{len(self.started)}-{'old' if old else 'new'}.log"
        proc = BffProcess(
            {**self._env(old), "DATAPLANE_SHUTDOWN_GRACE_SECONDS": "2"},
            str(self.logs / name),
            port=free_port(),
            command=("-m", "dataplane", "bff"),
        )
        self.started.append(proc)
        await proc.wait_ready()
        return proc

    async def worker(self, *, old: bool) -> WorkerProcess:
        name = f"worker-{len(self.started)}-{'old' if old else 'new'}.log"
        env = {**self._env(old), "SURFACE_QUEUE_TYPE": "surface-probe"}
        proc = WorkerProcess(env, str(self.logs / name))
        self.started.append(proc)
        await proc.wait_ready()
        return proc

    def close(self) -> None:
        for proc in self.started:
            proc.stop()


async def stop(proc: BffProcess | WorkerProcess) -> None:
    """SIGTERM, as a rollout does; the process must exit 0 within its grace."""
    proc.proc.send_signal(signal.SIGTERM)
    with trio.fail_after(40):
        while proc.proc.poll() is None:  # noqa: ASYNC110 (a child process: no event)
            await trio.sleep(0.05)
    assert proc.proc.returncode == 0, proc.output()


@pytest.fixture
def fleet(bff_env: dict[str, str], previous_release: Path, tmp_path: Path) -> Iterator[Fleet]:
    env = {**bff_env, "DATAPLANE_PROBE": "1"}
    fleet = Fleet(env, previous_release, tmp_path)
    yield fleet
    fleet.close()


Step = Callable[[Fleet, Load], Any]


async def roll_bffs(fleet: Fleet, load: Load, old_bff: BffProcess) -> BffProcess:
    new = await fleet.bff(old=False)
    load.bffs.append(new.base)
    load.bffs.remove(old_bff.base)  # out of rotation (a preStop drain), then SIGTERM
    await stop(old_bff)
    return new


async def roll_workers(fleet: Fleet, old_worker: WorkerProcess) -> WorkerProcess:
    new = await fleet.worker(old=False)
    await stop(old_worker)  # stops claiming, finishes its jobs within the grace, exit 0
    return new


def rows_by_status(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT status, count(*) FROM maestro_queues GROUP BY 1").fetchall()
    return {status: count for status, count in rows}


@pytest.mark.parametrize("order", ["bffs-first", "workers-first"])
async def test_a_rolling_upgrade_loses_nothing(fleet: Fleet, queue_dsn: str, order: str) -> None:
    bff = await fleet.bff(old=True)
    worker = await fleet.worker(old=True)
    load = Load([bff.base])
    async with httpx.AsyncClient(timeout=30) as http, trio.open_nursery() as nursery:
        nursery.start_soon(load.run, http)
        await load.hold("previous release")
        if order == "bffs-first":  # the README's order
            bff = await roll_bffs(fleet, load, bff)
            await load.hold("new BFF, previous worker")
            worker = await roll_workers(fleet, worker)
        else:
            worker = await roll_workers(fleet, worker)
            await load.hold("previous BFF, new worker")
            bff = await roll_bffs(fleet, load, bff)
        await load.hold("this release")
        load.stopping = True
    assert not load.problems, load.problems[:10]
    assert sum(load.answered.values()) == load.accepted
    assert rows_by_status(queue_dsn).keys() == {"done"}, rows_by_status(queue_dsn)
