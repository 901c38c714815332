"""Surfaces as packages, through the real BFF and real worker processes: a scaffolded
package answers end to end, an operation's timeout fails the attempt, ``u:``
invalidation reaches every worker."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import trio

from dataplane.db import q
from dataplane.queue import QueueClient
from dataplane.surfaces.scaffold import scaffold
from tests.acceptance.test_bff import STAFF, poll_until_done, post
from tests.helpers import bearer, read_sse, submit, token
from tests.real_plane import start_bff


async def installed_in_a_venv(root: Path, where: Path) -> Path:
    """``pip install -e root`` (no index, no dependencies) into a new venv that sees this
    one's packages (a ``.pth`` adds its site directories, their ``.pth`` files run too):
    the package registers its entry point there; returns the venv's python."""
    await trio.run_process([sys.executable, "-m", "venv", "--without-pip", str(where)])
    python = where / "bin" / "python"
    found = await trio.run_process(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"], capture_stdout=True
    )
    ours = [p for p in sys.path if p.endswith("site-packages")]
    line = "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in ours)
    (Path(found.stdout.decode().strip()) / "parent-venv.pth").write_text(line + "\n")
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    await trio.run_process([*pip, "--no-build-isolation", "-e", str(root)], capture_stdout=True)
    return python


async def test_a_scaffolded_surface_package_passes_its_test_and_answers(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    spawn_worker: Callable[..., Any],
    tmp_path: Path,
    pg_admin_dsn: str,
) -> None:
    root = scaffold("greeter", tmp_path)
    # Its own tests, with the test kit's run_operation and plane, once pip-installed
    # (`-p dataplane.testing` is the entry point's name: a no-op where it is installed,
    # the plugin's module where this checkout's install predates it).
    # On this session's server (DATAPLANE_TEST_DSN), with pytest's temporary directories
    # of its own: another run's would clean up this one's older ones, its server's too.
    python = await installed_in_a_venv(root, tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k != "DATAPLANE_SURFACES"}
    env["DATAPLANE_TEST_DSN"] = pg_admin_dsn
    kit = ("-p", "no:cacheprovider", "-p", "dataplane.testing", f"--basetemp={tmp_path / 'own'}")
    own = await trio.run_process(
        [str(python), "-m", "pytest", "-q", *kit, str(root / "tests")],
        cwd=root,
        env=env,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    out = own.stdout.decode() + own.stderr.decode()
    assert own.returncode == 0 and "3 passed" in out, out
    listed = await trio.run_process(
        [str(python), "-m", "dataplane", "surfaces"], env=env, capture_stdout=True
    )
    assert "greeter" in listed.stdout.decode()  # registered through its entry point

    # Registered through DATAPLANE_SURFACES (the entry point works the same way).
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("DATAPLANE_SURFACES", "greeter_surface:SURFACE")
    base, _app, shutdown = await start_bff(nursery)
    await spawn_worker(
        "surface-greeter", DATAPLANE_SURFACES="greeter_surface:SURFACE", PYTHONPATH=str(root)
    )
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        paths = (await http.get("/openapi.json")).json()["paths"]
        assert "/api/greeter/q" in paths
        assert "/api/users/q" not in paths  # the override replaces the entry points
        body = (await post(http, "greeter", "hello", {"name": "ada"})).json()
        answer = await poll_until_done(http, body["pollUrl"])
        assert answer["result"] == {"greeting": "hello, ada", "client": "acme"}
        bad = await post(http, "greeter", "hello", {"name": ""})
        assert bad.status_code == 400
    shutdown.set()


async def test_an_operation_past_its_timeout_fails_retries_then_poisons(
    bff_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    nursery: trio.Nursery,
    queue: QueueClient,
    spawn_worker: Callable[..., Any],
) -> None:
    monkeypatch.setenv("DATAPLANE_MAX_DEQUEUES", "2")
    base, _app, shutdown = await start_bff(nursery)
    await spawn_worker(DATAPLANE_MAX_HANDLER_SECONDS="0.3", DATAPLANE_FAIL_BACKOFF_SECONDS="0")
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        body = (await post(http, "probe", "sleep", {"ms": 5000})).json()
        with trio.fail_after(20):
            _, _, events = await read_sse(http, body["streamUrl"])
    shutdown.set()
    assert events[-1].name == "error" and events[-1].json["code"] == "POISON"
    assert "TIMEOUT" in events[-1].json["message"]
    row = await queue.get(body["jobId"])
    assert row is not None and row.status == "poison" and row.dequeue_count == 2
    assert (row.last_error or "").count("TIMEOUT") >= 1


async def test_user_invalidation_reaches_every_worker(
    bff_env: dict[str, str],
    nursery: trio.Nursery,
    queue: QueueClient,
    spawn_worker: Callable[..., Any],
    queue_dsn: str,
) -> None:
    base, _app, shutdown = await start_bff(nursery)
    # Idle work goes to the one worker on call; the test holds the on-call lock itself,
    # so both workers claim by polling (every 200 ms at most) and both get jobs.
    with psycopg.connect(queue_dsn, autocommit=True) as oncall:
        oncall.execute(q("session_lock"), {"key": "oncall:surface-probe"})
        for _ in range(2):
            await spawn_worker(DATAPLANE_IDLE_MS="200")
        me = token(sub="u42", branches=["acme-north"])

        async def ask() -> tuple[str, str]:
            body = (await post(http, "probe", "cached", {"value": "v"}, me)).json()
            answer = await poll_until_done(http, body["pollUrl"])
            row = await queue.get(body["jobId"])
            assert row is not None and row.locked_by is not None
            return row.locked_by, answer["cache"]

        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            seen: dict[str, list[str]] = {}
            with trio.fail_after(60):
                while len(seen) < 2 or any("hit" not in c for c in seen.values()):
                    worker, cache = await ask()
                    seen.setdefault(worker, []).append(cache)
            # Both workers hold the entry; the BFF's write path drops it everywhere.
            staff = token(staff=True, sub="ops")
            resp = await http.post(
                "/api/probe/invalidate", json={"tags": ["u:u42"]}, headers=bearer(staff)
            )
            assert resp.status_code == 202 and resp.json() == {"invalidated": ["u:u42"]}
            after: dict[str, str] = {}
            with trio.fail_after(60):
                while len(after) < 2:
                    worker, cache = await ask()
                    after.setdefault(worker, cache)
            assert after == dict.fromkeys(seen, "miss")
            # Only staff (or the service token) may invalidate, and only its own client's c: tag.
            nope = await http.post(
                "/api/probe/invalidate", json={"tags": ["u:u42"]}, headers=bearer(me)
            )
            assert nope.status_code == 403
            other = await http.post(
                "/api/probe/invalidate", json={"tags": ["c:globex"]}, headers=bearer(STAFF)
            )
            assert other.status_code == 403
    shutdown.set()


async def test_a_failure_storm_at_the_default_concurrency_keeps_to_its_queue_pool(
    queue: QueueClient, queue_dsn: str, spawn_worker: Callable[..., Any]
) -> None:
    """A full claim of jobs failing at once: every failure is written (each job then
    succeeds on its retry), through at most the worker's queue pool, not a connection
    per job (the pool was concurrency + 4: 68 of the server's connections here)."""
    jobs = [await submit(queue, "probe", "fail", {"times": 1, "nonce": f"{i}"}) for i in range(128)]
    await spawn_worker(DATAPLANE_FAIL_BACKOFF_SECONDS="0")
    ids = [j.job_id for j in jobs]
    count = "SELECT count(*) FROM maestro_queues WHERE id = ANY(%s) AND status = 'done'"
    peak = 0
    with psycopg.connect(queue_dsn, autocommit=True) as conn:
        with trio.fail_after(30):
            while True:
                (in_use,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    ("dataplane-worker",),
                ).fetchone() or (0,)
                peak = max(peak, int(in_use))
                (done,) = conn.execute(count, (ids,)).fetchone() or (0,)
                if done == len(ids):
                    break
                await trio.sleep(0.05)
        rows = conn.execute(
            "SELECT dequeue_count, last_error FROM maestro_queues WHERE id = ANY(%s)", (ids,)
        ).fetchall()

    assert all(n == 2 and "ProbeFailure" in (err or "") for n, err in rows), rows[:3]
    # The pool (8 for per-job statements + 4), and the connections of their own: the
    # LISTEN, the on-call lock and the maintenance leader's.
    assert 0 < peak <= 12 + 3, peak
