"""The operator commands as an operator runs them (issue 41): ``dataplane jobs retry``
and ``discard`` by filter, ``dataplane queue pause/resume/list`` with a real worker
process, ``dataplane audit``, ``dataplane jobs show`` of a job a real handler failed:
each a subprocess on the test's queue DB."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from dataplane.operator import list_audit
from dataplane.queue import QueueClient
from tests.conftest import wait_until
from tests.helpers import WorkerProcess, capcom_process, failing_surface, submit

CAPCOM_TOKEN = "capcom-test-token-for-the-cli"


async def cli(dsn: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, "-m", "dataplane", *args],
        env={**os.environ, "MAESTRO_QUEUES_URL": dsn},
        stdin=stdin,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )


async def poisoned(queue: QueueClient, n: int, *, suffix: str = "") -> list[uuid.UUID]:
    ids = []
    for i in range(n):
        job = await submit(queue, "probe", "echo", {"value": f"{suffix}{i}"}, suffix=suffix)
        ids.append(job.job_id)
    await queue.db.execute(
        "UPDATE maestro_queues SET status = 'poison', completed_at = now(),"
        " dequeue_count = max_dequeues WHERE id = ANY(%(ids)s)",
        {"ids": ids},
    )
    return ids


async def status_of(queue: QueueClient, job_id: uuid.UUID) -> str:
    row = await queue.db.fetchone(
        "SELECT status FROM maestro_queues WHERE id = %(id)s", {"id": job_id}
    )
    return "gone" if row is None else str(row["status"])


async def test_a_bulk_retry_counts_asks_and_retries_one_type(
    queue: QueueClient, queue_dsn: str
) -> None:
    probe = await poisoned(queue, 3)
    dev = await poisoned(queue, 2, suffix="-dev")
    args = ("jobs", "retry", "--status", "poison", "--type", "surface-probe")

    dry = await cli(queue_dsn, *args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.decode().startswith("3 job(s) would be retried")
    assert await list_audit(queue.db) == []

    refused = await cli(queue_dsn, *args, stdin=b"n\n")  # asks, naming the count
    assert refused.returncode == 1 and b"retry 3 job(s)? [y/N]" in refused.stdout
    assert {await status_of(queue, i) for i in probe} == {"poison"}

    done = await cli(queue_dsn, *args, "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == "3 job(s) retried"
    assert {await status_of(queue, i) for i in probe} == {"pending"}
    assert {await status_of(queue, i) for i in dev} == {"poison"}  # another tier
    [row] = await list_audit(queue.db)
    assert (row.action, row.rows, row.via) == ("retry", 3, "cli")
    assert row.actor.startswith("cli:") and row.target["queue_type"] == "surface-probe"

    again = await cli(queue_dsn, *args, "--yes")  # nothing matches now
    assert again.returncode == 0 and again.stdout.startswith(b"0 job(s) match")
    assert len(await list_audit(queue.db)) == 1

    listed = await cli(queue_dsn, "audit")
    assert (
        listed.returncode == 0 and b"retry" in listed.stdout and b"surface-probe" in listed.stdout
    )


async def test_discard_and_one_job_retry_through_the_cli(
    queue: QueueClient, queue_dsn: str
) -> None:
    first, second = await poisoned(queue, 2)
    one = await cli(queue_dsn, "jobs", "retry", str(first))  # as before issue 41
    assert one.returncode == 0 and b"pending again" in one.stdout
    gone = await cli(queue_dsn, "jobs", "discard", "--type", "surface-probe", stdin=b"y\n")
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout.decode().strip().endswith("1 job(s) discarded")
    assert (await status_of(queue, first), await status_of(queue, second)) == ("pending", "gone")
    assert [r.action for r in await list_audit(queue.db)] == ["discard", "retry"]


async def test_bad_input_is_one_line_and_exit_2(queue_dsn: str) -> None:
    for args in (
        ("jobs", "retry", "--status", "failed", "--dry-run"),
        ("jobs", "discard", "--type", "probe", "--dry-run"),
        ("jobs", "discard", "--status", "pending", "--dry-run"),
        ("jobs", "retry", "--since", "yesterday", "--dry-run"),
        ("jobs", "retry", "--since", "0001-01-01T00:00+14:00", "--dry-run"),  # before year 1
        ("jobs", "list", "--until", "9999-12-31T23:59-14:00"),
        ("jobs", "list", "--limit", "0"),
        ("jobs", "list", "--limit", "501"),
        ("jobs", "retry", "--type", "surface-probe", "--limit", "100001", "--dry-run"),
        ("audit", "--limit", "0"),
        ("queue", "pause", "not-a-type"),
    ):
        done = await cli(queue_dsn, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.decode().strip().splitlines()) == 1, done.stderr


async def test_a_bulk_action_without_a_filter_needs_all(queue: QueueClient, queue_dsn: str) -> None:
    probe = await poisoned(queue, 2)
    dev = await poisoned(queue, 1, suffix="-dev")
    for action in ("retry", "discard"):
        refused = await cli(queue_dsn, "jobs", action, "--yes")
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.decode().count("\n") == 1 and b"--all" in refused.stderr
        both = await cli(queue_dsn, "jobs", action, "--all", "--type", "surface-probe", "--yes")
        assert both.returncode == 2 and b"without a filter" in both.stderr, both.stderr
    for other in (("list",), ("show", str(probe[0])), ("retry", str(probe[0]))):
        refused = await cli(queue_dsn, "jobs", *other, "--all")
        assert refused.returncode == 2 and b"--all is for" in refused.stderr, other
    assert {await status_of(queue, i) for i in (*probe, *dev)} == {"poison"}
    assert await list_audit(queue.db) == []

    dry = await cli(queue_dsn, "jobs", "retry", "--dry-run")  # a count needs no choice
    assert dry.returncode == 0 and dry.stdout.startswith(b"3 job(s) would be retried")
    done = await cli(queue_dsn, "jobs", "retry", "--all", "--yes")
    assert done.returncode == 0 and done.stdout.strip() == b"3 job(s) retried", done.stderr
    assert {await status_of(queue, i) for i in (*probe, *dev)} == {"pending"}
    [row] = await list_audit(queue.db)
    assert row.rows == 3 and row.target["all"] is True and row.target["status"] == "poison"
    assert row.target["queue_type"] is None and "limit" in row.target


async def test_a_paused_type_keeps_its_job_pending_until_resumed(
    queue: QueueClient, queue_dsn: str, spawn_worker: Callable[..., Any]
) -> None:
    worker: WorkerProcess = await spawn_worker("surface-probe")
    paused = await cli(queue_dsn, "queue", "pause", "surface-probe")
    assert paused.returncode == 0 and paused.stdout.strip() == b"surface-probe paused"
    listing = await cli(queue_dsn, "queue", "list")
    assert listing.stdout.startswith(b"surface-probe") and b"cli:" in listing.stdout

    job = (await submit(queue, "probe", "echo", {"value": "while paused"})).job_id
    depth = await queue.db.fetchone("SELECT maestro_queue_depth('surface-probe') AS n")
    assert depth is not None and depth["n"] == 0
    for _ in range(5):  # the worker is up and woken by the enqueue: it must not claim
        assert await status_of(queue, job) == "pending"
        await trio.sleep(0.2)
    row = await queue.db.fetchone(
        "SELECT dequeue_count FROM maestro_queues WHERE id = %(id)s", {"id": job}
    )
    assert row is not None and row["dequeue_count"] == 0

    resumed = await cli(queue_dsn, "queue", "resume", "surface-probe")
    assert resumed.returncode == 0 and resumed.stdout.strip() == b"surface-probe resumed"

    async def finished() -> bool:
        return await status_of(queue, job) == "done"

    await wait_until(finished, within=20)
    assert worker.proc.poll() is None
    assert [r.action for r in await list_audit(queue.db)] == ["resume", "pause"]


async def test_jobs_cancel_ends_a_pending_job_once_and_is_audited(
    queue: QueueClient, queue_dsn: str
) -> None:
    job = await submit(queue, "probe", "echo", {"value": "cancel me"})
    done = await cli(queue_dsn, "jobs", "cancel", str(job.job_id))
    assert done.returncode == 0, done.stderr
    assert f"job {job.job_id} cancelled" in done.stdout.decode()
    assert await status_of(queue, job.job_id) == "cancelled"
    again = await cli(queue_dsn, "jobs", "cancel", str(job.job_id))
    assert again.returncode == 1 and "cancelled" in again.stderr.decode()
    missing = await cli(queue_dsn, "jobs", "cancel")
    assert missing.returncode == 2 and "needs a job id" in missing.stderr.decode()
    (row,) = [r for r in await list_audit(queue.db) if r.action == "cancel"]
    assert row.target == {"jobId": str(job.job_id)} and row.rows == 1 and row.via == "cli"


async def test_jobs_cancel_stops_a_running_job_in_its_worker(
    queue: QueueClient, queue_dsn: str, spawn_worker: Callable[..., Any]
) -> None:
    worker: WorkerProcess = await spawn_worker("surface-probe")
    job = (await submit(queue, "probe", "sleep", {"ms": 20_000})).job_id

    async def running() -> bool:
        return await status_of(queue, job) == "in_progress"

    await wait_until(running, within=20)
    done = await cli(queue_dsn, "jobs", "cancel", str(job))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == f"job {job} cancelled (it was running)"
    assert await status_of(queue, job) == "cancelled"

    async def stopped() -> bool:  # its handler was cancelled in the worker, at once
        return "cancelled by an operator" in worker.output()

    await wait_until(stopped, within=5)
    shown = await cli(queue_dsn, "jobs", "show", str(job))  # who cancelled it, and when
    assert shown.returncode == 0, shown.stderr
    said = re.search(r"^  cancelled   (.*)$", shown.stdout.decode(), re.M)
    assert said is not None, shown.stdout
    assert said.group(1).startswith("the job was cancelled by the operator cli:"), said.group(1)
    assert " while it ran, at 20" in said.group(1)
    shown = await cli(queue_dsn, "jobs", "show", str(job), "--json")
    assert shown.returncode == 0, shown.stderr
    cancellation = json.loads(shown.stdout)["cancellation"]
    assert cancellation["by"] == "operator" and cancellation["running"] is True
    assert cancellation["operator"].startswith("cli:") and cancellation["at"]
    after = (await submit(queue, "probe", "echo", {"value": "after the cancel"})).job_id

    async def answered() -> bool:
        return await status_of(queue, after) == "done"

    await wait_until(answered, within=20)  # the worker serves on


async def test_jobs_show_prints_each_attempt_s_error_and_traceback(
    queue: QueueClient, queue_dsn: str, tmp_path: Path
) -> None:
    """A real worker runs a handler of a surface package of its own that raises, twice;
    capcom keeps the reports. ``jobs show`` prints each attempt (outcome, worker, start,
    duration), its error, the surface's frame and the traceback with the surface's own
    frames marked; ``--json`` carries the same."""
    shop = failing_surface(tmp_path)
    capcom = capcom_process(
        {"MAESTRO_QUEUES_URL": queue_dsn}, str(tmp_path / "capcom.log"), CAPCOM_TOKEN
    )
    worker = None
    try:
        await capcom.wait_ready()
        worker = WorkerProcess(
            {
                "MAESTRO_QUEUES_URL": queue_dsn,
                "SURFACE_QUEUE_TYPE": shop.queue_type,
                "DATAPLANE_FAIL_BACKOFF_SECONDS": "0",
                "DATAPLANE_CAPCOM_URL": capcom.base,
                "DATAPLANE_CAPCOM_TOKEN": CAPCOM_TOKEN,
                **shop.env,
            },
            str(tmp_path / "worker.log"),
        )
        await worker.wait_ready()
        job = (await submit(queue, "shop", "quote", {}, max_dequeues=2)).job_id

        async def reported() -> bool:
            row = await queue.db.fetchone(
                "SELECT count(*) AS n FROM worker_runs WHERE job_id = %(id)s", {"id": job}
            )
            return await status_of(queue, job) == "poison" and row is not None and row["n"] == 2

        await wait_until(reported, within=30)
    finally:
        for proc in (worker, capcom):
            if proc is not None:
                proc.stop()

    shown = await cli(queue_dsn, "jobs", "show", str(job))
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout.decode()
    worker_id = re.search(r"attempt 1  failed  worker (\S+)  started ", text)
    assert worker_id, text
    assert re.search(rf"attempt 2  poison  worker {re.escape(worker_id[1])}  started .* ms", text)
    lines = text.splitlines()
    assert lines.count("  KeyError: 'oops'") == 2  # each attempt's error
    assert sum(line.startswith(f"  at {shop.frame}  failed ") for line in lines) == 2
    marked = [line.strip() for line in lines if line.startswith("    > File")]
    assert len(marked) == 4 and all(str(shop.file) in line for line in marked), text
    assert lines.count("    KeyError: 'oops'") == 2  # each traceback's last line

    as_json = await cli(queue_dsn, "jobs", "show", str(job), "--json")
    document = json.loads(as_json.stdout)
    assert document["id"] == str(job) and document["status"] == "poison"
    attempts = document["attempts"]
    assert [(a["attempt"], a["outcome"], a["reported"]) for a in attempts] == [
        (1, "failed", True),
        (2, "poison", True),
    ]
    for attempt in attempts:
        assert attempt["duration_ms"] > 0 and attempt["worker"] == worker_id[1]
        error = attempt["error"]
        assert (error["type"], error["message"], error["frame"]) == (
            "KeyError",
            "'oops'",
            shop.frame,
        )
        assert error["traceback"].endswith("KeyError: 'oops'\n")
