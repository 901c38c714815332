"""The worker in-process on a real Postgres: execution, errors, gates re-checked,
cache, single-flight, blobs, leases."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import Any

import trio
import trio.testing

from dataplane.db import Database, Notification
from dataplane.queue import QueueClient, done_channel
from dataplane.surfaces import probe
from dataplane.surfaces.manifest import (
    STAFF_ONLY,
    Operation,
    OperationContext,
    branch_in_scope,
    surface_of,
)
from dataplane.worker import JobReport, Worker, WorkerConfig
from dataplane.worker.cache import INVALIDATE_CHANNEL
from tests.conftest import wait_until
from tests.helpers import NORTH, STAFF, envelope, submit


class Reports:
    def __init__(self) -> None:
        self.items: list[JobReport] = []

    def report(self, job: JobReport, *, parent: Any = None) -> None:
        self.items.append(job)


@asynccontextmanager
async def running_worker(
    queue: QueueClient, surface: Any = probe.SURFACE, client_db: Any = None, **config: Any
) -> AsyncIterator[tuple[Worker, Reports]]:
    reports = Reports()
    semantics = {k: config.pop(k) for k in ("lease_seconds", "fail_backoff_seconds") if k in config}
    cfg = WorkerConfig(
        queue_type=f"surface-{surface.id}",
        worker_id=config.pop("worker_id", "w-test"),
        queue=replace(queue.config, **semantics),
        **config,
    )
    worker = Worker(cfg, surface, queue, client_db=client_db, reporter=reports)
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        yield worker, reports
        worker.stop()


async def wait_done(queue: QueueClient, job_id: uuid.UUID, within: float = 10) -> Any:
    rows: list[Any] = []

    async def finished() -> bool:
        row = await queue.get(job_id)
        if row is not None and row.status in ("done", "poison"):
            rows.append(row)
            return True
        return False

    await wait_until(finished, within=within)
    return rows[0]


async def test_echo_runs_and_completes_with_the_data(queue: QueueClient) -> None:
    async with running_worker(queue) as (worker, reports):
        enq = await submit(queue, "probe", "echo", {"value": {"a": [1, "ü"]}})
        row = await wait_done(queue, enq.job_id)
    assert row.status == "done"
    assert row.result == {
        "data": {"echo": {"a": [1, "ü"]}, "client": "acme"},
        "cache": "bypass",
        "coalesced": False,
    }
    assert worker.statistics().done == 1
    (report,) = reports.items
    assert report.outcome == "done" and report.operation == "echo" and report.cache == "bypass"
    assert report.wall_ms >= 0 and report.rss_bytes > 0 and report.dequeue_count == 1


async def test_enqueue_notify_wakes_an_idle_worker_at_once(queue: QueueClient) -> None:
    # A 60 s poll ceiling: only the notify can explain a prompt claim.
    async with running_worker(queue, idle_ms=60_000, poll_start_ms=60_000) as (worker, _):
        await worker.claimer.wait_idle_claims(1)  # its first claim found nothing: it sleeps 60 s
        claims_before = worker.statistics().claims
        enq = await submit(queue, "probe", "echo", {"value": 1})
        with trio.fail_after(5):
            row = await wait_done(queue, enq.job_id)
        assert row.status == "done"
        assert worker.statistics().claims > claims_before


async def test_one_enqueue_wakes_one_of_four_idle_workers(queue: QueueClient) -> None:
    # No polling (60 s): only an enqueue notify, or going on call, makes a claim.
    async with AsyncExitStack() as stack:
        workers = [
            (
                await stack.enter_async_context(
                    running_worker(queue, worker_id=f"w{i}", idle_ms=60_000, poll_start_ms=60_000)
                )
            )[0]
            for i in range(4)
        ]
        for w in workers:
            await w.claimer.wait_idle_claims(1)
        await wait_until(lambda: sum(w.statistics().takeovers for w in workers) == 1)
        warm_up = await submit(queue, "probe", "echo", {"value": 0})  # settles every claimer
        await wait_done(queue, warm_up.job_id)

        def total(field: str) -> int:
            return sum(getattr(w.statistics(), field) for w in workers)

        before = {f: total(f) for f in ("claims", "notify_wakes", "notifies_ignored")}
        enq = await submit(queue, "probe", "echo", {"value": 1})
        assert (await wait_done(queue, enq.job_id)).status == "done"
        with trio.move_on_after(0.5):  # any other wake-up the notify caused lands by then
            await wait_until(lambda: total("notify_wakes") > before["notify_wakes"] + 1)
        # One claimer woke and claimed; three heard the notify and let the one on call
        # answer it. (Claims are not counted exactly: a LISTEN reconnect on a loaded host
        # wakes a claimer on purpose.)
        assert total("notify_wakes") == before["notify_wakes"] + 1
        assert total("notifies_ignored") == before["notifies_ignored"] + 3
        assert total("claims") >= before["claims"] + 1


async def test_a_full_worker_lets_another_answer_the_notify(queue: QueueClient) -> None:
    no_polls = {"idle_ms": 60_000, "poll_start_ms": 60_000, "concurrency": 1}
    async with (
        running_worker(queue, worker_id="w1", **no_polls) as (w1, _),
        running_worker(queue, worker_id="w2", **no_polls) as (w2, _),
    ):
        for w in (w1, w2):
            await w.claimer.wait_idle_claims(1)
        await wait_until(lambda: w1.statistics().takeovers + w2.statistics().takeovers == 1)
        first, second = (w1, w2) if w1.oncall.on_call else (w2, w1)
        long = await submit(queue, "probe", "sleep", {"ms": 3000})
        await wait_until(lambda: first.statistics().in_flight == 1)  # full: it steps down
        with trio.fail_after(2):  # well before the long job ends, and no poll could do it
            quick = await submit(queue, "probe", "echo", {"value": 2})
            assert (await wait_done(queue, quick.job_id)).status == "done"
        assert second.statistics().claimed == 1
        await wait_done(queue, long.job_id)


async def test_expected_and_unexpected_errors(queue: QueueClient, db: Database) -> None:
    listener = db.listener([done_channel("surface-probe")])
    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        async with running_worker(queue, fail_backoff_seconds=0) as (worker, reports):
            rej = await submit(queue, "probe", "reject", {"status": 404, "message": "nope"})
            bad = await submit(queue, "probe", "sleep", {"ms": "soon"})  # forged: wrong type
            flaky = await submit(queue, "probe", "fail", {"times": 2}, max_dequeues=5)
            doomed = await submit(queue, "probe", "fail", {"times": 9}, max_dequeues=3)
            r_rej = await wait_done(queue, rej.job_id)
            r_bad = await wait_done(queue, bad.job_id)
            r_flaky = await wait_done(queue, flaky.job_id)
            r_doomed = await wait_done(queue, doomed.job_id)
            notified: set[str] = set()
            with trio.fail_after(5):
                while str(doomed.job_id) not in notified:
                    event = await listener.events.receive()
                    assert isinstance(event, Notification)
                    notified.add(event.payload)
        nursery.cancel_scope.cancel()
    assert r_rej.result == {"error": {"status": 404, "message": "nope"}}
    assert r_rej.dequeue_count == 1
    assert r_bad.result["error"]["status"] == 400 and "ms" in r_bad.result["error"]["message"]
    assert r_flaky.status == "done" and r_flaky.dequeue_count == 3
    assert r_flaky.result["data"] == {"succeeded_on_attempt": 3}
    assert r_doomed.status == "poison" and r_doomed.dequeue_count == 3
    assert "ProbeFailure" in r_doomed.last_error
    outcomes = sorted(r.outcome for r in reports.items)
    assert outcomes.count("failed") == 4 and outcomes.count("poison") == 1
    assert worker.statistics().poisoned == 1


async def test_the_worker_re_checks_gates_on_forged_rows(queue: QueueClient) -> None:
    """Rows inserted straight into the queue, bypassing the BFF, still meet the gates."""
    calls: list[dict[str, Any]] = []

    async def handler(ctx: OperationContext) -> Any:
        calls.append(ctx.params)
        return {"ok": True}

    secret = surface_of(
        Operation("staffOnly", 1, {"type": "object"}, handler, gates=(STAFF_ONLY,)),
        Operation(
            "byBranch",
            1,
            {"type": "object", "properties": {"branch": {"type": "string"}}},
            handler,
            gates=(branch_in_scope("branch"),),
        ),
        id="secret",
        needs_client_db=False,
    )
    async with running_worker(queue, secret):
        a = await submit(queue, "secret", "staffOnly", {}, NORTH)
        b = await submit(queue, "secret", "byBranch", {"branch": "acme-south"}, NORTH)
        c = await submit(queue, "secret", "byBranch", {"branch": "acme-north"}, NORTH)
        d = await submit(queue, "secret", "staffOnly", {}, STAFF)
        rows = [await wait_done(queue, j.job_id) for j in (a, b, c, d)]
    assert rows[0].result["error"]["status"] == 403
    assert rows[1].result["error"]["status"] == 403
    assert rows[2].result["data"] == {"ok": True}
    assert rows[3].result["data"] == {"ok": True}
    assert len(calls) == 2  # the handler never ran for the forged requests


def _counting_surface(ttl: float, gate: trio.Event | None = None) -> tuple[Any, list[int]]:
    """A surface counting its handler runs; each run holds until ``gate`` is set, if given."""
    runs: list[int] = []

    async def handler(ctx: OperationContext) -> Any:
        runs.append(1)
        if gate is not None:
            await gate.wait()
        return {"n": ctx.params.get("n"), "client": ctx.auth.client}

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    return (
        surface_of(
            Operation("cached", 1, schema, handler, ttl_seconds=ttl),
            Operation("fresh", 1, schema, handler, ttl_seconds=0),
            id="counted",
            needs_client_db=False,
        ),
        runs,
    )


async def test_cache_hit_miss_bypass_and_scope_isolation(queue: QueueClient) -> None:
    surface, runs = _counting_surface(ttl=60)
    async with running_worker(queue, surface) as (worker, _):

        async def once(op: str, auth: Any = STAFF) -> Any:
            enq = await submit(queue, "counted", op, {"n": 1}, auth)
            return (await wait_done(queue, enq.job_id)).result

        assert (await once("cached"))["cache"] == "miss"
        assert (await once("cached"))["cache"] == "hit"
        assert (await once("cached", NORTH))["cache"] == "miss"  # another scope: own entry
        assert (await once("cached", NORTH))["cache"] == "hit"
        assert (await once("fresh"))["cache"] == "bypass"
        assert (await once("fresh"))["cache"] == "bypass"
        assert len(runs) == 4  # two misses + two bypasses
        assert len(worker.cache) == 2

        await queue.notify(INVALIDATE_CHANNEL, "c:acme")
        await wait_until(lambda: len(worker.cache) == 0, within=5)
        assert (await once("cached"))["cache"] == "miss"


async def test_single_flight_under_a_forced_double_claim(queue: QueueClient, db: Database) -> None:
    """Two live rows with one dedupe key, claimed together: one handler execution."""
    release = trio.Event()
    surface, runs = _counting_surface(ttl=0, gate=release)
    env = envelope("counted", "fresh", {"n": 7})
    # Force what the unique index normally prevents (as a lease-lapse double claim would).
    first = await queue.enqueue("surface-counted", env.dedupe_key, env.to_json())
    second = await queue.enqueue("surface-counted", "twin", env.to_json())
    await db.execute("DROP INDEX maestro_queues_dedupe_live")
    await db.execute(
        "UPDATE maestro_queues SET dedupe_key = %(k)s WHERE id = %(id)s",
        {"k": env.dedupe_key, "id": second.job_id},
    )
    async with running_worker(queue, surface, concurrency=4) as (worker, _):
        # Both rows claimed, and every task blocked: the leader in its handler (held by
        # the gate), the twin waiting on the leader's flight. Only then may it finish.
        await wait_until(lambda: worker.statistics().in_flight == 2, within=10)
        await trio.testing.wait_all_tasks_blocked()
        release.set()
        a = await wait_done(queue, first.job_id)
        b = await wait_done(queue, second.job_id)
    assert len(runs) == 1
    assert a.result["data"] == b.result["data"] == {"n": 7, "client": "acme"}
    assert sorted([a.result["coalesced"], b.result["coalesced"]]) == [False, True]


async def test_large_results_go_out_as_blobs(queue: QueueClient) -> None:
    async with running_worker(queue, inline_max_bytes=1000):
        small = await submit(queue, "probe", "large", {"bytes": 100})
        big = await submit(queue, "probe", "large", {"bytes": 5000})
        r_small = await wait_done(queue, small.job_id)
        r_big = await wait_done(queue, big.job_id)
    assert r_small.result["data"]["filler"] == "x" * 100
    ref = r_big.result["blobRef"]
    assert "url" not in ref  # the BFF alone knows its URL layout; it adds the URL
    assert ref["contentType"] == "application/json"
    blob = await queue.get_blob(big.job_id)
    assert blob is not None and blob.size == ref["size"] and b"x" * 5000 in blob.data


async def test_heartbeat_keeps_a_job_longer_than_its_lease(queue: QueueClient) -> None:
    async with running_worker(queue, lease_seconds=0.6, renew_seconds=0.2, worker_id="keeper"):
        enq = await submit(queue, "probe", "sleep", {"ms": 2000})
        await wait_until(lambda: _is_in_progress(queue, enq.job_id), within=5)
        # Meanwhile a rival keeps trying to claim it: it never can.
        # Wall-clock: the 0.6 s lease lapses in Postgres' clock unless renewed, so the
        # rival must keep trying across several lease periods of real time.
        with trio.move_on_after(1.6):
            while True:
                assert await queue.claim("surface-probe", "rival") == []
                await trio.sleep(0.05)
        row = await wait_done(queue, enq.job_id)
    assert row.status == "done" and row.dequeue_count == 1 and row.locked_by == "keeper"


async def _is_in_progress(queue: QueueClient, job_id: uuid.UUID) -> bool:
    row = await queue.get(job_id)
    return row is not None and row.status == "in_progress"


async def test_a_lost_lease_cancels_the_job_and_drops_its_result(
    queue: QueueClient, db: Database
) -> None:
    async with running_worker(queue, lease_seconds=30, renew_seconds=0.2) as (worker, reports):
        enq = await submit(queue, "probe", "sleep", {"ms": 5000})
        await wait_until(lambda: _is_in_progress(queue, enq.job_id), within=5)
        # Someone else takes the row over (as after a lapse): the heartbeat notices.
        await db.execute(
            "UPDATE maestro_queues SET locked_by = 'usurper', dequeue_count = 2 WHERE id = %(id)s",
            {"id": enq.job_id},
        )
        await wait_until(lambda: worker.statistics().lost == 1, within=5)
        assert worker.statistics().in_flight == 0
    row = await queue.get(enq.job_id)
    assert row is not None and row.status == "in_progress" and row.locked_by == "usurper"
    assert [r.outcome for r in reports.items] == ["lost"]


async def test_shutdown_releases_what_outlives_the_grace(queue: QueueClient) -> None:
    async with running_worker(queue, shutdown_grace_seconds=0.3) as (worker, reports):
        quick = await submit(queue, "probe", "sleep", {"ms": 100})
        slow = await submit(queue, "probe", "sleep", {"ms": 30_000})
        await wait_until(lambda: worker.statistics().in_flight == 2, within=5)
        worker.stop()
    r_quick = await queue.get(quick.job_id)
    r_slow = await queue.get(slow.job_id)
    assert r_quick is not None and r_quick.status == "done"
    assert r_slow is not None and r_slow.status == "pending" and r_slow.dequeue_count == 0
    assert sorted(r.outcome for r in reports.items) == ["done", "released"]
