"""``dataplane worker`` as a real process: crashes, signals, boot refusals."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
import trio

from dataplane.db import Database, q
from dataplane.db.lock import SessionLock
from dataplane.dev.embedded import free_port
from dataplane.queue import QueueClient
from tests.conftest import wait_until
from tests.helpers import NOTIFY_SECRET, WorkerProcess, session_locks, submit


def probe_env(queue_dsn: str, **extra: str) -> dict[str, str]:
    return {
        "MAESTRO_QUEUES_URL": queue_dsn,
        "SURFACE_QUEUE_TYPE": "surface-probe",
        "DATAPLANE_PROBE": "1",
        **extra,
    }


async def _status(queue: QueueClient, job_id: uuid.UUID) -> str | None:
    row = await queue.get(job_id)
    return row.status if row else None


async def test_sigkill_mid_job_is_a_retry_not_a_loss(
    queue: QueueClient, queue_dsn: str, tmp_path: Path
) -> None:
    env = probe_env(queue_dsn, MAESTRO_LEASE_SECONDS="2", MAESTRO_RENEW_SECONDS="0.5")
    first = WorkerProcess(env, str(tmp_path / "w1.log"))
    second = None
    try:
        await first.wait_ready()
        enq = await submit(queue, "probe", "sleep", {"ms": 1500})
        await wait_until(lambda: _in_progress(queue, enq.job_id), within=10)
        first.signal(signal.SIGKILL)
        first.wait(10)
        row = await queue.get(enq.job_id)
        assert row is not None and row.status == "in_progress" and row.dequeue_count == 1

        second = WorkerProcess(env, str(tmp_path / "w2.log"))
        await second.wait_ready()
        await wait_until(lambda: _done(queue, enq.job_id), within=20)
        row = await queue.get(enq.job_id)
        assert row is not None and row.status == "done" and row.dequeue_count == 2
        assert row.result["data"] == {"slept_ms": 1500}
        assert row.locked_by != (await _first_owner(first))
    finally:
        first.stop()
        if second:
            second.stop()


async def _first_owner(proc: WorkerProcess) -> str:
    for line in proc.output().splitlines():
        if " serving " in line:
            return line.split("worker ", 1)[1].split(" serving", 1)[0]
    return ""


async def _in_progress(queue: QueueClient, job_id: uuid.UUID) -> bool:
    return await _status(queue, job_id) == "in_progress"


async def _done(queue: QueueClient, job_id: uuid.UUID) -> bool:
    return await _status(queue, job_id) == "done"


async def test_sigkill_of_the_worker_on_call_hands_the_call_over(
    queue: QueueClient, db: Database, queue_dsn: str, tmp_path: Path
) -> None:
    # The test's session queues for the on-call lock right behind the first worker (the
    # only one running, so the one on call), the two others behind it. When SIGKILL ends
    # the first, the test holds the call for a moment: no worker listens on the wake
    # channel, and a job enqueued then must be found by the next worker's take-over claim.
    env = probe_env(queue_dsn, DATAPLANE_IDLE_MS="60000")
    gate = SessionLock(db.config, "oncall:surface-probe", loop=db.loop)
    workers = [WorkerProcess(env, str(tmp_path / "w0.log"))]
    try:
        await workers[0].wait_ready()
        await wait_until(lambda: _call_queue(db, 0))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gate.acquire)
            await wait_until(lambda: _call_queue(db, 1))
            workers += [WorkerProcess(env, str(tmp_path / f"w{i}.log")) for i in (1, 2)]
            for w in workers[1:]:
                await w.wait_ready()
            await wait_until(lambda: _call_queue(db, 3))

            workers[0].signal(signal.SIGKILL)
            assert workers[0].wait(10) == -signal.SIGKILL
        assert gate.held  # Postgres let the dead worker's lock go, to the longest waiter
        gap = await submit(queue, "probe", "echo", {"value": "in the gap"})
        await gate.release()  # the next in line takes the call: LISTEN, then claim
        await wait_until(lambda: _done(queue, gap.job_id), within=10)
        await wait_until(lambda: _call_queue(db, 1))  # one on call, one waiting
        after = await submit(queue, "probe", "echo", {"value": "after"})
        await wait_until(lambda: _done(queue, after.job_id), within=10)
        rows = [await queue.get(gap.job_id), await queue.get(after.job_id)]
        assert all(r is not None and r.dequeue_count == 1 for r in rows)
    finally:
        gate.close()
        for w in workers:
            w.stop()


async def _call_queue(db: Database, waiting: int) -> bool:
    """One session holds the on-call lock and ``waiting`` wait for it."""
    return await session_locks(db) == (1, waiting)


async def test_sigterm_past_the_grace_releases_without_counting(
    queue: QueueClient, queue_dsn: str, tmp_path: Path
) -> None:
    env = probe_env(queue_dsn, DATAPLANE_SHUTDOWN_GRACE_SECONDS="0.5")
    worker = WorkerProcess(env, str(tmp_path / "w.log"))
    try:
        await worker.wait_ready()
        enq = await submit(queue, "probe", "sleep", {"ms": 60_000})
        await wait_until(lambda: _in_progress(queue, enq.job_id), within=10)
        worker.signal(signal.SIGTERM)
        assert worker.wait(20) == 0, worker.output()
        row = await queue.get(enq.job_id)
        assert row is not None and row.status == "pending" and row.dequeue_count == 0
        assert row.locked_by is None
    finally:
        worker.stop()


def _boot(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MAESTRO_", "DATAPLANE_"))}
    clean.pop("SURFACE_QUEUE_TYPE", None)
    clean.pop("DATAPLANE_CLIENT_DB_URL", None)
    # The session's queue DSN is the test server's superuser; the owner check
    # has tests of its own (tests/integration/test_roles.py), these are about
    # the reasons that come after it.
    clean["DATAPLANE_ALLOW_OWNER"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "dataplane", "worker"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"SURFACE_QUEUE_TYPE": "surface-probe", "DATAPLANE_PROBE": "1"}, "MAESTRO_QUEUES_URL"),
        ({"MAESTRO_QUEUES_URL": "QDSN"}, "SURFACE_QUEUE_TYPE"),
        ({"MAESTRO_QUEUES_URL": "QDSN", "SURFACE_QUEUE_TYPE": "surface-nope"}, "unknown surface"),
        ({"MAESTRO_QUEUES_URL": "QDSN", "SURFACE_QUEUE_TYPE": "probe"}, "surface-<id>"),
        ({"MAESTRO_QUEUES_URL": "QDSN", "SURFACE_QUEUE_TYPE": "surface-probe"}, "DATAPLANE_PROBE"),
        (
            {"MAESTRO_QUEUES_URL": "QDSN", "SURFACE_QUEUE_TYPE": "surface-users"},
            "DATAPLANE_CLIENT_DB_URL",
        ),
        (
            {
                "MAESTRO_QUEUES_URL": "QDSN",
                "SURFACE_QUEUE_TYPE": "surface-users",
                "DATAPLANE_CLIENT_DB_URL": "ADMIN",
            },
            "DATAPLANE_CLIENT_DB_URL can write",
        ),
    ],
)
def test_the_worker_refuses_to_boot_with_one_line_why(
    env: dict[str, str], reason: str, queue_dsn: str, demo_db: tuple[str, str]
) -> None:
    resolved = {k: {"QDSN": queue_dsn, "ADMIN": demo_db[0]}.get(v, v) for k, v in env.items()}
    result = _boot(resolved)
    assert result.returncode != 0
    # The owner warning DATAPLANE_ALLOW_OWNER buys is a log line; the refusal
    # itself is exactly one line.
    lines = [
        line for line in result.stderr.strip().splitlines() if "DATAPLANE_ALLOW_OWNER" not in line
    ]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dataplane worker: ") and reason in lines[0]


async def test_cache_invalidation_reaches_every_worker_process(
    queue: QueueClient, queue_dsn: str, demo_db: tuple[str, str], tmp_path: Path
) -> None:
    env = {
        "MAESTRO_QUEUES_URL": queue_dsn,
        "SURFACE_QUEUE_TYPE": "surface-users",
        "DATAPLANE_CLIENT_DB_URL": demo_db[1],
        "DATAPLANE_IDLE_MS": "200",
        "DATAPLANE_NOTIFY_SECRET": NOTIFY_SECRET,
    }
    # Idle work goes to the one worker on call; the test holds the on-call lock itself,
    # so both workers claim by polling (every 200 ms at most) and both get jobs.
    oncall = psycopg.connect(queue_dsn, autocommit=True)
    oncall.execute(q("session_lock"), {"key": "oncall:surface-users"})
    workers = [WorkerProcess(env, str(tmp_path / f"w{i}.log")) for i in range(2)]
    try:
        for w in workers:
            await w.wait_ready()

        async def ask() -> tuple[str, str]:
            enq = await submit(queue, "users", "list", {"limit": 3})
            await wait_until(lambda: _done(queue, enq.job_id), within=10)
            row = await queue.get(enq.job_id)
            assert row is not None and row.locked_by is not None
            return row.locked_by, row.result["cache"]

        # Ask until each worker has answered from its own cache.
        seen: dict[str, list[str]] = {}
        with trio.fail_after(60):
            while len(seen) < 2 or not all("hit" in c for c in seen.values()):
                owner, cache = await ask()
                seen.setdefault(owner, []).append(cache)
        assert len(seen) == 2

        await queue.notify("dataplane_invalidate", "c:acme")  # unsealed: anyone may send it
        await wait_until(
            lambda: all("refused 1 invalidation" in w.output() for w in workers), within=10
        )
        await queue.invalidate("c:acme")  # sealed with the plane's notify secret
        # The broadcast is asynchronous: wait until both workers say they heard it.
        await wait_until(
            lambda: all("invalidated tag 'c:acme'" in w.output() for w in workers), within=10
        )
        after: dict[str, str] = {}
        with trio.fail_after(60):
            while len(after) < 2:
                owner, cache = await ask()
                after.setdefault(owner, cache)  # the first answer of each worker
        assert after == dict.fromkeys(seen, "miss")
    finally:
        for w in workers:
            w.stop()
        oncall.close()


async def _get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.get(url)


async def test_health_endpoints_answer_from_outside_and_follow_shutdown(
    queue: QueueClient, queue_dsn: str, tmp_path: Path
) -> None:
    """/healthz and /readyz on DATAPLANE_METRICS_PORT, with or without metrics on:
    ready while claiming, not ready (503 + reason) once SIGTERM stops the claiming
    while a job still runs, alive throughout; then exit 0."""
    port = free_port()
    env = probe_env(queue_dsn, DATAPLANE_METRICS_PORT=str(port), DATAPLANE_METRICS_HOST="127.0.0.1")
    env["DATAPLANE_METRICS"] = "0"
    worker = WorkerProcess(env, str(tmp_path / "w.log"))
    base = f"http://127.0.0.1:{port}"
    try:
        await worker.wait_ready()
        await wait_until(lambda: _code(f"{base}/readyz", 200), within=10)
        live = await _get(f"{base}/healthz")
        assert live.status_code == 200 and live.json() == {"status": "ok"}
        assert (await _get(f"{base}/metrics")).status_code == 404  # metrics are off
        assert (await _get(f"{base}/nope")).status_code == 404

        enq = await submit(queue, "probe", "sleep", {"ms": 3000})
        await wait_until(lambda: _in_progress(queue, enq.job_id), within=10)
        worker.signal(signal.SIGTERM)
        await wait_until(lambda: " stopping: " in worker.output(), within=10)
        ready = await _get(f"{base}/readyz")
        assert ready.status_code == 503 and ready.json()["reason"] == "stopping"
        assert (await _get(f"{base}/healthz")).status_code == 200
        assert worker.wait(20) == 0, worker.output()
        row = await queue.get(enq.job_id)
        assert row is not None and row.status == "done"
    finally:
        worker.stop()


async def test_metrics_are_served_beside_the_probes(
    queue: QueueClient, queue_dsn: str, tmp_path: Path
) -> None:
    port = free_port()
    env = probe_env(queue_dsn, DATAPLANE_METRICS="1", DATAPLANE_METRICS_PORT=str(port))
    worker = WorkerProcess(env, str(tmp_path / "w.log"))
    try:
        await worker.wait_ready()
        await wait_until(lambda: _code(f"http://127.0.0.1:{port}/readyz", 200), within=10)
        metrics = await _get(f"http://127.0.0.1:{port}/metrics")
        assert metrics.status_code == 200 and "dataplane_" in metrics.text
    finally:
        worker.stop()


async def test_metrics_require_the_token_when_one_is_set(queue_dsn: str, tmp_path: Path) -> None:
    port, token = free_port(), "a-worker-metrics-token-0123456789"
    env = probe_env(
        queue_dsn,
        DATAPLANE_METRICS="1",
        DATAPLANE_METRICS_PORT=str(port),
        DATAPLANE_METRICS_TOKEN=token,
    )
    worker = WorkerProcess(env, str(tmp_path / "w.log"))
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        await worker.wait_ready()
        await wait_until(lambda: _code(f"http://127.0.0.1:{port}/readyz", 200), within=10)
        async with httpx.AsyncClient(timeout=10) as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
                refused = await http.get(url, headers=headers)
                assert refused.status_code == 401 and "dataplane_" not in refused.text, headers
            granted = await http.get(url, headers={"Authorization": f"Bearer {token}"})
            assert granted.status_code == 200 and "dataplane_" in granted.text
        assert (await _get(f"http://127.0.0.1:{port}/healthz")).status_code == 200  # probes open
    finally:
        worker.stop()


async def _code(url: str, status: int) -> bool:
    try:
        return (await _get(url)).status_code == status
    except httpx.TransportError:
        return False
