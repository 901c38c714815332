"""The worker in-process on a real Postgres: execution, errors, gates re-checked,
cache, single-flight, blobs, leases."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import Any

import trio
import trio.testing

from dataplane.db import (
    Database,
    DatabaseConfig,
    Notification,
    open_database,
)
from dataplane.db.lock import SessionLock
from dataplane.dev.embedded import free_port
from dataplane.queue import (
    JobRow,
    QueueClient,
    QueueConfig,
    done_channel,
    split_done_notify,
    wake_channel,
)
from dataplane.surfaces import probe
from dataplane.surfaces.manifest import (
    STAFF_ONLY,
    Operation,
    OperationContext,
    branch_in_scope,
    surface_of,
)
from dataplane.worker import JobReport, Worker, WorkerConfig
from dataplane.worker.pipeline.cache import INVALIDATE_CHANNEL
from tests.conftest import wait_until
from tests.helpers import NORTH, STAFF, envelope, read_blob, session_locks, submit


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


NO_POLLS = {"idle_ms": 60_000, "poll_start_ms": 60_000}  # only a notify or a take-over claims
WAKE = wake_channel("surface-probe")


def _wake_notifies(worker: Worker) -> int:
    """Enqueue notifies this worker's listener delivered: answered or ignored (the
    listener's own count takes in the cache-invalidation channel too)."""
    return worker.notify_wakes + worker.notifies_ignored


def _hears_wake(worker: Worker) -> bool:
    return WAKE in worker.listener.statistics().listening


async def test_of_four_idle_workers_only_the_one_on_call_hears_enqueues(
    queue: QueueClient,
) -> None:
    async with AsyncExitStack() as stack:
        workers = [
            (await stack.enter_async_context(running_worker(queue, worker_id=f"w{i}", **NO_POLLS)))[
                0
            ]
            for i in range(4)
        ]
        for w in workers:
            await w.claimer.wait_idle_claims(1)
        await wait_until(lambda: sum(w.statistics().takeovers for w in workers) == 1)
        (on_call,) = [w for w in workers if w.oncall.on_call]
        # Settled: the three waiting for the call have UNLISTENed, the one on call LISTENs.
        await wait_until(lambda: all(_hears_wake(w) == (w is on_call) for w in workers))
        received = {w: _wake_notifies(w) for w in workers}
        claims = {w: w.statistics().claims for w in workers}

        for i in range(5):
            enq = await submit(queue, "probe", "echo", {"value": i})
            assert (await wait_done(queue, enq.job_id)).status == "done"
        await wait_until(lambda: _wake_notifies(on_call) == received[on_call] + 5)

        # The five notifies reached one process; the other three heard nothing at all.
        heard = {w.config.worker_id: _wake_notifies(w) - received[w] for w in workers}
        # Said when it fails (a rare flake): who took the call, who woke, who ignored.
        states = {
            w.config.worker_id: (w.statistics().takeovers, w.notify_wakes, w.notifies_ignored)
            for w in workers
        }
        assert heard == {w.config.worker_id: 5 if w is on_call else 0 for w in workers}, states
        assert on_call.statistics().claimed == 5
        assert all(w.statistics().claims == claims[w] for w in workers if w is not on_call)
        assert all(w.statistics().notifies_ignored == 0 for w in workers)


async def test_the_call_passes_on_and_a_job_enqueued_in_the_gap_is_claimed(
    queue: QueueClient, db: Database
) -> None:
    # The test's own session queues for the on-call lock right behind the first worker,
    # so when that worker stops, the test holds the call: nobody listens and nobody
    # claims (no polls). A job enqueued then can only be found by the take-over claim of
    # the next worker when the test lets go.
    gate = SessionLock(db.config, "oncall:surface-probe", loop=db.loop)
    got_gate, stop_first, first_stopped = trio.Event(), trio.Event(), trio.Event()

    async def queue_for_the_call() -> None:
        await gate.acquire()
        got_gate.set()

    async def run_first(*, task_status: trio.TaskStatus[Worker]) -> None:
        async with running_worker(queue, worker_id="first", **NO_POLLS) as (worker, _):
            task_status.started(worker)
            await stop_first.wait()
        first_stopped.set()

    async with trio.open_nursery() as nursery, AsyncExitStack() as stack:
        stack.callback(gate.close)
        first = await nursery.start(run_first)
        await wait_until(lambda: first.oncall.on_call and _hears_wake(first))
        nursery.start_soon(queue_for_the_call)
        await wait_until(lambda: _waiting_for_the_call(db, 1))
        rest = [
            (await stack.enter_async_context(running_worker(queue, worker_id=w, **NO_POLLS)))[0]
            for w in ("second", "third")
        ]
        await wait_until(lambda: _waiting_for_the_call(db, 3))
        await wait_until(lambda: not any(_hears_wake(w) for w in rest))

        stop_first.set()  # the worker on call stops (idle)
        with trio.fail_after(10):
            await first_stopped.wait()
            await got_gate.wait()
        gap = await submit(queue, "probe", "echo", {"value": "in the gap"})
        assert not any(_hears_wake(w) for w in rest)  # nobody to notify
        await gate.release()  # the next in line takes the call: LISTEN, then claim

        with trio.fail_after(5):  # no poll for 60 s: only the take-over claim finds it
            assert (await wait_done(queue, gap.job_id)).status == "done"
        (on_call,) = [w for w in rest if w.oncall.on_call]
        (other,) = [w for w in rest if w is not on_call]
        assert _hears_wake(on_call) and not _hears_wake(other)
        heard = other.listener.statistics().received
        after = await submit(queue, "probe", "echo", {"value": "after"})
        with trio.fail_after(5):  # the notify, heard by the new worker on call
            assert (await wait_done(queue, after.job_id)).status == "done"
        assert on_call.statistics().claimed == 2 and other.statistics().claimed == 0
        assert other.listener.statistics().received == heard


async def _waiting_for_the_call(db: Database, sessions: int) -> bool:
    held, waiting = await session_locks(db)
    return held == 1 and waiting == sessions


async def test_a_lock_lost_with_its_server_session_is_taken_again(
    queue: QueueClient, db: Database
) -> None:
    """A failover (or a restart) ends the on-call lock's session while its holder runs
    no statement on it: the holder finds out (issue #33) and takes the call again on the
    server it reaches now, instead of believing it holds a lock nobody holds."""
    async with running_worker(queue, **NO_POLLS) as (worker, _):
        await wait_until(lambda: worker.oncall.on_call and _hears_wake(worker))
        assert await session_locks(db) == (1, 0)
        takeovers = worker.statistics().takeovers
        await db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks"
            " WHERE locktype = 'advisory' AND objsubid = 2 AND granted"
        )
        await wait_until(lambda: worker.statistics().takeovers > takeovers, within=10)
        await wait_until(lambda: worker.oncall.on_call)
        assert await session_locks(db) == (1, 0)
        enq = await submit(queue, "probe", "echo", {"value": "after the lock came back"})
        with trio.fail_after(5):  # no polls: the wake notify of the worker on call
            assert (await wait_done(queue, enq.job_id)).status == "done"


async def test_a_full_worker_lets_another_answer_the_notify(queue: QueueClient) -> None:
    no_polls = {**NO_POLLS, "concurrency": 1}
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

        # Anyone may NOTIFY: an unsealed tag, a sealed one too long, a stale one are refused.
        stale = queue.seal.seal_invalidation("c:acme", now=time.time() - 3600)  # type: ignore[union-attr]
        too_long = queue.seal.seal_invalidation("c:" + "a" * 8000)  # type: ignore[union-attr]
        for payload in ("c:acme", stale, too_long[:7999]):
            await queue.notify(INVALIDATE_CHANNEL, payload)
        await wait_until(lambda: worker.invalidations.refused == 3, within=5)
        assert len(worker.cache) == 2
        await queue.invalidate("c:acme")  # sealed with the plane's notify secret
        await wait_until(lambda: len(worker.cache) == 0, within=5)
        assert (await once("cached"))["cache"] == "miss"


async def _twin_rows(queue: QueueClient, db: Database, params: dict[str, Any]) -> tuple[Any, Any]:
    """Two live ``counted.fresh`` rows with one dedupe key: what the unique index
    normally prevents (as a lease-lapse double claim would), forced."""
    env = envelope("counted", "fresh", params)
    first = await queue.enqueue("surface-counted", env.dedupe_key, env.to_json())
    second = await queue.enqueue("surface-counted", "twin", env.to_json())
    await db.execute("DROP INDEX maestro_queues_dedupe_live")
    await db.execute(
        "UPDATE maestro_queues SET dedupe_key = %(k)s WHERE id = %(id)s",
        {"k": env.dedupe_key, "id": second.job_id},
    )
    return first, second


async def test_single_flight_under_a_forced_double_claim(queue: QueueClient, db: Database) -> None:
    """Two live rows with one dedupe key, claimed together: one handler execution."""
    release = trio.Event()
    surface, runs = _counting_surface(ttl=0, gate=release)
    first, second = await _twin_rows(queue, db, {"n": 7})
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


async def test_a_handler_past_its_timeout_fails_and_its_coalesced_twin_with_it(
    queue: QueueClient, db: Database
) -> None:
    """The timeout cancels a handler that never returns (the deadline keeper), and the
    job waiting on its execution (single flight) fails with it; no claim is left held."""
    never = trio.Event()
    surface, runs = _counting_surface(ttl=0, gate=never)
    first, second = await _twin_rows(queue, db, {"n": 3})
    config = {"concurrency": 4, "max_handler_seconds": 0.3, "fail_backoff_seconds": 600}
    async with running_worker(queue, surface, **config) as (worker, reports):
        started = trio.current_time()
        await wait_until(lambda: worker.statistics().failed == 2, within=10)
        took = trio.current_time() - started
        assert worker.statistics().in_flight == 0
        # The leader's deadline, and the twin's own a moment later (waiting on the
        # leader's flight): one wake of the keeper may find both due.
        assert 1 <= worker.executor.deadlines.timeouts <= 2
        rows = [await queue.get(first.job_id), await queue.get(second.job_id)]
    assert len(runs) == 1 and took < 5  # the gate never opens: only the timeout ends it
    for row in rows:
        assert row is not None and row.status == "pending" and row.dequeue_count == 1
        assert "HandlerTimeout: TIMEOUT: fresh ran past its 0.3s timeout" in (row.last_error or "")
    assert [r.outcome for r in reports.items] == ["failed", "failed"]


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
    blob = await read_blob(queue, big.job_id)
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


async def test_a_worker_beats_and_leaves_its_liveness_row_after_its_release(
    queue: QueueClient, db: Database
) -> None:
    """Serving, its row of maestro_workers is alive and names the key ids of its notify
    secrets; stopped gracefully, it releases what outlives the grace, then removes it."""
    alive = (
        "SELECT type, opens, alive_until > now() AS alive FROM maestro_workers"
        " WHERE worker_id = 'beating'"
    )
    async with running_worker(queue, shutdown_grace_seconds=0.3, worker_id="beating") as (
        worker,
        _,
    ):
        row = await db.fetchone(alive)
        assert queue.seal is not None and row is not None
        assert dict(row) == {"type": "surface-probe", "opens": [queue.seal.key_id], "alive": True}
        slow = await submit(queue, "probe", "sleep", {"ms": 30_000})
        await wait_until(lambda: worker.statistics().in_flight == 1, within=5)
        worker.stop()
    released = await queue.get(slow.job_id)
    assert released is not None and released.status == "pending"
    assert await db.fetchone(alive) is None


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


async def test_at_idle_an_enqueue_costs_the_worker_on_call_one_claim(queue: QueueClient) -> None:
    """The poll backoff does not restart on work while the worker hears the enqueue
    notify: the next job is announced, so a poll 100 ms after each job (a second claim
    per enqueue) would find nothing."""
    async with running_worker(queue, poll_start_ms=100, idle_ms=5_000) as (worker, _):
        await wait_until(lambda: worker.oncall.on_call and worker.listener.connected)
        await worker.claimer.wait_idle_claims(4)  # backed off: 100, 200, 400, 800 ms ...
        for i in range(3):
            before = worker.statistics().claims
            enq = await submit(queue, "probe", "echo", {"value": f"one-claim-{i}"})
            assert (await wait_done(queue, enq.job_id)).status == "done"
            await trio.sleep(0.5)  # past where the 100 ms poll after work would have run
            assert worker.statistics().claims - before == 1


async def test_at_idle_a_job_takes_no_turn_of_the_on_call_task(queue: QueueClient) -> None:
    """On call with free slots, a job taking and freeing a slot changes nothing to
    decide: the on-call task stays asleep (it woke two or three times per job)."""
    async with running_worker(queue, **NO_POLLS) as (worker, _):
        # settled, not only on call: the turn that took the call still ends in one more
        # (the one that sleeps), and counting from inside it saw that turn as a job's
        await wait_until(lambda: worker.oncall.settled and _hears_wake(worker))
        await worker.claimer.wait_idle_claims(1)
        turns = worker.oncall.turns
        for i in range(5):
            enq = await submit(queue, "probe", "echo", {"value": f"quiet-{i}"})
            assert (await wait_done(queue, enq.job_id)).status == "done"
        await wait_until(lambda: worker.statistics().in_flight == 0)
        assert worker.statistics().done == 5
        assert worker.oncall.turns == turns


async def test_a_full_worker_still_steps_down_and_takes_the_call_back(
    queue: QueueClient,
) -> None:
    """The changes that matter still wake it: full for STEP_DOWN_AFTER, the worker lets
    the call go; a slot free again, it takes the call back."""
    async with running_worker(queue, concurrency=1, **NO_POLLS) as (worker, _):
        await wait_until(lambda: worker.oncall.on_call and _hears_wake(worker))
        enq = await submit(queue, "probe", "sleep", {"ms": 500})
        await wait_until(lambda: not worker.oncall.on_call)  # full: stepped down
        assert (await wait_done(queue, enq.job_id)).status == "done"
        await wait_until(lambda: worker.oncall.on_call)  # a slot free: on call again


async def test_a_failed_job_is_claimed_when_its_backoff_ends_not_at_the_next_poll(
    queue: QueueClient,
) -> None:
    """No notify announces a retry: the worker that failed the job schedules a claim
    for when its backoff ends (here with a 60 s poll, so nothing else could claim it)."""
    async with running_worker(queue, fail_backoff_seconds=0.4, **NO_POLLS) as (worker, _):
        await worker.claimer.wait_idle_claims(1)
        enq = await submit(queue, "probe", "fail", {"times": 1})
        with trio.fail_after(5):  # 60 s without the scheduled claim
            row = await wait_done(queue, enq.job_id)
        assert row.status == "done" and row.dequeue_count == 2
        assert worker.statistics().failed == 1


async def test_answers_ride_sealed_in_notifies_only_with_a_notify_secret(
    queue: QueueClient, db: Database
) -> None:
    """A worker holding DATAPLANE_NOTIFY_SECRET seals a small answer into the done
    notify (only the secret opens it); one without names the job alone."""
    listener = db.listener([done_channel("surface-probe")])
    heard: list[str] = []

    async def record() -> None:
        async for event in listener.events:
            if isinstance(event, Notification):
                heard.append(event.payload)

    async def answered(client: QueueClient, value: str) -> str:
        enq = await submit(client, "probe", "echo", {"value": value})
        assert (await wait_done(client, enq.job_id)).status == "done"
        await wait_until(lambda: any(p.startswith(str(enq.job_id)) for p in heard))
        return next(p for p in heard if p.startswith(str(enq.job_id)))

    async with trio.open_nursery() as nursery:
        await nursery.start(listener.run)
        nursery.start_soon(record)
        async with running_worker(queue):
            payload = await answered(queue, "sealed")
            job_id, sealed = split_done_notify(payload)
            assert sealed is not None and "sealed" not in sealed and queue.seal is not None
            note = queue.seal.open(str(job_id), sealed)
            row = None if note is None else JobRow.from_done_note(job_id, note)
            assert row is not None and row.result["data"]["echo"] == "sealed"
        unsealed = QueueClient(db, QueueConfig())
        async with running_worker(unsealed):
            assert len(await answered(unsealed, "named")) == 36  # the id alone
        nursery.cancel_scope.cancel()


async def test_a_worker_stopped_while_its_queue_db_is_gone_at_start_stops(bridge: Any) -> None:
    """The queue DB went away between the boot check and the listener's first LISTEN
    (nothing listens on the port): a stop, as SIGTERM or Ctrl-C sends, ends the
    starting worker. It used to wait for the listener to connect, for ever."""
    dsn = f"host=127.0.0.1 port={free_port()} user=postgres dbname=postgres"
    async with open_database(DatabaseConfig(dsn, pool_size=2), loop=bridge) as db:
        queue = QueueClient(db)
        worker = Worker(
            WorkerConfig(queue_type="surface-probe", worker_id="w-gone"),
            probe.SURFACE,
            queue,
            client_db=None,
            reporter=Reports(),
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run)
            await trio.sleep(0.5)  # the listener has failed and waits to retry
            assert not worker.listener.connected
            worker.stop()
            nursery.cancel_scope.deadline = trio.current_time() + 5
        assert not nursery.cancel_scope.cancelled_caught  # ended by the stop, not here
        assert worker.statistics().claims == 0
